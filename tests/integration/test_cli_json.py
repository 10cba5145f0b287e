"""`conveyor ... --json` against real daemons: every subcommand writes one
JSON object to stdout (top: one per refresh), errors included, with the
documented keys and exit codes; fetch draws no progress bar when piped."""

import json
import subprocess
import threading

import pytest

import conveyor
from conveyor_integration import (CLI, PYTHON, client_env, daemon_config, scaled,
                                  wait_until)


def run_cli(*args, timeout=60):
    return subprocess.run([PYTHON, str(CLI)] + [str(a) for a in args], capture_output=True,
                          text=True, timeout=scaled(timeout), env=client_env())


def run_json(*args, expect=0):
    res = run_cli(*args, "--json")
    assert res.returncode == expect, (res.returncode, res.stdout, res.stderr)
    return json.loads(res.stdout)


def stage(doc, name):
    return next(s for s in doc["stages"] if s["name"] == name)


def test_pipelines_json(daemon):
    doc = run_json("pipelines", "--server", daemon.unix)
    by_name = {p["name"]: p for p in doc["pipelines"]}
    assert sorted(by_name) == ["eval", "train"]
    train = by_name["train"]
    assert train["dataset_size"] == 48 and train["num_classes"] == 3
    assert train["sample_shape"] == [3, 64, 64]
    assert (train["dtype"], train["layout"], train["augment"]) == ("uint8", "nchw", "train")
    assert train["max_batch_size"] == 64 and train["error_policy"] == "skip"


def test_fetch_json_when_piped_has_no_progress_bar(daemon, tmp_path):
    out = tmp_path / "b"
    res = run_cli("fetch", "--server", daemon.unix, "--pipeline", "train", "--batches", 3,
                  "--batch-size", 8, "--out", out, "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)  # the whole of stdout: one object, no bar around it
    assert doc["batches"] == 3 and doc["images"] == 24 and doc["failed_samples"] == 0
    assert doc["out"] == str(out) and doc["format"] == "npz"
    assert doc["seconds"] > 0 and doc["images_per_s"] > 0
    assert len(list(out.iterdir())) == 3
    # Without --json, piped: the summary line only.
    res = run_cli("fetch", "--server", daemon.unix, "--pipeline", "train", "--batches", 3,
                  "--batch-size", 8, "--out", tmp_path / "c")
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("fetched 3 batches"), res.stdout
    assert "\r" not in res.stdout + res.stderr and "[#" not in res.stdout + res.stderr


def test_stats_json_while_a_stream_is_open_and_when_idle(daemon_factory, dataset):
    d = daemon_factory(daemon_config(dataset[0]))
    loader = conveyor.Loader(d.unix, pipeline="train", batch_size=8, credits=2)
    with loader.stream(num_epochs=0) as stream:
        for _, _b in zip(range(8), stream):
            pass
        doc = run_json("stats", "--server", d.unix)
    loader.close()
    assert doc["threads"] == 2 and doc["streams_open"] == 1 and doc["streams_total"] == 1
    assert doc["bottleneck"] in {s["name"] for s in doc["stages"]}
    units = {s["name"]: (s["unit_in"], s["unit_out"]) for s in doc["stages"]}
    assert units == {"sample": ("epochs", "epochs"), "fetch": ("samples", "samples"),
                     "decode": ("samples", "samples"), "collate": ("samples", "batches"),
                     "deliver": ("batches", "batches")}
    assert stage(doc, "deliver")["items_out"] >= 8
    assert stage(doc, "collate")["items_in"] >= 8 * 8
    [st] = doc["streams"]
    assert st["stream_id"] == stream.stream_id and st["pipeline"] == "train"
    assert st["credits"] == 2 and 0 <= st["credits_in_use"] <= 2
    assert st["samples"] >= 64 and st["batches"] >= 8
    assert "pid" in st["client"] and "uid" in st["client"]  # unix peer credentials

    assert wait_until(d.idle, 30)
    idle = run_json("stats", "--server", d.unix)
    assert idle["bottleneck"] is None
    assert idle["streams"] == [] and idle["streams_open"] == 0
    assert stage(idle, "decode")["items_out"] >= 64  # the totals stay
    # Queue fill is of the open streams: a finished stream's queues are gone.
    for s in idle["stages"]:
        assert (s["queue_size"], s["queue_capacity"], s["in_flight"]) == (0, 0, 0), s


def test_top_json_lines_have_rates_under_load(daemon_factory, dataset):
    d = daemon_factory(daemon_config(dataset[0]))
    stop = threading.Event()
    loader = conveyor.Loader(d.unix, pipeline="train", batch_size=8, credits=2)

    def read():
        with loader.stream(num_epochs=0) as stream:
            for _ in stream:
                if stop.is_set():
                    return

    reader = threading.Thread(target=read)
    reader.start()
    try:
        assert wait_until(lambda: conveyor.stats(d.unix).streams, 30)
        res = run_cli("top", "--server", d.unix, "--json", "--interval", "0.3", "--count", 4)
    finally:
        stop.set()
        reader.join(scaled(30))
        loader.close()
    assert res.returncode == 0, res.stderr
    frames = [json.loads(line) for line in res.stdout.splitlines()]
    assert len(frames) == 4
    assert frames[0]["interval_s"] is None and frames[0]["load"] is None
    later = frames[1:]
    assert all(f["interval_s"] > 0 for f in later)
    loaded = [f for f in later if f["load"]]
    assert loaded, later
    assert all(f["bottleneck"] for f in loaded)
    assert any(stage(f, "decode")["out_per_s"] > 0 for f in loaded)
    assert all(0 <= stage(f, "decode")["busy_pct"] <= 100 for f in later)
    assert any(f["streams"] and f["streams"][0]["images_per_s"] > 0 for f in later)


def test_errors_are_json_with_the_documented_exit_codes(daemon, tmp_path):
    missing = "unix://%s" % (tmp_path / "missing.sock")
    for cmd in (["pipelines"], ["stats"], ["top"],
                ["fetch", "--pipeline", "train", "--batches", 1, "--out", tmp_path / "o"]):
        doc = run_json(*cmd, "--server", missing, expect=4)
        assert doc["error"]["code"] == "UNAVAILABLE", doc
        assert doc["error"]["exit_code"] == 4 and doc["error"]["command"] == cmd[0]
        assert "missing.sock" in doc["error"]["message"]
    doc = run_json("fetch", "--server", daemon.unix, "--pipeline", "nope", "--batches", 1,
                   "--out", tmp_path / "o", expect=3)
    assert doc["error"]["code"] == "NOT_FOUND" and "nope" in doc["error"]["message"]
    doc = run_json("fetch", "--server", daemon.unix, "--pipeline", "train", "--batches", 0,
                   "--out", tmp_path / "o", expect=2)
    assert doc["error"]["code"] is None and "--batches" in doc["error"]["message"]
    doc = run_json("stats", "--server", daemon.unix, "--no-such-flag", expect=2)
    assert doc["error"] == {"command": "stats", "exit_code": 2, "code": None,
                            "message": "unrecognized arguments: --no-such-flag"}


@pytest.mark.parametrize("args", [["--interval", "0"], ["--count", "-1"], []])
def test_top_refuses_bad_flags_and_a_pipe_for_a_terminal(daemon, args):
    res = run_cli("top", "--server", daemon.unix, *args)
    assert res.returncode == 2, res.stderr
    assert "conveyor top:" in res.stderr
    assert "Traceback" not in res.stderr
