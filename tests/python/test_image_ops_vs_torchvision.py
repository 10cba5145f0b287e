"""The whole-image augmentation ops as the transformer composes them, per
sample, against torchvision on PIL images given the parameters the sample
drew (the trace transform_tool prints: crop, flips, the padding's window,
the jitter's order and factors, the blur's sigma, TrivialAugmentWide's op
and magnitude).

The reference is the documented order: RandomResizedCrop (or Resize +
CenterCrop) -> RandomCrop(padding) -> RandomHorizontalFlip ->
RandomVerticalFlip -> ColorJitter -> RandomGrayscale -> GaussianBlur ->
TrivialAugmentWide -> ToTensor/Normalize. Everything is compared for exact
equality except the Gaussian blur, whose float32 convolution sums in another
order than torch's conv2d (at most 1 level, on a small fraction of bytes;
see core/decode/color_ops.h).
"""

import os
import tempfile

import numpy as np
import pytest
from PIL import Image
from torchvision.transforms.autoaugment import TrivialAugmentWide

import augment_reference
import jpeg_fixtures as jf

SIZE = (48, 40)  # H, W


@pytest.fixture(scope="module")
def image():
    with tempfile.TemporaryDirectory(prefix="conveyor_ops_") as d:
        path = os.path.join(d, "natural.jpg")
        Image.fromarray(jf.natural_image(173, 131, 5)).save(path, quality=93)
        with Image.open(path) as im:
            pil = im.convert("RGB")
        yield d, path, pil


def run(image, count, *options):
    tmp, path, _ = image
    out = os.path.join(tmp, "ops.raw")
    lines, _ = jf.run_tool("run", path, out, "--seed", "7", "--count", count, "--no-dct",
                           "--layout", "nhwc", "--size", "%d,%d" % SIZE, *options)
    data = np.fromfile(out, np.uint8).reshape(count, SIZE[0], SIZE[1], 3)
    return lines, data


def reference(pil, trace, **kw):
    return augment_reference.reference(pil, dict(trace, **trace["ops"]), SIZE, **kw)


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect"])
def test_random_crop_with_padding(image, mode):
    lines, data = run(image, 24, "--padding", "6", "--padding-mode", mode, "--fill", "17")
    windows = set()
    for trace, ours in zip(lines, data):
        windows.add(tuple(trace["ops"]["pad"]))
        assert all(0 <= v <= 12 for v in trace["ops"]["pad"])
        want = reference(image[2], trace, padding=6, padding_mode=mode, fill=17)
        assert np.array_equal(ours, want), trace
    assert len(windows) > 12  # the window is drawn


def test_color_jitter_and_grayscale(image):
    lines, data = run(image, 40, "--jitter", "0.8,0.6,1.4,0.6,1.4,0,2,-0.1,0.1",
                      "--grayscale-probability", "0.2")
    applied = orders = 0
    seen = set()
    for trace, ours in zip(lines, data):
        jitter = trace["ops"]["jitter"]
        applied += jitter["applied"]
        seen.add(tuple(jitter["order"]))
        want = reference(image[2], trace)
        assert np.array_equal(ours, want), trace
    orders = len(seen)
    assert 20 <= applied <= 39 and orders > 5


def test_color_jitter_brightness_only_draws_brightness(image):
    lines, data = run(image, 6, "--jitter", "1,0.5,1.5,1,1,1,1,0,0")
    for trace, ours in zip(lines, data):
        jitter = trace["ops"]["jitter"]
        assert jitter["contrast"] == 1 and jitter["saturation"] == 1 and jitter["hue"] == 0
        assert 0.5 <= jitter["brightness"] < 1.5
        assert np.array_equal(ours, reference(image[2], trace))


def test_gaussian_blur_within_its_tolerance(image):
    lines, data = run(image, 16, "--blur", "0.5,5,3,0.1,2")
    blurred = 0
    for trace, ours in zip(lines, data):
        want = reference(image[2], trace, blur_kernel=(5, 3))
        diff = np.abs(ours.astype(int) - want)
        blurred += trace["ops"]["blur"]["applied"]
        assert diff.max() <= 1, trace
        assert np.count_nonzero(diff) <= 0.01 * diff.size, trace
    assert 3 <= blurred <= 13


def test_trivial_augment_wide(image):
    lines, data = run(image, 160, "--trivial-augment", "31")
    space = TrivialAugmentWide()._augmentation_space(31)
    ops = set()
    for trace, ours in zip(lines, data):
        t = trace["ops"]["trivial_augment"]
        ops.add(t["op"])
        magnitudes, signed = space[t["op"]]
        if magnitudes.ndim > 0:
            # The daemon's magnitude is torch's float32 table entry, signed.
            assert augment_reference.close_to_torch(abs(t["magnitude"]), magnitudes[t["bin"]]), t
            assert signed or t["magnitude"] >= 0
        else:
            assert t["magnitude"] == 0
        want = reference(image[2], trace)
        assert np.array_equal(ours, want), trace
    assert len(ops) == 14  # every op drawn over 160 samples


def test_everything_at_once_in_float32(image):
    tmp, path, pil = image
    out = os.path.join(tmp, "all.raw")
    lines, _ = jf.run_tool("run", path, out, "--seed", "3", "--count", "12", "--no-dct",
                           "--layout", "nchw", "--dtype", "float32", "--size", "%d,%d" % SIZE,
                           "--padding", "4", "--jitter", "1,0.7,1.3,0.7,1.3,0.7,1.3,-0.05,0.05",
                           "--grayscale-probability", "0.3", "--trivial-augment", "31",
                           "--vflip-probability", "0.5")
    data = np.fromfile(out, np.float32).reshape(12, 3, SIZE[0], SIZE[1])
    mean = np.array([0.485, 0.456, 0.406], np.float32)
    std = np.array([0.229, 0.224, 0.225], np.float32)
    for trace, ours in zip(lines, data):
        ref = reference(pil, trace, padding=4)
        want = ((ref.astype(np.float32) / np.float32(255) - mean) / std).transpose(2, 0, 1)
        assert np.array_equal(ours, want), trace


def test_same_draws_every_run(image):
    a_lines, a = run(image, 8, "--padding", "3", "--jitter", "0.5,0.6,1.4,1,1,1,1,0,0",
                     "--trivial-augment", "31")
    b_lines, b = run(image, 8, "--padding", "3", "--jitter", "0.5,0.6,1.4,1,1,1,1,0,0",
                     "--trivial-augment", "31")
    assert a_lines == b_lines and np.array_equal(a, b)


@pytest.mark.parametrize("bins", [2, 7, 64])
def test_magnitudes_are_torchs_for_any_bin_count(image, bins):
    lines, _ = run(image, 60, "--trivial-augment", str(bins))
    space = TrivialAugmentWide()._augmentation_space(bins)
    checked = 0
    for trace in lines:
        t = trace["ops"]["trivial_augment"]
        magnitudes, _ = space[t["op"]]
        if magnitudes.ndim > 0:
            assert 0 <= t["bin"] < bins
            assert augment_reference.close_to_torch(abs(t["magnitude"]), magnitudes[t["bin"]]), (bins, t)
            checked += 1
    assert checked > 30
