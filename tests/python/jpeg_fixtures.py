"""JPEG fixtures for the decode tests: natural-looking images (1/f noise,
gradients, shapes, grain) saved in the JPEG flavours the decoder must handle,
and helpers to run transform_tool. Only numpy, PIL and libjpeg-turbo-progs
(cjpeg / jpegtran) are needed."""

import json
import os
import subprocess

import numpy as np
from PIL import Image, ImageDraw


def build_dir():
    return os.environ.get("CONVEYOR_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "build-decode"))


def tool_path():
    return os.path.join(build_dir(), "tests", "transform_tool")


def require_tool(name):
    """The path of test tool `name`: a failure when the build dir was given
    (CONVEYOR_BUILD_DIR) but lacks it, a skip when no build was pointed at."""
    import pytest
    path = os.path.join(build_dir(), "tests", name)
    if not os.path.exists(path):
        if "CONVEYOR_BUILD_DIR" in os.environ:
            pytest.fail("missing %s" % path)
        pytest.skip("%s not built" % name)
    return path


def natural_image(width, height, seed):
    """RGB uint8 array with a 1/f spectrum, smooth gradients, shapes and grain."""
    rng = np.random.default_rng(seed)
    fy = np.fft.fftfreq(height)[:, None]
    fx = np.fft.rfftfreq(width)[None, :]
    f = np.sqrt(fx * fx + fy * fy)
    f[0, 0] = 1.0
    channels = []
    lum = None
    for c in range(3):
        spec = (rng.normal(size=f.shape) + 1j * rng.normal(size=f.shape)) / f ** 1.1
        field = np.fft.irfft2(spec, s=(height, width))
        field = (field - field.mean()) / (field.std() + 1e-9)
        if lum is None:
            lum = field
        channels.append(0.6 * lum + 0.4 * field)
    img = np.stack(channels, axis=-1) * 40.0 + 128.0
    yy, xx = np.mgrid[0:height, 0:width]
    img += (xx / width * 60.0 - 30.0)[..., None] * np.array([1.0, 0.5, -0.5])
    img += (yy / height * 50.0 - 25.0)[..., None] * np.array([-0.3, 0.8, 0.4])
    pil = Image.fromarray(np.clip(img, 0, 255).astype(np.uint8), "RGB")
    draw = ImageDraw.Draw(pil)
    for _ in range(8):
        x0, y0 = rng.integers(0, width), rng.integers(0, height)
        x1, y1 = x0 + rng.integers(5, max(6, width // 3)), y0 + rng.integers(5, max(6, height // 3))
        color = tuple(int(v) for v in rng.integers(0, 256, size=3))
        if rng.random() < 0.5:
            draw.ellipse([x0, y0, x1, y1], fill=color)
        else:
            draw.line([x0, y0, x1, y1], fill=color, width=int(rng.integers(1, 6)))
    arr = np.asarray(pil).astype(np.int16)
    arr += rng.integers(-6, 7, size=arr.shape, dtype=np.int16)
    return np.clip(arr, 0, 255).astype(np.uint8)


def save_variants(directory, width=333, height=251, seed=7):
    """Writes one file per flavour; returns {name: path}."""
    os.makedirs(directory, exist_ok=True)
    arr = natural_image(width, height, seed)
    img = Image.fromarray(arr, "RGB")
    paths = {}

    def path(name):
        p = os.path.join(directory, name + ".jpg")
        paths[name] = p
        return p

    img.save(path("baseline420"), quality=90, subsampling=2)
    img.save(path("baseline444"), quality=90, subsampling=0)
    img.save(path("baseline422"), quality=90, subsampling=1)
    img.convert("L").save(path("gray"), quality=90)
    # CMYK: PIL writes Adobe-style inverted CMYK (what Photoshop produces).
    cmyk = np.empty((height, width, 4), np.uint8)
    cmyk[..., :3] = 255 - arr
    cmyk[..., 3] = np.clip(natural_image(width, height, seed + 1)[..., 0].astype(int) - 60, 0, 255)
    Image.fromarray(cmyk, "CMYK").save(path("cmyk"), quality=90)
    ppm = os.path.join(directory, "src.ppm")
    img.save(ppm)
    subprocess.run(["cjpeg", "-quality", "88", "-progressive", "-outfile", path("progressive"), ppm], check=True)
    subprocess.run(["cjpeg", "-quality", "88", "-restart", "1", "-outfile", path("restart"), ppm], check=True)
    subprocess.run(["jpegtran", "-arithmetic", "-outfile", path("arithmetic"), paths["baseline420"]], check=True)
    subprocess.run(["jpegtran", "-arithmetic", "-progressive", "-outfile", path("arith_progressive"),
                    paths["baseline444"]], check=True)
    return paths


def run_tool(*args, check=True):
    """Runs transform_tool; returns (json lines, CompletedProcess)."""
    proc = subprocess.run([tool_path(), *[str(a) for a in args]], capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise AssertionError("transform_tool %s failed: %s" % (args, proc.stderr))
    lines = [json.loads(l) for l in proc.stdout.splitlines() if l.startswith("{")]
    return lines, proc


def tool_decode(jpeg, tmp, scale=1, region=None):
    out = os.path.join(tmp, "decode.raw")
    args = ["decode", jpeg, out, "--scale", scale]
    if region is not None:
        args += ["--region", ",".join(str(v) for v in region)]
    lines, _ = run_tool(*args)
    w, h = lines[0]["width"], lines[0]["height"]
    return np.fromfile(out, np.uint8).reshape(h, w, 3)
