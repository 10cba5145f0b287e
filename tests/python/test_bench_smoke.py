"""Smoke test of bench/vs_dataloader.py: `--quick` on ~40 generated images.

Runs every contender once (one epoch, no warm-up) so that the benchmark
cannot rot: it must exit 0, write the JSON with every contender and its
figures, the ratios and targets, and a PNG chart. The figures themselves are
meaningless at this size and are not checked. The conveyord contenders are
skipped only when the daemon is not built (CI builds it); likewise the
ceiling binary. Needs ~30 s on 2 cores.
"""

import json
import os
import subprocess
import sys

import pytest

SOURCE_DIR = os.environ.get("CONVEYOR_SOURCE_DIR") or os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD_DIR = os.environ.get("CONVEYOR_BUILD_DIR") or os.path.join(SOURCE_DIR, "build")
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
BENCH = os.path.join(SOURCE_DIR, "bench", "vs_dataloader.py")
GEN = os.path.join(SOURCE_DIR, "bench", "gen_imagenet_like.py")
CONVEYORD = os.path.join(BUILD_DIR, "server", "conveyord")
CEILING = os.path.join(BUILD_DIR, "bench", "ceiling_bench")
IMAGES = 40
BATCH = 16
CORES = len(os.sched_getaffinity(0))
# 1, 2 and the core count, as the benchmark's default, but at most 8 workers
# here so that a many-core CI host does not fork dozens of torch processes.
WORKERS = sorted({1, 2, min(CORES, 8)})


def built(path):
    return os.access(path, os.X_OK)


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bench_smoke")
    data = tmp / "data"
    subprocess.run([PYTHON, GEN, "--out", str(data), "--images", str(IMAGES), "--classes", "4",
                    "--seed", "7", "--workers", "2"], check=True, timeout=180,
                   stdout=subprocess.DEVNULL)
    json_out, chart_out = tmp / "out.json", tmp / "out.png"
    cmd = [PYTHON, BENCH, "--quick", "--data", str(data), "--build", BUILD_DIR,
           "--batch-size", str(BATCH), "--allow-missing",
           "--workers", ",".join(str(w) for w in WORKERS),
           "--json-out", str(json_out), "--chart-out", str(chart_out)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, "vs_dataloader.py --quick failed (%d)\nstdout:\n%s\nstderr:\n%s" % (
        res.returncode, res.stdout[-4000:], res.stderr[-6000:])
    with open(json_out) as f:
        result = json.load(f)
    return {"result": result, "stdout": res.stdout, "stderr": res.stderr, "chart": chart_out}


def check_python_contender(c, name, workers_or_transport):
    runs = c["runs"]
    assert len(runs) == 1, name
    run = runs[0]
    assert len(run["epochs"]) == 1, name
    ep = run["epochs"][0]
    assert ep["images"] == IMAGES, (name, ep)
    assert ep["batches"] == (IMAGES + BATCH - 1) // BATCH, (name, ep)
    assert ep["images_per_s"] > 0 and ep["cpu_s"] > 0, (name, ep)
    assert run["first_batch_shape"] == [BATCH, 3, 224, 224], (name, run)
    assert "uint8" in run["first_batch_dtype"], (name, run)
    assert run["ttfb_s"] > 0, (name, run)
    assert run["peak_pss_bytes"] and run["peak_pss_bytes"] > 1 << 20, (name, run)
    s = c["summary"]
    for key in ("images_per_s", "cpu_s_per_image", "peak_pss_bytes", "ttfb_s"):
        assert s[key] and s[key] > 0, (name, key, s)


def test_dataloader_contenders(quick_run):
    r = quick_run["result"]
    assert r["meta"]["workers"] == WORKERS
    for w in WORKERS:
        name = "dataloader-w%d" % w
        assert name in r["contenders"], sorted(r["contenders"])
        c = r["contenders"][name]
        check_python_contender(c, name, w)
        # parent + its persistent workers were all measured
        assert c["runs"][0]["max_processes"] >= 1 + w, c["runs"][0]
    assert r["ratios_vs"] == "dataloader-w2"
    assert abs(r["ratios"]["dataloader-w2"]["images_per_s"] - 1.0) < 1e-9


@pytest.mark.skipif(not built(CONVEYORD), reason="conveyord not built at %s" % CONVEYORD)
def test_conveyord_contenders(quick_run):
    r = quick_run["result"]
    for transport, expect in (("unix", "shared_memory"), ("tcp", "data_socket")):
        name = "conveyord-" + transport
        c = r["contenders"][name]
        assert "skipped" not in c["config"], c["config"]
        check_python_contender(c, name, transport)
        run = c["runs"][0]
        assert run["transport"] == expect, run
        assert run["max_processes"] >= 2, run  # client + daemon
        assert 0 < run["serving_s"] <= run["ttfb_s"], run
        for key in ("images_per_s", "cpu_s_per_image", "peak_pss", "ttfb"):
            assert r["ratios"][name][key] > 0, (name, key)
    names = [t["target"] for t in r["targets"]]
    assert len([n for n in names if n.startswith("conveyord-unix") and "dataloader-w2" in n]) == 4
    for t in r["targets"]:
        assert t["result"] in ("PASS", "FAIL"), t
    assert "targets:" in quick_run["stdout"]
    assert "PASS" in quick_run["stdout"] or "FAIL" in quick_run["stdout"]


@pytest.mark.skipif(not built(CEILING), reason="ceiling_bench not built at %s" % CEILING)
def test_ceiling_contender(quick_run):
    r = quick_run["result"]
    c = r["contenders"]["ceiling"]
    assert len(c["runs"]) == 1
    assert c["summary"]["images_per_s"] > 0
    assert c["summary"]["cpu_s_per_image"] > 0
    if built(CONVEYORD):
        names = [t["target"] for t in r["targets"]]
        assert "conveyord-unix images/s vs ceiling" in names
        assert "conveyord-tcp images/s vs ceiling" in names


def test_every_contender_reported(quick_run):
    r = quick_run["result"]
    expected = ["dataloader-w%d" % w for w in WORKERS]
    expected += ["conveyord-unix", "conveyord-tcp", "ceiling"]
    assert sorted(r["contenders"]) == sorted(expected)
    for name, c in r["contenders"].items():
        binary = {"conveyord-unix": CONVEYORD, "conveyord-tcp": CONVEYORD, "ceiling": CEILING}.get(name)
        if binary is None or built(binary):
            assert c["runs"] and c["summary"], name
        else:
            assert c["config"].get("skipped"), name
    for line in ("contender", "ratios against dataloader-w2"):
        assert line in quick_run["stdout"]


def test_chart_written(quick_run):
    chart = quick_run["chart"]
    data = chart.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 10000
