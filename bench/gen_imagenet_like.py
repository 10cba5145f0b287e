#!/usr/bin/python3
"""Generates an ImageNet-like JPEG dataset in ImageFolder layout.

    /usr/bin/python3 bench/gen_imagenet_like.py --out DIR --images N --classes C \
        [--seed S] [--list FILE] [--workers 2] [--format jpeg|png|webp]

Layout: DIR/<wnid>/<wnid>_<i>.JPEG, where the class folders are WordNet-like
ids ("n01234567") drawn from the seed. Image i goes to class i mod C.

What the images are like (so decode and resize cost what real photos cost):
  * sizes: ~70% near 500x375 (a third of those portrait 375x500), ~15% larger
    (up to ~800x600), ~15% smaller (~250x200), each with some jitter;
  * baseline JPEG, 4:2:0 chroma subsampling, quality 85-95;
  * content: per-channel 1/f ("pink") noise with correlated colour (a shared
    luminance field mixed into the channels), soft-edged ellipses, polygons
    and lines filled with their own texture, and fine grain, so the files
    carry high-frequency detail; ~100 KB per file on average (printed at the
    end). Flat or smooth images would decode unrealistically fast.
--format png writes the same pixels as PNG (Pillow's default compression,
level 6; .png), --format webp as lossy WebP at the JPEG's quality (.webp).
Deterministic: image i depends only on (seed, i), not on the worker count.
--list FILE also writes a list file (`relative/path<TAB>label`, labels =
index of the class folder in sorted order, as DatasetIndex::LoadImageFolder
assigns them).
Needs only numpy and PIL.
"""

import argparse
import multiprocessing
import os
import sys
import time

import numpy as np
from PIL import Image, ImageDraw, ImageFilter


def class_names(num_classes, seed):
    """Distinct WordNet-like folder names, deterministic in seed, sorted."""
    rng = np.random.default_rng([seed, 0x57A1D])
    ids = set()
    while len(ids) < num_classes:
        ids.update(int(x) for x in rng.integers(1_000_000, 15_000_000, size=num_classes))
    return sorted("n%08d" % x for x in sorted(ids)[:num_classes])


def pick_size(rng):
    """(width, height) following the mix described in the module doc."""
    r = rng.random()
    if r < 0.70:
        w, h = 500, 375
    elif r < 0.85:
        w = int(rng.integers(600, 801))
        h = int(w * rng.uniform(0.70, 0.80))
    else:
        w = int(rng.integers(220, 301))
        h = int(w * rng.uniform(0.75, 0.85))
    w = int(w * rng.uniform(0.94, 1.06))
    h = int(h * rng.uniform(0.94, 1.06))
    if rng.random() < 0.3:  # portrait
        w, h = h, w
    return w, h


def _fft_size(n):
    """The smallest multiple of 16 >= n: an FFT length pocketfft handles fast."""
    return (n + 15) // 16 * 16


