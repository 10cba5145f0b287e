"""SIGHUP re-reads the config file while streams run: added pipelines can be
opened at once, removed ones refuse new streams (NOT_FOUND naming them)
while their running streams finish, changed ones serve new streams with the
new definition while running streams keep the old one — byte for byte the
batches of a run without a reload. A config that fails validation, or one
that changes settings a running daemon cannot change, is refused with a log
line naming the problem, and the old config stays."""

import signal
import threading
import subprocess

import numpy as np
import pytest

import conveyor
from conveyor_integration import (CONVEYORD, daemon_config, pipeline_entry, scaled, wait_until,
                                  write_config)

RELOADED = "config reloaded from "
REFUSED = "config reload refused"


def _take(stream, n=None):
    """Copies of (images, labels, indices) of the next n batches (all when n
    is None)."""
    out = []
    for batch in stream:
        out.append((batch.images.copy(), batch.labels.copy(), batch.indices.copy()))
        if n is not None and len(out) == n:
            break
    return out


def _run(address, pipeline, **kwargs):
    stream = conveyor.open_stream(address, pipeline, 8, seed=7, credits=2, **kwargs)
    try:
        return _take(stream)
    finally:
        stream.close()


def _assert_same(got, want, what):
    assert len(got) == len(want), "%s: %d batches, want %d" % (what, len(got), len(want))
    for i, (g, w) in enumerate(zip(got, want)):
        for part, a, b in zip(("images", "labels", "indices"), g, w):
            assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b), \
                "%s: batch %d differs in %s" % (what, i, part)


def _reload(d, marker):
    """Sends SIGHUP and waits for the next log line with `marker` (the
    reload's outcome); returns that line."""
    before = d.log().count(marker)
    d.signal(signal.SIGHUP)
    assert wait_until(lambda: d.log().count(marker) > before or d.poll() is not None, 60), \
        "no '%s' line after SIGHUP:\n%s" % (marker, d.log_tail())
    assert d.poll() is None, "conveyord exited with %s on SIGHUP:\n%s" % (d.poll(), d.log_tail())
    return [line for line in d.log().splitlines() if marker in line][-1]


def _names(address):
    return sorted(p.name for p in conveyor.list_pipelines(address))


def test_sighup_with_the_same_config_keeps_serving(daemon_factory, dataset):
    root, _ = dataset
    d = daemon_factory(daemon_config(root), name="hup")
    want = _run(d.unix, "train")
    line = _reload(d, RELOADED)
    assert "unchanged [train, eval]" in line, line
    _assert_same(_run(d.unix, "train"), want, "train after a reload")
    assert d.socket_path.exists()


def test_reload_adds_removes_and_changes_pipelines_while_streams_run(daemon_factory, dataset):
    root, _ = dataset
    d = daemon_factory(daemon_config(root), name="reload")
    # The runs without a reload.
    want_train = _run(d.unix, "train", num_epochs=2)
    want_eval = _run(d.unix, "eval")

    train = conveyor.open_stream(d.unix, "train", 8, seed=7, credits=2, num_epochs=2)
    evals = conveyor.open_stream(d.unix, "eval", 8, seed=7, credits=2)
    try:
        got_train, got_eval = _take(train, 2), _take(evals, 2)
        # train changes (32 pixels), eval goes, extra comes.
        write_config(d.config_path, daemon_config(root, pipelines={
            "train": pipeline_entry(root, size=32),
            "extra": pipeline_entry(root, augment="eval", resize_size=48, size=40),
        }))
        line = _reload(d, RELOADED)
        assert "added [extra]" in line and "removed [eval]" in line and "changed [train]" in line, \
            line
        assert _names(d.unix) == ["extra", "train"]

        # The removed pipeline takes no new stream, and says which one.
        with pytest.raises(conveyor.NotFound, match="'eval'"):
            _run(d.unix, "eval")
        # New streams get the new definitions.
        extra = _run(d.unix, "extra")
        assert extra and extra[0][0].shape == (8, 3, 40, 40)
        assert _run(d.unix, "train")[0][0].shape == (8, 3, 32, 32)

        # The streams that ran through the reload finish on their old
        # definitions, byte for byte, without an error.
        got_train += _take(train)
        got_eval += _take(evals)
        assert train.end is not None and evals.end is not None
    finally:
        train.close()
        evals.close()
    _assert_same(got_train, want_train, "train stream across the reload")
    _assert_same(got_eval, want_eval, "stream of the removed pipeline")
    assert "ERROR" not in d.log() and " E " not in d.log(), d.log_tail()


