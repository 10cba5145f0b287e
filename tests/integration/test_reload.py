"""SIGHUP re-reads the config file while streams run: added pipelines can be
opened at once, removed ones refuse new streams (NOT_FOUND naming them)
while their running streams finish, changed ones serve new streams with the
new definition while running streams keep the old one — byte for byte the
batches of a run without a reload. The token files are read again (a
rotated token works at once, the old one is refused) and log_level applies
at once. A config that fails validation, a token file that cannot be read,
or a file that changes settings a running daemon cannot change, is refused
with a log line naming the problem, and the old config stays. Each outcome
is counted in GetStats and on /metrics (parsed by Prometheus' own parser).
`--check-config --no-data` checks the fields without the data."""

import os
import secrets
import signal
import threading
import subprocess
import time

import grpc
import numpy as np
import pytest

import conveyor
from conveyor_integration import (CONVEYORD, _yaml, daemon_config, pb, pb_grpc, pipeline_entry,
                                  scaled, wait_until, write_config)

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


def _check(config, *flags):
    return subprocess.run([str(CONVEYORD), "--config", str(config), "--check-config", *flags],
                          capture_output=True, text=True, timeout=scaled(60))


def _with_tokens(cfg, tokens, require_token_on_unix=False):
    """The YAML of `cfg` with an access section of `tokens` ({name: file})
    (conftest's writer does not nest maps in lists)."""
    text = _yaml(cfg) + "\naccess:\n  require_token_on_unix: %s\n  tokens:\n" % (
        "true" if require_token_on_unix else "false")
    for name, path in tokens.items():
        text += "    - {name: %s, file: '%s'}\n" % (name, path)
    return text


def test_check_config_no_data_checks_the_fields_without_the_data(tmp_path):
    # Neither the dataset nor the token file exists on this "CI host".
    missing = tmp_path / "data" / "imagenet"
    config = write_config(tmp_path / "conveyord.yaml", _with_tokens(
        daemon_config(missing), {"trainer": tmp_path / "secrets" / "trainer"}))
    r = _check(config, "--no-data")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "OK: 2 pipeline(s) on 1 dataset(s): train, eval" in r.stdout, r.stdout
    assert "--no-data" in r.stdout and not r.stderr, r.stdout + r.stderr
    # The full check needs the data, and says which field lacks it.
    r = _check(config)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "field pipelines.train.dataset.root" in r.stderr, r.stderr

    # Every field is still checked: a bad value is the same error, exit 2.
    bad = daemon_config(missing)
    bad["pipelines"]["eval"]["max_batch_size"] = 0
    r = _check(write_config(tmp_path / "bad.yaml", bad), "--no-data")
    assert r.returncode == 2 and "field pipelines.eval.max_batch_size" in r.stderr, r.stderr
    r = _check(write_config(tmp_path / "typo.yaml", dict(daemon_config(missing), thread=2)),
               "--no-data")
    assert r.returncode == 2 and "unknown field" in r.stderr, r.stderr
    # A dataset outside allowed_roots, as written, too.
    outside = daemon_config(missing, allowed_roots=[str(tmp_path / "elsewhere")])
    r = _check(write_config(tmp_path / "outside.yaml", outside), "--no-data")
    assert r.returncode == 2 and "allowed roots" in r.stderr, r.stderr
    # --no-data means nothing on its own.
    r = subprocess.run([str(CONVEYORD), "--config", str(config), "--no-data"],
                       capture_output=True, text=True, timeout=scaled(30))
    assert r.returncode == 2 and "--no-data: only with --check-config" in r.stderr, r.stderr


def _token_file(path, token=None):
    token = token or secrets.token_hex(32)
    path.write_text(token + "\n")
    os.chmod(path, 0o600)
    return token


def _list_code(address, token):
    """The status code of ListPipelines over TCP with `token`."""
    channel = grpc.insecure_channel(address)
    try:
        pb_grpc.ConveyorStub(channel).ListPipelines(
            pb.ListPipelinesRequest(), timeout=scaled(10),
            metadata=[("authorization", "Bearer " + token)])
        return grpc.StatusCode.OK
    except grpc.RpcError as e:
        return e.code()
    finally:
        channel.close()


