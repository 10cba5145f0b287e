"""The geometric ops of TrivialAugmentWide (core/decode/affine_ops.h, through
tests/tools/affine_ops_tool) against torchvision 0.14 on PIL images (Pillow 9.4).

The reference is what TrivialAugmentWide applies: autoaugment._apply_op(pil,
name, magnitude, InterpolationMode.NEAREST, fill=None), i.e. F.affine /
F.rotate ending in Pillow's Image.transform(AFFINE, NEAREST). Magnitudes are
the op's 31 bins from TrivialAugmentWide._augmentation_space, each with both
signs (float32 values, as forward() draws them), plus quarter and whole
turns, random values and magnitudes beyond the bins. Images have random
content, odd, even, square and non-square sizes (1x1 and 2x5 included), and
some are wide enough (33000 pixels) to push Pillow off its 16.16 fixed-point
engine onto the floating-point one; translations and 180-degree turns take
its "scale" engine. Tolerance: none. Every case must be byte-identical (no
differing pixel was measured in any case); a failure reports the fraction of
differing pixels.
"""
import os
import subprocess
import tempfile

import numpy as np
import pytest
from PIL import Image
from torchvision.transforms import InterpolationMode
from torchvision.transforms.autoaugment import TrivialAugmentWide, _apply_op

import jpeg_fixtures as jf

TOOL = os.path.join(jf.build_dir(), "tests", "affine_ops_tool")
OPS = {"shear_x": "ShearX", "shear_y": "ShearY", "translate_x": "TranslateX",
       "translate_y": "TranslateY", "rotate": "Rotate"}
SIZES = [(37, 23), (64, 48), (48, 64), (1, 1), (2, 5), (5, 2), (1, 7), (7, 1), (16, 16), (33, 33),
         (31, 17), (100, 3)]


@pytest.fixture(scope="module")
def tmp():
    jf.require_tool("affine_ops_tool")
    with tempfile.TemporaryDirectory(prefix="conveyor_affine_") as d:
        yield d


def bins(name):
    """TrivialAugmentWide's magnitudes for the op, both signs, as Python floats."""
    magnitudes, signed = TrivialAugmentWide()._augmentation_space(31)[name]
    values = [float(m) for m in magnitudes]
    return values + ([-v for v in values] if signed else [])


def random_image(width, height, seed):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, size=(height, width, 3), dtype=np.uint8)


class Case:
    """One image written once for the tool, then compared op by op."""

    def __init__(self, tmp, arr):
        self.arr = arr
        self.pil = Image.fromarray(arr, "RGB")
        self.src = os.path.join(tmp, "in.raw")
        self.dst = os.path.join(tmp, "out.raw")
        arr.tofile(self.src)

    def ours(self, op, magnitudes):
        """The tool's outputs, one per magnitude (a single run for the sweep)."""
        h, w, _ = self.arr.shape
        sweep = ",".join(repr(m) for m in magnitudes)
        cmd = [TOOL, op, str(w), str(h), self.src, self.dst, sweep]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        return np.fromfile(self.dst, np.uint8).reshape(len(magnitudes), h, w, 3)

    def reference(self, op, magnitude):
        out = _apply_op(self.pil, OPS[op], magnitude, InterpolationMode.NEAREST, None)
        return np.asarray(out)

    def mismatches(self, op, magnitudes):
        """A description (with the differing fraction) per magnitude that is not identical."""
        h, w, _ = self.arr.shape
        found = []
        for magnitude, ours in zip(magnitudes, self.ours(op, magnitudes)):
            ref = self.reference(op, magnitude)
            if not np.array_equal(ours, ref):
                differing = np.any(ours != ref, axis=-1).mean()
                found.append("%s %dx%d magnitude %r: %.4f of pixels differ"
                             % (op, w, h, magnitude, differing))
        return found


def assert_all_equal(tmp, cases):
    """cases: [(arr, op, [magnitudes])]; every output must equal torchvision's."""
    failures, total = [], 0
    for arr, op, magnitudes in cases:
        total += len(magnitudes)
        failures += Case(tmp, arr).mismatches(op, magnitudes)
    assert not failures, "%d of %d differ: %s" % (len(failures), total, "; ".join(failures[:8]))


@pytest.mark.parametrize("op", list(OPS))
def test_bins_equal_torchvision(tmp, op):
    magnitudes = bins(OPS[op])
    assert len(magnitudes) == 62
    cases = [(random_image(w, h, seed), op, magnitudes) for seed, (w, h) in enumerate(SIZES)]
    assert_all_equal(tmp, cases)


def test_turns_equal_torchvision(tmp):
    # PIL's rotate takes transpose fast paths for 180 and for 90 / 270 on squares; ours
    # takes the affine path, which must agree.
    angles = [90.0, -90.0, 180.0, -180.0, 270.0, -270.0, 360.0, -720.0, 450.0, 45.0, -0.0]
    cases = [(random_image(w, h, 100 + seed), "rotate", angles)
             for seed, (w, h) in enumerate(SIZES)]
    assert_all_equal(tmp, cases)


def test_other_magnitudes_equal_torchvision(tmp):
    rng = np.random.default_rng(7)
    spans = {"shear_x": 3.0, "shear_y": 3.0, "translate_x": 80.0, "translate_y": 80.0,
             "rotate": 720.0}
    extra = {"shear_x": [50.0, -1e6, 1e-9], "shear_y": [50.0, -1e6, 1e-9],
             "translate_x": [0.999, -0.999, 1000.0], "translate_y": [0.999, -0.999, 1000.0],
             "rotate": [1e-9, 359.9999999, 0.5, 1e4]}
    cases = []
    for i in range(250):
        op = list(OPS)[i % len(OPS)]
        w, h = (int(v) for v in rng.integers(1, 48, size=2))
        magnitudes = [float(v) for v in rng.uniform(-spans[op], spans[op], size=6)]
        cases.append((random_image(w, h, 200 + i), op, magnitudes + extra[op]))
    assert_all_equal(tmp, cases)


@pytest.mark.parametrize("width,height", [(33000, 2), (2, 33000)])
def test_floating_point_engine_equals_torchvision(tmp, width, height):
    # Corners beyond +-32768 after the op: Pillow's floating-point engine.
    arr = random_image(width, height, 300)
    cases = [(arr, "rotate", [1.0, -30.0, 91.0, 90.0]),
             (arr, "shear_x", [0.99, -0.5]),
             (arr, "shear_y", [0.99, -0.5]),
             (arr, "translate_x", [31.0, -40000.0])]
    assert_all_equal(tmp, cases)


@pytest.mark.parametrize("args,message", [
    (["spin", "2", "2", "IN", "OUT", "1"], "unknown op"),
    (["rotate", "0", "2", "IN", "OUT", "1"], "bad width"),
    (["rotate", "2", "3", "IN", "OUT", "1"], "holds 12 bytes, not 18"),
    (["rotate", "2", "2", "IN", "OUT", "x"], "bad magnitude"),
    (["rotate", "2", "2", "IN", "OUT", "1,,2"], "bad magnitude"),
    (["rotate", "2", "2", "IN"], "usage"),
])
def test_tool_errors(tmp, args, message):
    src = os.path.join(tmp, "small.raw")
    random_image(2, 2, 1).tofile(src)
    args = [src if a == "IN" else os.path.join(tmp, "unused.raw") if a == "OUT" else a
            for a in args]
    proc = subprocess.run([TOOL] + args, capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.startswith("affine_ops_tool: ") and message in proc.stderr, proc.stderr
