"""Costly samples through the real daemon: a small progressive JPEG whose
hundreds of scans would hold a worker for about a second is stopped after the
pipeline's max_decode_seconds, one whose coefficient buffer exceeds
max_decode_memory is refused from its header, and a PDF named .jpg is refused
naming its format; each is a skipped sample with its reason in
Batch.failures while every other sample of the epoch is delivered."""

import subprocess
import time

import pytest

import conveyor
from conveyor_integration import BUILD_DIR, daemon_config, make_image_folder, pipeline_entry, scaled

COSTLY_JPEG_TOOL = BUILD_DIR / "tests" / "costly_jpeg_tool"


def _costly(kind, w, h, out):
    if not COSTLY_JPEG_TOOL.exists():
        pytest.skip("costly_jpeg_tool not built at %s" % COSTLY_JPEG_TOOL)
    subprocess.run([str(COSTLY_JPEG_TOOL), kind, str(w), str(h), str(out)], check=True,
                   timeout=scaled(300))


def test_costly_samples_are_skipped_with_the_limit_named(daemon_factory, tmp_path):
    root, samples = make_image_folder(tmp_path / "images", classes=2, per_class=8)
    # 3072x3072 grayscale with 704 scans: about a second of CPU before
    # libjpeg's scan limit; five times the budget below.
    _costly("many-scans", 3072, 3072, root / "class_a" / "aaa_scans.jpg")
    # 2048x2048 progressive 4:4:4: 24 MiB of coefficients.
    _costly("progressive-444", 2048, 2048, root / "class_b" / "aaa_444.jpg")
    (root / "class_b" / "aab_pdf.jpg").write_bytes(b"%PDF-1.7\n" + bytes(200))
    d = daemon_factory(daemon_config(root, pipelines={"train": pipeline_entry(
        root, augment="eval", max_failure_rate=0.5, max_decode_seconds=0.2,
        max_decode_memory="20MiB")}))
    loader = conveyor.Loader(d.unix, pipeline="train", batch_size=8, credits=2, shuffle=False,
                             transport="inline")
    delivered, failures = 0, []
    started = time.monotonic()
    with loader.epoch(0) as stream:
        for batch in stream:
            delivered += len(batch)
            failures.extend(batch.failures)
    elapsed = time.monotonic() - started
    loader.close()
    assert delivered == len(samples), (delivered, failures)
    reasons = {f.path: f.reason for f in failures}
    assert sorted(reasons) == ["class_a/aaa_scans.jpg", "class_b/aaa_444.jpg",
                               "class_b/aab_pdf.jpg"], reasons
    assert "decoding took more than max_decode_seconds (0.2 s of CPU" in \
        reasons["class_a/aaa_scans.jpg"], reasons
    assert "image 2048x2048 (progressive, 3 components) needs about 24." in \
        reasons["class_b/aaa_444.jpg"], reasons
    assert "more than max_decode_memory (20.0 MiB)" in reasons["class_b/aaa_444.jpg"], reasons
    assert "not a supported image format (looks like PDF)" in reasons["class_b/aab_pdf.jpg"], \
        reasons
    # Only said, not asserted on (timing): the whole epoch took this long.
    print("epoch of %d samples with 3 costly ones: %.2f s" % (len(samples) + 3, elapsed))
