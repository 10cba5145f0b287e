"""Images other than JPEG (PNG, GIF, WebP, BMP, TIFF; decoded with
libavcodec) against Pillow's Image.open(f).convert("RGB"), format by format
and mode by mode. Each image goes through SampleTransformer (transform_tool
run) in eval mode with resize_size equal to its shorter side and the output
its own size: no resampling, so the output is the decoded pixels.

Exact, every format and mode, with two documented exceptions: a CMYK TIFF
(FFmpeg converts it, within one level of Pillow), and a 16-bit grey
PNG, which Pillow opens as mode "I" and whose convert("RGB") clips at 255;
ours is scaled (the high byte), like every other 16-bit image.
Test images are written by the test with Pillow and the ffmpeg CLI.
"""

import os
import struct
import subprocess
import tempfile
import zlib

import numpy as np
import pytest
from PIL import Image

import jpeg_fixtures as jf

W = H = 37  # square (eval: resize_size >= both sides), odd: row padding, chroma edges


@pytest.fixture(scope="module")
def tmp():
    with tempfile.TemporaryDirectory(prefix="conveyor_formats_") as d:
        yield d


def _rgb(seed=0, w=W, h=H):
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.stack([xx * 5, yy * 7, (xx + yy) * 3], -1) + rng.integers(0, 60, (h, w, 3))
    return np.clip(base, 0, 255).astype(np.uint8)


def _pil(mode, seed=0):
    img = Image.fromarray(_rgb(seed))
    if mode == "RGB":
        return img
    if mode == "RGBA":
        a = np.asarray(img)[:, :, 0]
        return Image.fromarray(np.dstack([np.asarray(img), 255 - a]), "RGBA")
    if mode == "LA":
        return img.convert("LA")
    if mode == "P":
        return img.quantize(colors=37)
    return img.convert(mode)


def decode(path, tmp, w=W, h=H):
    """Our decode through the whole transform path, as an HxWx3 array."""
    out = os.path.join(tmp, "out.raw")
    jf.run_tool("run", path, out, "--mode", "eval", "--size", "%d,%d" % (h, w),
                "--resize-size", min(w, h), "--layout", "nhwc", "--dtype", "uint8", "--no-dct")
    return np.fromfile(out, np.uint8).reshape(h, w, 3)


def reference(path):
    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"))


def assert_same(ours, ref, what):
    assert ours.shape == ref.shape, what
    diff = np.abs(ours.astype(int) - ref.astype(int))
    assert diff.max() == 0, "%s: max diff %d at %s" % (
        what, diff.max(), np.unravel_index(diff.argmax(), diff.shape))


def _save(tmp, name, img, fmt, **kw):
    path = os.path.join(tmp, name)
    img.save(path, fmt, **kw)
    return path


# ---------------------------------------------------------------------- PNG
PNG_CASES = {
    "rgb": lambda: _pil("RGB"),
    "rgba": lambda: _pil("RGBA"),
    "grey": lambda: _pil("L"),
    "grey_alpha": lambda: _pil("LA"),
    "palette": lambda: _pil("P"),
    "bilevel": lambda: _pil("1"),
}


@pytest.mark.parametrize("case", sorted(PNG_CASES))
def test_png_modes_equal_pil(tmp, case):
    path = _save(tmp, "%s.png" % case, PNG_CASES[case](), "PNG")
    assert_same(decode(path, tmp), reference(path), case)


def test_png_interlaced_and_palette_transparency_equal_pil(tmp):
    pal = _pil("P")
    path = _save(tmp, "pal_trns.png", pal, "PNG", transparency=bytes(range(0, 255, 7)))
    assert_same(decode(path, tmp), reference(path), "palette + tRNS")
    path = _save(tmp, "rgb_trns.png", _pil("RGB"), "PNG", transparency=(10, 20, 30))
    assert_same(decode(path, tmp), reference(path), "RGB + tRNS")
    path = _save(tmp, "grey_trns.png", _pil("L"), "PNG", transparency=7)
    assert_same(decode(path, tmp), reference(path), "grey + tRNS")
    # Adam7 (Pillow cannot write it): the passes' rows zlib-compressed here.
    path = os.path.join(tmp, "adam7.png")
    _write_adam7_png(path, _rgb(3))
    assert_same(decode(path, tmp), reference(path), "interlaced")


def _write_adam7_png(path, px):
    """An interlaced 8-bit RGB PNG of `px` (filter type 0 on every row)."""
    h, w, _ = px.shape
    raw = b""
    for x0, y0, dx, dy in [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4),
                           (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]:
        for row in px[y0::dy, x0::dx]:
            if row.size:
                raw += b"\0" + row.tobytes()
    with open(path, "wb") as f:
        f.write(png_file(w, h, 8, 2, zlib.compress(raw), interlace=1))


def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_file(w, h, depth, color, idat, interlace=0):
    return (b"\x89PNG\r\n\x1a\n"
            + png_chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, color, 0, 0, interlace))
            + png_chunk(b"IDAT", idat) + png_chunk(b"IEND", b""))


