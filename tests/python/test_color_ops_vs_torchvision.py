"""The colour ops (core/decode/color_ops.h, through tests/tools/color_ops_tool)
against torchvision 0.14's functional ops on PIL images (Pillow 9.4).

Images: random noise, smooth gradients, a natural-looking scene (1/f noise,
shapes and grain from jpeg_fixtures), that scene after a JPEG round trip
through PIL, narrow-range and few-valued images (autocontrast, equalize),
a constant image, and 1x1, 2x5, 5x2, 3x3 edge cases; hue also runs on a
sample of 2^18 distinct colours.

Tolerance: none for brightness, contrast, saturation, sharpness, hue,
grayscale, posterize, solarize, autocontrast and equalize: every case must be
byte-identical (hue was also checked on all 2^24 colours for every one of its
255 shifts). Gaussian blur is a separable float32 filter where torchvision
convolves with the 2-D outer-product kernel (and computes exp() its own way):
a value near .5 may round the other way. Measured over these cases: max
difference 1 level, on about 1e-5 of the bytes (at most a few bytes in any
one case); asserted: max 1, at most 0.5% + 2 bytes of any case, and 0.05% of
all blur bytes together.
"""
import io
import os
import subprocess
import tempfile

import numpy as np
import pytest
import torchvision.transforms.functional as F
from PIL import Image

import jpeg_fixtures as jf

TOOL = os.path.join(jf.build_dir(), "tests", "color_ops_tool")

BLEND_FACTORS = [0.0, 0.3, 0.5, 1.0, 1.7, 2.5, -0.4, 0.8123456789, 1.1999999284744263]
HUE_FACTORS = [-0.5, -0.37, -0.1, -0.002, 0.0, 0.003, 0.1, 0.25, 1.0 / 3.0, 0.5]
THRESHOLDS = [0.0, 0.5, 1.0, 64.0, 127.5, 128.0, 200.7, 255.0, 255.5, 256.0, 300.0, -1.0]
BLUR_KERNELS = [(1, 1), (3, 3), (5, 5), (9, 9), (3, 9), (9, 1)]
BLUR_SIGMAS = [(0.1, 0.1), (0.5, 0.5), (1.0, 1.0), (2.0, 2.0), (0.7, 1.9), (1.3, 0.4)]

BLENDS = {
    "brightness": F.adjust_brightness,
    "contrast": F.adjust_contrast,
    "saturation": F.adjust_saturation,
    "sharpness": F.adjust_sharpness,
}
NO_PARAMETER_OPS = {
    "grayscale": lambda img: F.rgb_to_grayscale(img, num_output_channels=3),
    "autocontrast": F.autocontrast,
    "equalize": F.equalize,
}


def noise(width, height, seed):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, size=(height, width, 3), dtype=np.uint8)


def gradient(width, height):
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float64)
    r = xx / max(width - 1, 1) * 255.0
    g = yy / max(height - 1, 1) * 255.0
    b = 128.0 + 100.0 * np.sin(xx / 7.0 + yy / 11.0)
    return np.clip(np.stack([r, g, b], axis=-1) + 0.5, 0, 255).astype(np.uint8)


def jpeg_round_trip(arr):
    buf = io.BytesIO()
    Image.fromarray(arr, "RGB").save(buf, format="JPEG", quality=80)
    buf.seek(0)
    with Image.open(buf) as im:
        return np.asarray(im.convert("RGB")).copy()


def narrow(width, height, seed):
    """Values in a narrow band per channel (autocontrast stretches it)."""
    rng = np.random.default_rng(seed)
    lo = np.array([90, 20, 180])
    return (lo + rng.integers(0, 40, size=(height, width, 3))).astype(np.uint8)


def few_values(width, height, seed):
    rng = np.random.default_rng(seed)
    return rng.choice(np.array([0, 17, 200, 255], np.uint8), size=(height, width, 3))


def colour_sample():
    """2^18 distinct colours, 512 x 512."""
    rng = np.random.default_rng(11)
    codes = rng.choice(1 << 24, size=1 << 18, replace=False).astype(np.uint32)
    arr = np.stack([codes >> 16, (codes >> 8) & 255, codes & 255], axis=-1)
    return arr.astype(np.uint8).reshape(512, 512, 3)


IMAGES = {
    "noise_37x23": lambda: noise(37, 23, 1),
    "gradient_64x48": lambda: gradient(64, 48),
    "scene_97x71": lambda: jf.natural_image(97, 71, 3),
    "scene_jpeg_120x90": lambda: jpeg_round_trip(jf.natural_image(120, 90, 5)),
    "narrow_31x17": lambda: narrow(31, 17, 2),
    "few_values_16x9": lambda: few_values(16, 9, 4),
    "constant_7x5": lambda: np.full((5, 7, 3), (40, 90, 200), np.uint8),
    "noise_1x1": lambda: noise(1, 1, 6),
    "noise_2x5": lambda: noise(2, 5, 7),
    "noise_5x2": lambda: noise(5, 2, 8),
    "noise_3x3": lambda: noise(3, 3, 9),
}


