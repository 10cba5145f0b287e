"""Hostile dataset entries through the real daemon: FIFOs in a dataset are
skipped samples naming the file type (never a stuck worker: the epoch ends and
SIGTERM stops the daemon at once), a FIFO given as list file stops the daemon
at start instead of hanging it, and symbolic links below a dataset root are
never followed, so pixels outside the allowed roots are never served."""

import os
import signal
import subprocess
import threading
import time

import pytest

import conveyor
from conveyor_integration import (Daemon, daemon_config, make_image_folder, pipeline_entry,
                                  scaled, write_list_file)


def _epoch_in_thread(address, pipeline, batch_size):
    """Reads one epoch on a helper thread; returns (thread, result dict) so
    the test can wait with a deadline instead of hanging on a stuck stream."""
    result = {}

    def run():
        try:
            loader = conveyor.Loader(address, pipeline=pipeline, batch_size=batch_size,
                                     credits=2, shuffle=False)
            samples, failures = 0, []
            try:
                with loader.epoch(0) as stream:
                    for batch in stream:
                        samples += batch.num_samples
                        failures.extend(batch.failures)
                    result["end"] = stream.end
            finally:
                loader.close()
            result["samples"], result["failures"] = samples, failures
        except Exception as e:  # reported by the test
            result["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, result


def _read_epoch_bounded(address, pipeline, batch_size, timeout=30):
    t, result = _epoch_in_thread(address, pipeline, batch_size)
    t.join(scaled(timeout))
    assert not t.is_alive(), "the epoch did not end within %d s (a worker is stuck)" % timeout
    assert "error" not in result, repr(result["error"])
    return result


def _reasons(failures):
    return {f.path: f.reason for f in failures}


def test_fifos_are_skipped_and_sigterm_stops_the_daemon(tmp_path, daemon_factory):
    root, samples = make_image_folder(tmp_path / "data" / "images", classes=1, per_class=6)
    # Two FIFOs (one per worker thread): before the fix they stalled every stream.
    for name in ("class_a/pipe0.jpg", "class_a/pipe1.jpg"):
        os.mkfifo(root / name)
    entries = samples[:3] + [("class_a/pipe0.jpg", 0)] + samples[3:] + [("class_a/pipe1.jpg", 0)]
    listing = write_list_file(root / "list.txt", entries)
    cfg = daemon_config(root, pipelines={
        "fifo": pipeline_entry(root, dataset={"list": str(listing)}, max_failure_rate=1.0)})
    d = daemon_factory(cfg, threads=2)

    result = _read_epoch_bounded(d.unix, "fifo", batch_size=4)
    assert result["samples"] == len(samples)
    reasons = _reasons(result["failures"])
    assert sorted(reasons) == ["class_a/pipe0.jpg", "class_a/pipe1.jpg"]
    for reason in reasons.values():
        assert "not a regular file (FIFO)" in reason, reason

    t0 = time.monotonic()
    d.signal(signal.SIGTERM)
    rc = d.wait(timeout=scaled(15))
    assert rc == 0, d.log()
    assert time.monotonic() - t0 < scaled(10)


def test_a_fifo_as_list_file_stops_the_daemon_at_start(tmp_path):
    root, _ = make_image_folder(tmp_path / "data" / "images", classes=1, per_class=2)
    listing = root / "list.txt"
    os.mkfifo(listing)
    cfg = daemon_config(root, pipelines={"p": pipeline_entry(root, dataset={"list": str(listing)})})
    d = Daemon(tmp_path / "daemon", cfg)
    d.spawn()
    try:
        rc = d.wait(timeout=scaled(20))
    except subprocess.TimeoutExpired:
        pytest.fail("conveyord hung loading a FIFO as list file:\n" + d.log())
    finally:
        d.kill()
    assert rc != 0
    assert "not a regular file (FIFO)" in d.log(), d.log()


def test_links_below_the_root_never_serve_outside_pixels(tmp_path, daemon_factory):
    root, samples = make_image_folder(tmp_path / "data" / "images", classes=2, per_class=4)
    # Outside the allowed roots (daemon_config allows tmp_path/data only).
    secret, _ = make_image_folder(tmp_path / "secret", classes=1, per_class=2, seed=9)
    os.symlink(secret / "class_a" / "img_000.jpg", root / "class_a" / "link.jpg")
    os.symlink(secret / "class_a", root / "class_c")  # a class folder linking outside
    cfg = daemon_config(root, pipelines={"p": pipeline_entry(root, max_failure_rate=1.0)})
    d = daemon_factory(cfg)

    result = _read_epoch_bounded(d.unix, "p", batch_size=4)
    assert result["samples"] == len(samples)  # class_c is no class; link.jpg is refused
    reasons = _reasons(result["failures"])
    assert list(reasons) == ["class_a/link.jpg"]
    assert "symbolic link refused" in reasons["class_a/link.jpg"]