def pink_noise(rng, h, w, exponent):
    """A (h, w) float32 field with a 1/f**exponent amplitude spectrum, ~[-1, 1]."""
    fh, fw = _fft_size(h), _fft_size(w)
    fy = np.fft.fftfreq(fh).astype(np.float32)[:, None]
    fx = np.fft.rfftfreq(fw).astype(np.float32)[None, :]
    f = np.sqrt(fx * fx + fy * fy)
    f[0, 0] = 1.0
    amp = f ** np.float32(-exponent)
    amp[0, 0] = 0.0
    phase = rng.random((fh, fw // 2 + 1), dtype=np.float32) * np.float32(2 * np.pi)
    spectrum = amp * np.exp(1j * phase)
    field = np.fft.irfft2(spectrum, s=(fh, fw))[:h, :w].astype(np.float32)
    field *= np.float32(1.0 / (3.0 * field.std() + 1e-8))
    return field


def smooth_field(rng, h, w, exponent, factor=4):
    """Like pink_noise at 1/factor resolution, upscaled: for low-frequency colour."""
    small = pink_noise(rng, max(8, h // factor), max(8, w // factor), exponent)
    return np.asarray(Image.fromarray(small, mode="F").resize((w, h), Image.BILINEAR))


class _Grain:
    """White-noise tiles made once per process; images take shifted crops."""
    tiles = {}

    @classmethod
    def get(cls, seed):
        if seed not in cls.tiles:
            rng = np.random.default_rng([seed, 0x6A41])
            cls.tiles[seed] = (rng.standard_normal((1024, 1024), dtype=np.float32),
                               rng.standard_normal((1024, 1024, 3), dtype=np.float32))
        return cls.tiles[seed]


def _crop_tile(tile, rng, h, w):
    """A (h, w[, 3]) crop of a tile at a random offset (wrapping if needed)."""
    th, tw = tile.shape[:2]
    if h > th or w > tw:
        reps = ((h + th - 1) // th + 1, (w + tw - 1) // tw + 1) + (1,) * (tile.ndim - 2)
        tile = np.tile(tile, reps)
        th, tw = tile.shape[:2]
    y, x = int(rng.integers(0, th - h + 1)), int(rng.integers(0, tw - w + 1))
    return tile[y:y + h, x:x + w]


def make_image(seed, index):
    """The RGB uint8 array and JPEG quality of image `index`."""
    rng = np.random.default_rng([seed, index])
    w, h = pick_size(rng)

    # Background: a full-resolution luminance field shared by the channels
    # (correlated colour) plus low-frequency per-channel colour fields.
    lum = pink_noise(rng, h, w, rng.uniform(0.8, 1.1))
    base = rng.uniform(60, 190, size=3).astype(np.float32)
    gain = (rng.uniform(50, 110) * rng.uniform(0.7, 1.3, size=3)).astype(np.float32)
    img = np.empty((h, w, 3), np.float32)
    for c in range(3):
        img[:, :, c] = lum * gain[c] + base[c]
        img[:, :, c] += smooth_field(rng, h, w, 1.2) * np.float32(rng.uniform(20, 50))

    # Shapes with soft edges, each filled with a shifted, tinted crop of the
    # luminance texture so the interiors are not flat. Work is confined to
    # each shape's bounding box.
    for _ in range(int(rng.integers(4, 12))):
        kind = rng.random()
        cx, cy = rng.uniform(0, w), rng.uniform(0, h)
        size = rng.uniform(0.08, 0.45) * min(w, h)
        blur = float(rng.uniform(0.6, 2.5))
        mask = Image.new("L", (w, h), 0)
        draw = ImageDraw.Draw(mask)
        if kind < 0.4:
            draw.ellipse([cx - size, cy - size * rng.uniform(0.4, 1.0),
                          cx + size, cy + size * rng.uniform(0.4, 1.0)], fill=255)
        elif kind < 0.8:
            n = int(rng.integers(3, 8))
            angles = np.sort(rng.uniform(0, 2 * np.pi, n))
            radii = size * rng.uniform(0.4, 1.0, n)
            draw.polygon([(float(cx + r * np.cos(a)), float(cy + r * np.sin(a)))
                          for a, r in zip(angles, radii)], fill=255)
        else:
            for _ in range(int(rng.integers(1, 4))):
                draw.line([(cx, cy), (rng.uniform(0, w), rng.uniform(0, h))], fill=255,
                          width=int(rng.integers(2, 9)))
        color = rng.uniform(20, 235, size=3).astype(np.float32)
        contrast = np.float32(rng.uniform(30, 90))
        dy, dx = int(rng.integers(0, h)), int(rng.integers(0, w))
        bbox = mask.getbbox()
        if bbox is None:
            continue
        m = int(3 * blur) + 2
        x0, y0 = max(0, bbox[0] - m), max(0, bbox[1] - m)
        x1, y1 = min(w, bbox[2] + m), min(h, bbox[3] + m)
        alpha = mask.crop((x0, y0, x1, y1)).filter(ImageFilter.GaussianBlur(blur))
        alpha = np.asarray(alpha, dtype=np.float32)[:, :, None] * np.float32(1.0 / 255.0)
        tex = np.roll(lum, (dy, dx), axis=(0, 1))[y0:y1, x0:x1, None]
        fill = color + tex * contrast
        if rng.random() < 0.3:  # a grating (stripes, fabric, fences)
            period = rng.uniform(3.0, 14.0)
            theta = rng.uniform(0, np.pi)
            yy, xx = np.mgrid[y0:y1, x0:x1].astype(np.float32)
            phase = (xx * np.cos(theta) + yy * np.sin(theta)) * np.float32(2 * np.pi / period)
            fill = fill + (np.sin(phase) * np.float32(rng.uniform(15, 45)))[:, :, None]
        region = img[y0:y1, x0:x1]
        region += alpha * (fill - region)

    # Fine grain (sensor-noise-like): the detail JPEG has to spend bits on.
    grain_l, grain_c = _Grain.get(seed)
    img += _crop_tile(grain_l, rng, h, w)[:, :, None] * np.float32(rng.uniform(7.0, 11.0))
    img += _crop_tile(grain_c, rng, h, w) * np.float32(rng.uniform(2.0, 4.0))
    quality = int(rng.integers(85, 96))
    np.clip(img, 0, 255, out=img)
    return img.astype(np.uint8), quality


# --format: (extension, Pillow save arguments given the JPEG quality).
FORMATS = {
    "jpeg": (".JPEG", lambda q: dict(format="JPEG", quality=q, subsampling=2, optimize=False)),
    "png": (".png", lambda q: dict(format="PNG")),
    "webp": (".webp", lambda q: dict(format="WEBP", quality=q)),
}


def _write_one(job):
    seed, index, path, fmt = job
    pixels, quality = make_image(seed, index)
    Image.fromarray(pixels).save(path, **FORMATS[fmt][1](quality))
    return os.path.getsize(path)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="output root folder")
    parser.add_argument("--images", type=int, required=True, help="number of images")
    parser.add_argument("--classes", type=int, default=1000, help="number of class folders")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--list", help="also write a list file (relative/path<TAB>label)")
    parser.add_argument("--workers", type=int, default=2, help="processes (default 2)")
    parser.add_argument("--format", choices=sorted(FORMATS), default="jpeg",
                        help="file format (default jpeg)")
    args = parser.parse_args(argv)
    if args.images <= 0 or args.classes <= 0:
        parser.error("--images and --classes must be > 0")

    names = class_names(args.classes, args.seed)
    for name in names:
        os.makedirs(os.path.join(args.out, name), exist_ok=True)
    entries = []  # (relative path, label)
    jobs = []
    for i in range(args.images):
        label = i % args.classes
        rel = "%s/%s_%d%s" % (names[label], names[label], i, FORMATS[args.format][0])
        entries.append((rel, label))
        jobs.append((args.seed, i, os.path.join(args.out, rel), args.format))

    start = time.time()
    if args.workers > 1:
        with multiprocessing.get_context("fork").Pool(args.workers) as pool:
            sizes = list(pool.imap_unordered(_write_one, jobs, chunksize=4))
    else:
        sizes = [_write_one(j) for j in jobs]
    elapsed = time.time() - start

    if args.list:
        entries.sort()  # the ImageFolder order: class folder, then file name
        with open(args.list, "w") as f:
            for rel, label in entries:
                f.write("%s\t%d\n" % (rel, label))
    total = sum(sizes)
    print("wrote %d images in %d classes to %s in %.1f s (%.1f images/s); "
          "mean file size %.1f KB, total %.1f MB"
          % (len(sizes), args.classes, args.out, elapsed, len(sizes) / max(elapsed, 1e-9),
             total / len(sizes) / 1024.0, total / 1e6))
    return 0


if __name__ == "__main__":
    sys.exit(main())