@pytest.fixture(scope="module")
def tmp():
    jf.require_tool("color_ops_tool")
    with tempfile.TemporaryDirectory(prefix="conveyor_color_ops_") as d:
        yield d


@pytest.fixture(scope="module")
def cases(tmp):
    return {name: Case(tmp, name, make()) for name, make in IMAGES.items()}


class Case:
    """One image written once for the tool, then run through op after op."""

    def __init__(self, tmp, name, arr):
        self.name = name
        self.arr = arr
        self.pil = Image.fromarray(arr, "RGB")
        self.src = os.path.join(tmp, name + ".raw")
        self.dst = os.path.join(tmp, name + ".out.raw")
        arr.tofile(self.src)

    def run(self, op, *params):
        """The tool's output, or its stderr when it refuses."""
        h, w, _ = self.arr.shape
        args = [repr(p) if isinstance(p, float) else str(p) for p in params]
        proc = subprocess.run([TOOL, op, str(w), str(h), self.src, self.dst, *args],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            return proc.stderr
        return np.fromfile(self.dst, np.uint8).reshape(h, w, 3)

    def ours(self, op, *params):
        out = self.run(op, *params)
        assert not isinstance(out, str), out
        return out


def assert_identical(case, op, param, ours, ref):
    if np.array_equal(ours, ref):
        return
    differ = np.any(ours != ref, axis=-1)
    diff = np.abs(ours.astype(int) - ref.astype(int)).max()
    pytest.fail("%s %s on %s: %d of %d pixels differ (max %d), first at %s"
                % (op, param, case.name, differ.sum(), differ.size, diff,
                   tuple(np.argwhere(differ)[0])))


@pytest.mark.parametrize("op", sorted(BLENDS))
def test_blends_are_exact(cases, op):
    for case in cases.values():
        for factor in BLEND_FACTORS:
            ref = np.asarray(BLENDS[op](case.pil, factor))
            assert_identical(case, op, factor, case.ours(op, factor), ref)


def test_hue_is_exact(cases, tmp):
    every = dict(cases, colours=Case(tmp, "colours", colour_sample()))
    for case in every.values():
        for factor in HUE_FACTORS:
            ref = np.asarray(F.adjust_hue(case.pil, factor))
            assert_identical(case, "hue", factor, case.ours("hue", factor), ref)


@pytest.mark.parametrize("op", sorted(NO_PARAMETER_OPS))
def test_parameterless_ops_are_exact(cases, op):
    for case in cases.values():
        ref = np.asarray(NO_PARAMETER_OPS[op](case.pil))
        assert_identical(case, op, "", case.ours(op), ref)


def test_posterize_is_exact(cases):
    for case in cases.values():
        for bits in range(9):
            ref = np.asarray(F.posterize(case.pil, bits))
            assert_identical(case, "posterize", bits, case.ours("posterize", bits), ref)


def test_solarize_is_exact(cases):
    for case in cases.values():
        for threshold in THRESHOLDS:
            ref = np.asarray(F.solarize(case.pil, threshold))
            assert_identical(case, "solarize", threshold, case.ours("solarize", threshold), ref)


def test_blur_within_tolerance(cases):
    differing = total = 0
    for case in cases.values():
        h, w, _ = case.arr.shape
        for kw, kh in BLUR_KERNELS:
            if kw // 2 >= w or kh // 2 >= h:
                continue
            for sx, sy in BLUR_SIGMAS:
                ref = np.asarray(F.gaussian_blur(case.pil, [kw, kh], [sx, sy]))
                ours = case.ours("blur", kw, kh, sx, sy)
                diff = np.abs(ours.astype(int) - ref.astype(int))
                where = "blur %s on %s" % ((kw, kh, sx, sy), case.name)
                assert diff.max() <= 1, "%s: max difference %d" % (where, diff.max())
                count = int(np.count_nonzero(diff))
                assert count <= 0.005 * diff.size + 2, "%s: %d bytes differ" % (where, count)
                differing += count
                total += diff.size
    assert differing <= 0.0005 * total, "%d of %d blurred bytes differ" % (differing, total)


def test_blur_kernel_limit_matches_reflect_padding(cases):
    """The tool refuses exactly the kernels torchvision's reflect padding rejects."""
    for name in ["noise_5x2", "noise_1x1", "noise_3x3", "noise_2x5"]:
        case = cases[name]
        for kw, kh in [(1, 1), (3, 3), (5, 1), (1, 5), (7, 3), (9, 9), (11, 1), (1, 3)]:
            try:
                ref = np.asarray(F.gaussian_blur(case.pil, [kw, kh], [1.0, 1.0]))
            except RuntimeError:
                ref = None
            out = case.run("blur", kw, kh, 1.0, 1.0)
            if ref is None:
                assert isinstance(out, str) and "too large" in out, (name, kw, kh)
            else:
                assert not isinstance(out, str), (name, kw, kh, out)
                assert np.abs(out.astype(int) - ref.astype(int)).max() <= 1, (name, kw, kh)
