"""Smoke test of bench/hostile_soak.py: `--smoke` (4 s per phase, 24
generated images, 40 idle TCP connections) so that the benchmark cannot rot.

No throughput verdict (meaningless at this size on a shared machine). What is
checked would be wrong if the benchmark or the daemon under hostile load
were broken: the run passes its own smoke checks (normal batches in both
phases, every hostile client ran, peak RSS within the worst case computed
from the config, a clean exit on SIGTERM); every hostile client did what it
is there for (the hostile reader was told of failed samples, every bad call
got an error status, never a stream, the idle connections were held, the
vanishers were killed); the figures agree with each other (images/s =
images / seconds, the ratio is their quotient, the bound is the sum of its
terms). Needs ~20 s on 2 cores.
"""

import json
import math
import os
import subprocess
import sys

import pytest

SOURCE_DIR = os.environ.get("CONVEYOR_SOURCE_DIR") or os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD_DIR = os.environ.get("CONVEYOR_BUILD_DIR") or os.path.join(SOURCE_DIR, "build")
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
BENCH = os.path.join(SOURCE_DIR, "bench", "hostile_soak.py")
CONVEYORD = os.path.join(BUILD_DIR, "server", "conveyord")
MiB = 1 << 20


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    json_out = tmp_path_factory.mktemp("hostile_soak") / "out.json"
    res = subprocess.run([PYTHON, BENCH, "--smoke", "--build", BUILD_DIR,
                          "--json-out", str(json_out)],
                         capture_output=True, text=True, timeout=240)
    assert res.returncode == 0, "hostile_soak.py --smoke failed (%d)\nstdout:\n%s\nstderr:\n%s" % (
        res.returncode, res.stdout[-5000:], res.stderr[-4000:])
    with open(json_out) as f:
        return json.load(f), res.stdout


pytestmark = pytest.mark.skipif(not os.access(CONVEYORD, os.X_OK),
                                reason="conveyord not built at %s" % CONVEYORD)


def test_smoke_checks_pass_and_the_daemon_exits_cleanly(smoke):
    r, out = smoke
    assert r["verdict"] == "PASS"
    assert r["checks"]["ratio"] is None  # no ratio verdict in a smoke run
    for name, ok in r["checks"].items():
        assert ok in (True, None), (name, r["checks"])
    assert r["daemon_exit_status"] == 0
    assert "hostile soak (smoke): PASS" in out


def test_normal_clients_delivered_in_both_phases(smoke):
    r, _ = smoke
    for phase in ("solo", "mixed"):
        p = r[phase]
        assert p["errors"] == [], (phase, p["errors"])
        assert len(p["clients"]) == r["clients"]
        assert {c["transport"] for c in p["clients"]} == {"shared_memory", "data_socket"}
        # Delivered in the clients' lives (the window of 4 s alone may catch
        # none on a loaded machine); the window's count is part of it.
        assert sum(c["images_total"] for c in p["clients"]) > 0, (phase, p["clients"])
        assert all(0 <= c["images"] <= c["images_total"] and not c["stuck"]
                   for c in p["clients"]), p["clients"]
        assert p["images"] == sum(c["images"] for c in p["clients"])
        assert math.isclose(p["images_per_s"], p["images"] / p["seconds"])
    assert math.isclose(r["ratio"], r["mixed"]["images_per_s"] / r["solo"]["images_per_s"])


def test_hostile_clients_did_their_part(smoke):
    r, _ = smoke
    procs = r["hostile"]["procs"]
    hostile = procs["reader hostile"]
    assert hostile["streams"] >= 1 and hostile["failures"] > 0, hostile
    assert not hostile["stuck"], hostile
    for name in ("reader remote_fail", "reader remote_slow"):
        assert procs[name]["streams"] >= 1, procs[name]
    bad = procs["bad-requests"]
    assert bad["calls"] > 0
    for call, outcomes in bad["by_call"].items():
        # Every bad call is refused with a status: none opens a stream, none
        # is left unanswered.
        assert set(outcomes) <= {"INVALID_ARGUMENT", "NOT_FOUND", "FAILED_PRECONDITION",
                                 "RESOURCE_EXHAUSTED", "UNIMPLEMENTED"}, (call, outcomes)
    idle = procs["idle-tcp"]
    assert idle["opened"] >= idle["wanted"] == 40, idle
    assert idle["held_max"] == 40, idle
    v = r["hostile"]["vanishers"]
    assert v["killed"] >= 1 and v["killed"] == v["spawned"], v
    fail = r["hostile"]["servers"]["fail"]
    assert fail["requests"] > 0 and fail["failed"] + fail["dropped"] > 0, fail


def test_memory_and_fds_figures_hold_together(smoke):
    r, out = smoke
    assert r["bound"] == sum(v for _, v in r["bound_terms"])
    terms = dict(r["bound_terms"])
    assert r["config"]["memory_budget"] == "128MiB" and terms["memory_budget"] == 128 * MiB
    assert terms["threads x max_decode_memory"] == r["config"]["threads"] * 64 * MiB
    peak = max(r["rss_peak_sampled"], r["vmhwm"])
    assert 0 < peak <= r["bound"], (peak, r["bound"])
    assert r["rss_peak_sampled"] == max(s["rss"] for s in r["samples"])
    mixed = r["daemon"]["mixed"]
    # The 40 idle connections were held while the daemon was sampled.
    assert mixed["fds_max"] >= r["daemon"]["solo"]["fds_max"] + 40 - 5, r["daemon"]
    assert mixed["samples"] > 0 and r["daemon"]["solo"]["samples"] > 0
    for line in ("images/s", "worst case from the config", "memory_budget", "bad requests",
                 "idle TCP connections", "vanishers", "daemon exit status on SIGTERM: 0"):
        assert line in out, line
