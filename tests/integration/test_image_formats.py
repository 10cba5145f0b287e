"""Every image format through the real daemon: PNG (RGB, RGBA, palette with
transparency, grey, 16-bit), WebP (lossy, lossless, with alpha), BMP, TIFF
and an animated GIF (its first frame), listed in a dataset.list file with
misleading extensions (the content decides), served by an eval pipeline at
the images' own size, so each sample must equal Pillow's
Image.open(f).convert("RGB"). And hostile files of those formats — a
truncated PNG, a PNG with a bad CRC, a PNG header claiming 70000x70000, a
PNG whose IDAT is a decompression bomb, a WebP whose RIFF size claims more
than the file — each a skipped sample whose reason names the format and
the cause, while every good sample of the epoch is delivered and the daemon
stays healthy. Test files are written here (Pillow, zlib, ffmpeg)."""

import io
import struct
import subprocess
import zlib

import numpy as np
from PIL import Image

import conveyor
from conveyor_integration import daemon_config, pipeline_entry, write_list_file

SIDE = 64


def _pixels(seed):
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:SIDE, 0:SIDE]
    base = np.stack([xx * 4, yy * 3, (xx + yy) * 2], -1) + rng.integers(0, 50, (SIDE, SIDE, 3))
    return np.clip(base, 0, 255).astype(np.uint8)


def _encoded(img, fmt, **kw):
    out = io.BytesIO()
    img.save(out, fmt, **kw)
    return out.getvalue()


def _chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _png(w, h, idat):
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + _chunk(b"IDAT", idat) + _chunk(b"IEND", b""))


def _good_files(tmp_path):
    img = Image.fromarray(_pixels(1))
    rgba = Image.fromarray(np.dstack([_pixels(2), _pixels(3)[:, :, 0]]), "RGBA")
    files = {
        "png_rgb.jpg": _encoded(img, "PNG"),
        "png_rgba.png": _encoded(rgba, "PNG"),
        "png_palette_trns.png": _encoded(img.quantize(50), "PNG", transparency=3),
        "png_grey.png": _encoded(img.convert("L"), "PNG"),
        "webp_lossy.webp": _encoded(img, "WEBP", quality=75),
        "webp_lossless_alpha.webp": _encoded(rgba, "WEBP", lossless=True),
        "webp_lossy_alpha.png": _encoded(rgba, "WEBP", quality=60),
        "bmp.bmp": _encoded(img, "BMP"),
        "tiff_lzw.tif": _encoded(img, "TIFF", compression="tiff_lzw"),
        "jpeg.jpg": _encoded(img, "JPEG", quality=90),
    }
    frames = [Image.fromarray(_pixels(s)).quantize(64) for s in (4, 5, 6)]
    out = io.BytesIO()
    frames[0].save(out, "GIF", save_all=True, append_images=frames[1:], duration=40)
    files["animated.gif"] = out.getvalue()
    # 16-bit RGB, written by the ffmpeg CLI.
    raw = tmp_path / "rgb48.raw"
    (np.random.default_rng(9).integers(0, 65536, (SIDE, SIDE, 3), dtype=np.uint16)
     .astype(">u2").tofile(raw))
    png16 = tmp_path / "rgb48.png"
    subprocess.run(["ffmpeg", "-loglevel", "error", "-y", "-f", "rawvideo", "-pix_fmt", "rgb48be",
                    "-s", "%dx%d" % (SIDE, SIDE), "-i", str(raw), "-frames:v", "1", str(png16)],
                   check=True, timeout=60)
    files["png_16bit.png"] = png16.read_bytes()
    return files


def _hostile_files():
    img = Image.fromarray(_pixels(7))
    png = _encoded(img, "PNG")
    bad_crc = bytearray(png)
    bad_crc[-13] ^= 0x5A  # the IDAT chunk's CRC (IEND is the last 12 bytes)
    huge = _png(70000, 70000, zlib.compress(b"\0" * 1000))
    bomb = _png(16, 16, zlib.compress(bytes(512 << 20), 9))
    webp = bytearray(_encoded(img, "WEBP", lossless=True))
    webp[4:8] = struct.pack("<I", len(webp) * 4)
    return {
        "truncated.png": (png[:len(png) // 2], "truncated PNG data"),
        "bad_crc.png": (bytes(bad_crc), "corrupt or truncated PNG data"),
        "huge.png": (huge, "PNG image 70000x70000 exceeds max_pixels"),
        "bomb.png": (bomb, "PNG 16x16: the IDAT stream inflates to more than the image's"),
        "riff_size.webp": (bytes(webp), "truncated WebP data (the RIFF header claims"),
    }


def test_every_format_matches_pillow_and_hostile_files_are_named(tmp_path, daemon_factory):
    root = tmp_path / "data" / "mixed"
    root.mkdir(parents=True)
    good = _good_files(tmp_path)
    hostile = _hostile_files()
    entries = []
    for i, (name, data) in enumerate(sorted(good.items()) + sorted(
            (n, d) for n, (d, _) in hostile.items())):
        (root / name).write_bytes(data)
        entries.append((name, i))
    listing = write_list_file(root / "list.txt", entries)
    cfg = daemon_config(root, pipelines={"mixed": pipeline_entry(
        root, dataset={"list": str(listing)}, augment="eval", size=SIDE, resize_size=SIDE,
        layout="nhwc", dct_scaling=False, max_failure_rate=1.0,
        # The bomb (~0.5 MB of deflate) could inflate for longer than this,
        # so it is checked before FFmpeg inflates it.
        max_decode_seconds=1.0)})
    d = daemon_factory(cfg)
    loader = conveyor.Loader(d.unix, pipeline="mixed", batch_size=4, credits=2, shuffle=False,
                             transport="inline")
    served, failures = {}, {}
    try:
        with loader.epoch(0) as stream:
            for batch in stream:
                images = np.asarray(batch.images)
                for i, label in enumerate(batch.labels):
                    served[entries[int(label)][0]] = images[i].copy()
                failures.update({f.path: f.reason for f in batch.failures})
    finally:
        loader.close()

    assert sorted(failures) == sorted(hostile), failures
    for name, (_, reason) in hostile.items():
        assert reason in failures[name], (name, failures[name])
    assert sorted(served) == sorted(good)
    problems = []
    for name in sorted(good):
        with Image.open(root / name) as im:
            expected = np.asarray(im.convert("RGB"))
        got = served[name]
        if not np.array_equal(got, expected):
            problems.append("%s: max diff %d" % (
                name, np.abs(got.astype(int) - expected.astype(int)).max()))
    assert not problems, problems
    assert d.proc.poll() is None, d.log()
