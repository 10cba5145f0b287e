"""The `conveyor` command line against a real daemon: pipelines, fetch, stats,
help, and the documented exit codes."""

import json
import os
import subprocess

import numpy as np
import pytest

import conveyor
from conveyor_integration import (CLI, IMAGE_SIZE, PYTHON, client_env, daemon_config,
                                  wait_until)


def run_cli(*args, timeout=60):
    return subprocess.run([PYTHON, str(CLI)] + [str(a) for a in args], capture_output=True,
                          text=True, timeout=timeout, env=client_env())


def test_pipelines_lists_the_table(daemon):
    res = run_cli("pipelines", "--server", daemon.unix)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].split()[0] == "pipeline"
    names = {line.split()[0] for line in lines[2:]}
    assert names == {"train", "eval"}
    assert "3x%dx%d" % (IMAGE_SIZE, IMAGE_SIZE) in res.stdout


@pytest.mark.parametrize("fmt", ["npz", "npy"])
def test_fetch_writes_n_batches_with_right_shapes(daemon, dataset, tmp_path, fmt):
    _, samples = dataset
    out = tmp_path / "batches"
    res = run_cli("fetch", "--server", daemon.unix, "--pipeline", "train", "--batches", 7,
                  "--batch-size", 8, "--seed", 4, "--out", out, "--format", fmt)
    assert res.returncode == 0, res.stderr
    assert "images/s" in res.stdout
    files = sorted(p.name for p in out.iterdir())
    if fmt == "npz":
        assert files == ["batch_%05d.npz" % i for i in range(7)]
        arrays = [dict(np.load(out / f)) for f in files]
    else:
        assert len(files) == 21
        arrays = [{k: np.load(out / ("batch_%05d_%s.npy" % (i, k)))
                   for k in ("images", "labels", "indices")} for i in range(7)]
    for a in arrays:
        assert a["images"].shape == (8, 3, IMAGE_SIZE, IMAGE_SIZE)
        assert a["images"].dtype == np.uint8
        assert a["labels"].shape == (8,) and a["labels"].dtype == np.int64
        assert a["indices"].shape == (8,)
        assert a["labels"].tolist() == [samples[i][1] for i in a["indices"]]
    # 7 batches of 8 cross into the second epoch (48 samples): the first 6 cover epoch 0.
    first_epoch = np.concatenate([a["indices"] for a in arrays[:6]])
    assert sorted(first_epoch.tolist()) == list(range(len(samples)))


@pytest.mark.parametrize("transport", ["auto", "inline"])
def test_fetch_from_a_remote_daemon_over_tcp_matches_the_unix_socket(daemon, tmp_path, transport):
    """What a user on another host gets (TCP: the data socket by default, or
    inline) is what a local user gets through shared memory."""
    outs = {}
    for name, server, t in (("tcp", daemon.tcp, transport), ("unix", daemon.unix, "auto")):
        outs[name] = tmp_path / name
        res = run_cli("fetch", "--server", server, "--pipeline", "train", "--batches", 3,
                      "--batch-size", 8, "--seed", 11, "--out", outs[name], "--transport", t)
        assert res.returncode == 0, res.stderr
    for i in range(3):
        a = np.load(outs["tcp"] / ("batch_%05d.npz" % i))
        b = np.load(outs["unix"] / ("batch_%05d.npz" % i))
        for key in ("images", "labels", "indices"):
            np.testing.assert_array_equal(a[key], b[key])


def test_stats_marks_the_bottleneck(daemon):
    loader = conveyor.Loader(daemon.unix, pipeline="train", batch_size=8, credits=2)
    with loader.stream(num_epochs=0) as stream:
        for _, _b in zip(range(8), stream):  # some traffic, and one stream left open
            pass
        res = run_cli("stats", "--server", daemon.unix)
    loader.close()
    assert res.returncode == 0, res.stderr
    out = res.stdout
    header = next(line for line in out.splitlines() if line.startswith("stage"))
    for col in ("items in", "items out", "failures", "busy s", "wait-in s", "wait-out s",
                "queue fill"):
        assert col in header
    marked = [line for line in out.splitlines() if line.rstrip().endswith("<- bottleneck")]
    assert len(marked) == 1, out
    assert "bottleneck: %s" % marked[0].split()[0] in out
    assert "stream %d" % stream.stream_id in out