def test_invalid_config_is_refused_and_the_old_one_stays(daemon_factory, dataset):
    root, _ = dataset
    d = daemon_factory(daemon_config(root), name="invalid")
    want = _run(d.unix, "train")
    bad = daemon_config(root)
    bad["pipelines"]["train"]["max_batch_size"] = 0
    write_config(d.config_path, bad)
    line = _reload(d, REFUSED)
    assert "pipelines.train.max_batch_size" in line, line
    # A dataset that cannot load is refused too (the second step of validation).
    write_config(d.config_path, daemon_config(root, pipelines={
        "train": pipeline_entry(root), "gone": pipeline_entry(root.parent / "missing")}))
    line = _reload(d, REFUSED)
    assert "pipelines.gone.dataset.root" in line, line
    assert _names(d.unix) == ["eval", "train"]
    _assert_same(_run(d.unix, "train"), want, "train after refused reloads")


def test_settings_that_need_a_restart_refuse_the_whole_reload(daemon_factory, dataset):
    root, _ = dataset
    d = daemon_factory(daemon_config(root), name="restart")
    changed = daemon_config(root, memory_budget="128MiB", max_streams=7)
    changed["pipelines"]["extra"] = pipeline_entry(root)
    write_config(d.config_path, changed)
    line = _reload(d, REFUSED)
    assert "memory_budget" in line and "max_streams" in line, line
    assert "restart" in line, line
    assert _names(d.unix) == ["eval", "train"]
    assert conveyor.stats(d.unix).slot_bytes_budget == 256 << 20


def test_check_config_is_unchanged(tmp_path, dataset):
    root, _ = dataset
    config = write_config(tmp_path / "conveyord.yaml", daemon_config(root))
    r = subprocess.run([str(CONVEYORD), "--config", str(config), "--check-config"],
                       capture_output=True, text=True, timeout=scaled(60))
    assert r.returncode == 0, r.stderr
    assert "OK: 2 pipeline(s) on 1 dataset(s)" in r.stdout, r.stdout


def test_streams_open_throughout_repeated_reloads(daemon_factory, dataset):
    # The pipeline set is swapped while other clients open streams: each
    # stream gets one whole definition (the old or the new), never an error.
    root, _ = dataset
    configs = [daemon_config(root), daemon_config(root, pipelines={
        "train": pipeline_entry(root, size=32), "eval": pipeline_entry(root, augment="eval")})]
    d = daemon_factory(configs[0], name="repeat")
    results, stop = [], threading.Event()

    def open_streams():
        while not stop.is_set():
            try:
                stream = conveyor.open_stream(d.unix, "train", 8, credits=1)
                try:
                    results.append(next(stream).images.shape)
                finally:
                    stream.close()
            except Exception as e:  # collected, asserted on the main thread
                results.append(e)

    opener = threading.Thread(target=open_streams, daemon=True)
    opener.start()
    try:
        for i in range(6):
            write_config(d.config_path, configs[(i + 1) % 2])
            _reload(d, RELOADED)
    finally:
        stop.set()
        opener.join(timeout=scaled(30))
    errors = [r for r in results if isinstance(r, Exception)]
    assert not errors, errors[:3]
    assert results and set(results) <= {(8, 3, 64, 64), (8, 3, 32, 32)}, set(results)
