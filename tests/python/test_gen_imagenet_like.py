"""Tests of bench/gen_imagenet_like.py: layout, sizes, JPEG parameters, list file."""

import os
import pathlib
import subprocess
import sys

import pytest
from PIL import Image, JpegImagePlugin

SOURCE_DIR = pathlib.Path(
    os.environ.get("CONVEYOR_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
GENERATOR = SOURCE_DIR / "bench" / "gen_imagenet_like.py"
IMAGES = 20
CLASSES = 4


def generate(out, list_file=None, seed=3, workers=2):
    cmd = [sys.executable, str(GENERATOR), "--out", str(out), "--images", str(IMAGES),
           "--classes", str(CLASSES), "--seed", str(seed), "--workers", str(workers)]
    if list_file is not None:
        cmd += ["--list", str(list_file)]
    result = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=300)
    return result.stdout


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("imagenet_like")
    out = root / "train"
    list_file = root / "train.txt"
    stdout = generate(out, list_file)
    return out, list_file, stdout


def image_files(out):
    return sorted(p for p in out.rglob("*") if p.is_file())


def test_count_and_layout(dataset):
    out, _, _ = dataset
    classes = sorted(p.name for p in out.iterdir())
    assert len(classes) == CLASSES
    assert all(c.startswith("n") and len(c) == 9 and c[1:].isdigit() for c in classes)
    files = image_files(out)
    assert len(files) == IMAGES
    for f in files:
        assert f.parent.parent == out  # root/<class>/<file>
        assert f.name.startswith(f.parent.name + "_") and f.suffix == ".JPEG"
    per_class = [len(list((out / c).iterdir())) for c in classes]
    assert per_class == [IMAGES // CLASSES] * CLASSES


def test_jpeg_parameters_and_sizes(dataset):
    out, _, _ = dataset
    for f in image_files(out):
        with Image.open(f) as im:
            assert im.format == "JPEG" and im.mode == "RGB"
            assert JpegImagePlugin.get_sampling(im) == 2  # 4:2:0
            w, h = im.size
            assert 150 <= min(w, h) and max(w, h) <= 860, (f, im.size)


def test_mostly_near_500x375(dataset):
    out, _, _ = dataset
    near = 0
    for f in image_files(out):
        with Image.open(f) as im:
            long_side, short_side = max(im.size), min(im.size)
            near += 440 <= long_side <= 560 and 330 <= short_side <= 420
    assert near >= IMAGES // 3


def test_mean_file_size(dataset):
    out, _, stdout = dataset
    sizes = [f.stat().st_size for f in image_files(out)]
    mean_kb = sum(sizes) / len(sizes) / 1024
    assert 50 <= mean_kb <= 180, mean_kb
    assert "mean file size" in stdout


def test_list_file_matches_folders(dataset):
    out, list_file, _ = dataset
    classes = sorted(p.name for p in out.iterdir())
    lines = list_file.read_text().splitlines()
    assert len(lines) == IMAGES
    entries = [line.split("\t") for line in lines]
    assert [rel for rel, _ in entries] == sorted(rel for rel, _ in entries)
    for rel, label in entries:
        assert (out / rel).is_file()
        assert classes[int(label)] == rel.split("/")[0]


def test_deterministic_for_a_seed(dataset, tmp_path):
    out, _, _ = dataset
    again = tmp_path / "again"
    generate(again, workers=1)
    for f in image_files(out):
        assert (again / f.relative_to(out)).read_bytes() == f.read_bytes()


@pytest.mark.parametrize("fmt,suffix,pil_format", [("png", ".png", "PNG"),
                                                   ("webp", ".webp", "WEBP")])
def test_other_formats_hold_the_same_images(dataset, tmp_path, fmt, suffix, pil_format):
    """--format png|webp: the same tree, names (but the suffix) and sizes."""
    out, _, _ = dataset
    other = tmp_path / fmt
    subprocess.run([sys.executable, str(GENERATOR), "--out", str(other), "--images", "4",
                    "--classes", str(CLASSES), "--seed", "3", "--format", fmt],
                   check=True, capture_output=True, timeout=300)
    files = image_files(other)
    assert len(files) == 4 and all(f.suffix == suffix for f in files)
    for f in files:
        jpeg = out / f.relative_to(other).with_suffix(".JPEG")
        with Image.open(f) as im, Image.open(jpeg) as ref:
            assert im.format == pil_format and im.size == ref.size