def test_stats_names_no_bottleneck_when_idle(daemon_factory, dataset):
    """Past streams did work, none is open now: no stage limits anything."""
    d = daemon_factory(daemon_config(dataset[0]))
    loader = conveyor.Loader(d.unix, pipeline="train", batch_size=8, credits=2)
    with loader.stream(num_epochs=1) as stream:
        assert sum(1 for _ in stream) == 6
    loader.close()
    assert wait_until(d.idle, 30)
    res = run_cli("stats", "--server", d.unix)
    assert res.returncode == 0, res.stderr
    assert "bottleneck: none (idle)" in res.stdout, res.stdout
    assert "<- bottleneck" not in res.stdout, res.stdout


def test_unknown_pipeline_exits_3(daemon, tmp_path):
    res = run_cli("fetch", "--server", daemon.unix, "--pipeline", "nope", "--batches", 1,
                  "--out", tmp_path / "o")
    assert res.returncode == 3, res.stderr
    assert "nope" in res.stderr


def test_no_server_exits_4(tmp_path):
    for cmd in (["pipelines"], ["stats"],
                ["fetch", "--pipeline", "train", "--batches", 1, "--out", tmp_path / "o"]):
        res = run_cli(*cmd, "--server", "unix://%s" % (tmp_path / "missing.sock"))
        assert res.returncode == 4, (cmd, res.stderr)


def test_invalid_request_and_usage_exit_2(daemon, tmp_path):
    res = run_cli("fetch", "--server", daemon.unix, "--pipeline", "train", "--batches", 1,
                  "--batch-size", 0, "--out", tmp_path / "o")
    assert res.returncode == 2, res.stderr
    assert run_cli("fetch", "--pipeline", "train").returncode == 2  # missing arguments


def test_help_everywhere_documents_exit_codes():
    for cmd in ([], ["pipelines"], ["fetch"], ["stats"], ["top"]):
        res = run_cli(*cmd, "--help")
        assert res.returncode == 0
        assert "exit codes" in res.stdout and "server unavailable" in res.stdout


def _screen(raw):
    """What a terminal shows after `raw`: carriage return, ESC [K (erase to
    the end of the line) and newline applied; the lines, trailing spaces
    dropped, empty last line too."""
    lines, col = [""], 0
    i = 0
    while i < len(raw):
        if raw.startswith("\033[K", i):
            lines[-1] = lines[-1][:col]
            i += 3
            continue
        c = raw[i]
        i += 1
        if c == "\r":
            col = 0
        elif c == "\n":
            lines.append("")
            col = 0
        else:
            line = lines[-1].ljust(col)
            lines[-1] = line[:col] + c + line[col + 1:]
            col += 1
    lines = [line.rstrip() for line in lines]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def run_cli_on_a_tty(*args, timeout=60):
    """Runs the CLI with a pseudo-terminal as stdout: (exit code, what it
    wrote to the terminal, stderr)."""
    import pty
    master, slave = pty.openpty()
    p = subprocess.Popen([PYTHON, str(CLI)] + [str(a) for a in args], stdout=slave,
                         stderr=subprocess.PIPE, env=client_env())
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the terminal's last writer is gone
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    err = p.communicate(timeout=timeout)[1]
    return p.returncode, b"".join(chunks).decode(), err.decode()


def test_fetch_progress_bar_on_a_terminal_leaves_no_text_behind(daemon, tmp_path):
    rc, raw, err = run_cli_on_a_tty("fetch", "--server", daemon.unix, "--pipeline", "train",
                                    "--batches", 5, "--batch-size", 8, "--out", tmp_path / "o")
    assert rc == 0, err
    assert "/5 batches" in raw, raw  # the bar was drawn
    screen = _screen(raw.replace("\r\n", "\n"))  # the tty's ONLCR
    assert len(screen) == 1, screen
    assert screen[0].startswith("fetched 5 batches, 40 images"), screen