@pytest.mark.parametrize("pix_fmt", ["rgb48be", "rgba64be", "ya16be"])
def test_png_16_bit_equals_pil_high_byte(tmp, pix_fmt):
    """16-bit RGB, RGBA and grey+alpha: Pillow keeps the high byte; so do we."""
    rng = np.random.default_rng(5)
    channels = {"rgb48be": 3, "rgba64be": 4, "ya16be": 2}[pix_fmt]
    raw = os.path.join(tmp, "%s.raw" % pix_fmt)
    rng.integers(0, 65536, (H, W, channels), dtype=np.uint16).astype(">u2").tofile(raw)
    path = os.path.join(tmp, "%s.png" % pix_fmt)
    subprocess.run(["ffmpeg", "-loglevel", "error", "-y", "-f", "rawvideo", "-pix_fmt", pix_fmt,
                    "-s", "%dx%d" % (W, H), "-i", raw, "-frames:v", "1", path], check=True)
    assert_same(decode(path, tmp), reference(path), pix_fmt)


def test_png_16_bit_grey_is_scaled_where_pil_clips(tmp):
    values = (np.arange(W * H).reshape(H, W) * 97 % 65536).astype(np.uint16)
    path = _save(tmp, "grey16.png", Image.fromarray(values), "PNG")
    with Image.open(path) as im:
        assert im.mode in ("I", "I;16")  # Pillow: 32-bit integer; convert clips
    ours = decode(path, tmp)
    assert_same(ours, np.repeat((values >> 8).astype(np.uint8)[:, :, None], 3, 2), "grey16")
    pil = reference(path)
    assert np.array_equal(pil[:, :, 0], np.clip(values, 0, 255).astype(np.uint8))


# --------------------------------------------------------- BMP, TIFF, GIF
@pytest.mark.parametrize("mode", ["RGB", "L", "P", "1"])
def test_bmp_equals_pil(tmp, mode):
    path = _save(tmp, "%s.bmp" % mode, _pil(mode), "BMP")
    assert_same(decode(path, tmp), reference(path), mode)


@pytest.mark.parametrize("mode,compression", [("RGB", None), ("RGB", "tiff_lzw"),
                                              ("RGB", "tiff_deflate"), ("RGBA", "packbits"),
                                              ("L", None), ("P", None)])
def test_tiff_equals_pil(tmp, mode, compression):
    kw = {"compression": compression} if compression else {}
    path = _save(tmp, "%s_%s.tif" % (mode, compression), _pil(mode), "TIFF", **kw)
    assert_same(decode(path, tmp), reference(path), "%s %s" % (mode, compression))


def test_gif_first_frame_equals_pil(tmp):
    frames = [_pil("RGB", s).quantize(colors=64) for s in range(3)]
    path = os.path.join(tmp, "anim.gif")
    frames[0].save(path, "GIF", save_all=True, append_images=frames[1:], duration=50, loop=0)
    with Image.open(path) as im:
        assert im.n_frames == 3
    assert_same(decode(path, tmp), reference(path), "animated GIF, first frame")
    path = _save(tmp, "still.gif", _pil("L"), "GIF")
    assert_same(decode(path, tmp), reference(path), "grey GIF")


# ----------------------------------------------------------------------- WebP
@pytest.mark.parametrize("mode", ["RGB", "RGBA"])
def test_lossless_webp_equals_pil(tmp, mode):
    path = _save(tmp, "lossless_%s.webp" % mode, _pil(mode), "WEBP", lossless=True)
    assert_same(decode(path, tmp), reference(path), mode)


@pytest.mark.parametrize("mode", ["RGB", "RGBA"])
@pytest.mark.parametrize("side", [37, 64])
def test_lossy_webp_equals_pil(tmp, mode, side):
    """Exact too: FFmpeg's VP8 planes are libwebp's (VP8 decoding is
    bit-exact), converted with libwebp's fancy upsampler and matrix."""
    img = Image.fromarray(_rgb(7, side, side))
    if mode == "RGBA":
        img.putalpha(128)
    path = _save(tmp, "lossy_%s_%d.webp" % (mode, side), img, "WEBP", quality=80)
    assert_same(decode(path, tmp, side, side), reference(path), "lossy %s" % mode)


def test_cmyk_tiff_within_one_level_of_pil(tmp):
    """FFmpeg's TIFF decoder converts CMYK to RGB itself, rounding unlike
    Pillow's cmyk2rgb: the one documented case off by (at most) one level."""
    path = _save(tmp, "cmyk.tif", Image.fromarray(_rgb(11)).convert("CMYK"), "TIFF")
    diff = np.abs(decode(path, tmp).astype(int) - reference(path).astype(int))
    assert diff.max() <= 1, diff.max()


def test_png_with_metadata_trailing_bytes_and_apng_equal_pil(tmp):
    """Ancillary chunks (text, compressed text, ICC profile, pHYs, eXIf),
    bytes after IEND, and an animated PNG (its default image, as Pillow
    opens it) decode as Pillow decodes them."""
    from PIL import ImageCms, PngImagePlugin
    info = PngImagePlugin.PngInfo()
    info.add_text("Comment", "hello")
    info.add_text("zipped", "compressed " * 20, zip=True)
    profile = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    path = _save(tmp, "meta.png", _pil("RGB", 12), "PNG", pnginfo=info, icc_profile=profile,
                 dpi=(300, 300), exif=Image.Exif().tobytes())
    assert_same(decode(path, tmp), reference(path), "metadata")
    with open(path, "rb") as f:
        data = f.read()
    trailing = os.path.join(tmp, "trailing.png")
    with open(trailing, "wb") as f:
        f.write(data + b"bytes after IEND")
    assert_same(decode(trailing, tmp), reference(trailing), "trailing bytes")
    frames = [_pil("RGB", s) for s in (13, 14, 15)]
    apng = os.path.join(tmp, "anim.png")
    frames[0].save(apng, "PNG", save_all=True, append_images=frames[1:], duration=50)
    assert_same(decode(apng, tmp), reference(apng), "APNG")