def test_sighup_reads_the_token_files_again(daemon_factory, dataset, tmp_path):
    root, _ = dataset
    path = tmp_path / "trainer.token"
    old = _token_file(path)
    d = daemon_factory(_with_tokens(daemon_config(root), {"trainer": path}), name="tokens")
    assert _list_code(d.tcp, old) == grpc.StatusCode.OK

    new = _token_file(path)  # rotated on disk
    # Until the reload the daemon holds the token it read.
    assert _list_code(d.tcp, old) == grpc.StatusCode.OK
    assert _list_code(d.tcp, new) == grpc.StatusCode.UNAUTHENTICATED
    line = _reload(d, RELOADED)
    assert "1 bearer token(s) read again" in line, line
    assert _list_code(d.tcp, new) == grpc.StatusCode.OK
    assert _list_code(d.tcp, old) == grpc.StatusCode.UNAUTHENTICATED

    # A file that is not fit to hold a token refuses the reload, naming the
    # field and the file; the token read before stays the valid one.
    third = _token_file(path)
    os.chmod(path, 0o644)
    line = _reload(d, REFUSED)
    assert "access.tokens[0].file" in line and str(path) in line, line
    assert _list_code(d.tcp, new) == grpc.StatusCode.OK
    assert _list_code(d.tcp, third) == grpc.StatusCode.UNAUTHENTICATED
    path.write_text("short\n")
    os.chmod(path, 0o600)
    line = _reload(d, REFUSED)
    assert "access.tokens[0].file" in line and "at least 16" in line, line
    assert _list_code(d.tcp, new) == grpc.StatusCode.OK
    for token in (old, new, third):
        assert token not in d.log()


def test_sighup_applies_log_level(daemon_factory, dataset):
    # The fd hand-over of a shared-memory stream logs a debug line.
    root, _ = dataset
    d = daemon_factory(daemon_config(root), name="level")
    marker = "fd hand-over: stream"
    _run(d.unix, "eval")
    assert marker not in d.log(), d.log_tail()
    write_config(d.config_path, daemon_config(root, log_level="debug"))
    line = _reload(d, RELOADED)
    assert "log_level info -> debug" in line, line
    _run(d.unix, "eval")
    assert wait_until(lambda: marker in d.log(), 10), d.log_tail()
    # And back: no more debug lines.
    write_config(d.config_path, daemon_config(root, log_level="warn"))
    before = d.log().count(marker)
    # The reload's own line is logged before the level goes up to warn.
    assert "log_level debug -> warn" in _reload(d, RELOADED)
    assert conveyor.stats(d.unix).config_reloads_succeeded == 2
    _run(d.unix, "eval")
    assert d.log().count(marker) == before, d.log_tail()
    # An unknown level is refused like any bad value.
    write_config(d.config_path, daemon_config(root, log_level="loud"))
    line = _reload(d, REFUSED)
    assert "log_level" in line and "loud" in line, line


def test_reloads_are_counted_in_stats_and_metrics(daemon_factory, dataset):
    from test_metrics import metrics_url, scrape, value  # the official parser's reading
    root, _ = dataset
    started = time.time()
    cfg = daemon_config(root, metrics={"listen": "127.0.0.1:0"})
    d = daemon_factory(cfg, name="counted")
    url = metrics_url(d)

    def figures():
        _, families, _ = scrape(url)
        assert families["conveyor_config_reloads"]["type"] == "counter", families.keys()
        assert families["conveyor_config_last_reload_success_timestamp_seconds"]["type"] == \
            "gauge"
        return (value(families, "conveyor_config_reloads_total", result="success"),
                value(families, "conveyor_config_reloads_total", result="failure"),
                value(families, "conveyor_config_last_reload_success_timestamp_seconds"))

    ok, failed, at = figures()
    # Before any reload: zeros, and the time the config loaded at start.
    assert (ok, failed) == (0, 0)
    assert started - 1 <= at <= time.time(), (started, at)

    before = time.time()
    _reload(d, RELOADED)
    ok, failed, reloaded_at = figures()
    assert (ok, failed) == (1, 0)
    assert before - 0.01 <= reloaded_at <= time.time() and reloaded_at > at, (before, reloaded_at)

    bad = dict(cfg, max_streams=0)
    write_config(d.config_path, bad)
    _reload(d, REFUSED)
    ok, failed, at = figures()
    assert (ok, failed, at) == (1, 1, reloaded_at)  # a refused reload leaves the time alone

    st = conveyor.stats(d.unix)
    assert (st.config_reloads_succeeded, st.config_reloads_failed) == (1, 1)
    assert st.config_last_reload_success_unix_ns / 1e9 == pytest.approx(reloaded_at, abs=1e-6)