def test_fetch_epochs_fetches_whole_epochs_whatever_their_batches(daemon, dataset, tmp_path):
    _, samples = dataset
    out = tmp_path / "one"
    # 48 samples in batches of 5: 9 full batches and one of 3.
    res = run_cli("fetch", "--server", daemon.unix, "--pipeline", "train", "--epochs", 1,
                  "--batch-size", 5, "--seed", 2, "--out", out, "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["batches"] == 10
    files = sorted(p.name for p in out.iterdir())
    assert files == ["batch_%05d.npz" % i for i in range(10)]
    indices = np.concatenate([np.load(out / f)["indices"] for f in files])
    assert sorted(indices.tolist()) == list(range(len(samples)))
    # Two epochs from epoch 3: each one whole, in its own order.
    res = run_cli("fetch", "--server", daemon.unix, "--pipeline", "train", "--epochs", 2,
                  "--epoch", 3, "--batch-size", 16, "--seed", 2, "--out", tmp_path / "two",
                  "--json")
    assert res.returncode == 0, res.stderr
    got = [np.load(tmp_path / "two" / ("batch_%05d.npz" % i))["indices"] for i in range(6)]
    assert json.loads(res.stdout)["batches"] == 6
    for epoch in (got[:3], got[3:]):
        assert sorted(np.concatenate(epoch).tolist()) == list(range(len(samples)))
    # One of --batches / --epochs, not both, not neither.
    for extra in ([], ["--batches", 1, "--epochs", 1]):
        res = run_cli("fetch", "--server", daemon.unix, "--pipeline", "train",
                      "--out", tmp_path / "x", *extra)
        assert res.returncode == 2, (extra, res.stderr)
    res = run_cli("fetch", "--server", daemon.unix, "--pipeline", "train", "--epochs", 0,
                  "--out", tmp_path / "x")
    assert res.returncode == 2 and "--epochs must be at least 1" in res.stderr, res.stderr


def test_stats_count_the_samples_of_cancelled_streams(daemon_factory, dataset):
    """A stream cancelled mid-epoch leaves the list of open streams; what it
    delivered stays in the daemon's totals, with a finished stream's."""
    d = daemon_factory(daemon_config(dataset[0]))
    whole = conveyor.open_stream(d.unix, "eval", 8, num_epochs=1, credits=2)
    assert sum(b.num_samples for b in whole) == 48
    whole.close()
    cut = conveyor.open_stream(d.unix, "train", 8, num_epochs=1, credits=2)
    read = sum(b.num_samples for _, b in zip(range(3), cut))
    cut.close()  # cancelled mid-epoch: 3 of 6 batches read
    assert wait_until(d.idle, 30)
    res = run_cli("stats", "--server", d.unix, "--json")
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    assert got["streams"] == []
    by_pipeline = {x["pipeline"]: x for x in got["deliveries"]}
    assert by_pipeline["eval"]["samples"] == 48 and by_pipeline["eval"]["batches"] == 6
    # Sent to the cancelled stream's client: what it read, and at most its
    # credits' worth more that were on their way.
    cancelled = by_pipeline["train"]
    assert read == 24
    assert read <= cancelled["samples"] <= read + 2 * 8, got
    assert got["delivered"]["samples"] == 48 + cancelled["samples"]
    assert got["delivered"]["batches"] == 6 + cancelled["batches"]
    text = run_cli("stats", "--server", d.unix)
    assert text.returncode == 0, text.stderr
    assert "delivered since start: %d batches, %d samples" % (
        got["delivered"]["batches"], got["delivered"]["samples"]) in text.stdout, text.stdout
    assert "pipeline train over shared_memory: %d batches" % cancelled["batches"] in text.stdout
