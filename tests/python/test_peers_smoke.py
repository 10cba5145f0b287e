"""Smoke test of bench/vs_peers.py: `--quick` on 40 generated images.

Every contender runs once per mode (train, eval, float32; one epoch, no
warm-up). Speed is not checked; what is checked would be wrong if a
contender's pipeline were broken: it delivered every image of the epoch
exactly once (the dataset indices it reports, --ids), in batches of the
expected shape and element type. Peers whose virtual environment is not
made (scripts/venv.sh NAME; scripts/test.sh makes all but the bench-only
ones before the tests) are skipped with the reason: the test never runs pip
(--existing-venvs). The Debian DataLoader always runs; conveyord and the
ceiling run when built.
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
BENCH = os.path.join(SOURCE_DIR, "bench", "vs_peers.py")
GEN = os.path.join(SOURCE_DIR, "bench", "gen_imagenet_like.py")
IMAGES = 40
BATCH = 16  # 40 = 16 + 16 + 8: the short last batch is checked too
SIZE = 224
MODES = ("train", "eval", "float32")
CONTENDERS = ("dataloader", "dataloader-simd", "tfdata", "dali", "spdl",
              "conveyord-unix", "conveyord-tcp", "conveyord-relaid", "ceiling")
BINARIES = {"conveyord-unix": os.path.join(BUILD_DIR, "server", "conveyord"),
            "conveyord-tcp": os.path.join(BUILD_DIR, "server", "conveyord"),
            "conveyord-relaid": os.path.join(BUILD_DIR, "server", "conveyord"),
            "ceiling": os.path.join(BUILD_DIR, "bench", "ceiling_bench")}


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("peers_smoke")
    data = tmp / "data"
    subprocess.run([PYTHON, GEN, "--out", str(data), "--images", str(IMAGES), "--classes", "4",
                    "--seed", "7", "--workers", "2"], check=True, timeout=180,
                   stdout=subprocess.DEVNULL)
    json_out, chart_out = tmp / "out.json", tmp / "out.png"
    res = subprocess.run([PYTHON, BENCH, "--quick", "--existing-venvs", "--data", str(data),
                          "--build", BUILD_DIR, "--batch-size", str(BATCH),
                          "--json-out", str(json_out), "--chart-out", str(chart_out)],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, "vs_peers.py --quick failed (%d)\nstdout:\n%s\nstderr:\n%s" % (
        res.returncode, res.stdout[-4000:], res.stderr[-6000:])
    with open(json_out) as f:
        return {"result": json.load(f), "stdout": res.stdout, "chart": chart_out}


@pytest.mark.parametrize("name", CONTENDERS)
def test_contender_delivers_every_image_once(quick_run, name):
    r = quick_run["result"]
    assert not r["failed"], r["failed"]
    if name in r["skipped"]:
        why = r["skipped"][name]
        # Only what this test may lack is skippable: a peer's venv, a binary not built.
        assert name not in ("dataloader",), why
        if name in BINARIES:
            assert not os.access(BINARIES[name], os.X_OK), why
        pytest.skip(why.strip().splitlines()[0][:300])
    for mode in MODES:
        if name == "ceiling" and mode == "float32":
            assert name not in r["runs"][mode]  # it has no float output
            continue
        runs = r["runs"][mode][name]
        assert len(runs) == 1, (mode, name)
        run = runs[0]
        if name == "ceiling":
            assert run["raw"]["images"] == IMAGES and run["raw"]["failed"] == 0, run["raw"]
            continue
        [epoch] = run["epochs"]
        assert epoch["images"] == IMAGES, (mode, name, epoch)
        assert epoch["batches"] == (IMAGES + BATCH - 1) // BATCH, (mode, name, epoch)
        [ids] = run["ids"]
        assert sorted(ids["ids"]) == list(range(IMAGES)), (mode, name, ids)
        assert run["first_batch_shape"] == [BATCH, 3, SIZE, SIZE], (mode, name, run)
        want = "float32" if mode == "float32" else "uint8"
        assert want in run["first_batch_dtype"], (mode, name, run["first_batch_dtype"])
        s = r["summary"][mode][name]
        assert s["images_per_s"] > 0 and s["cpu_s_per_image"] > 0 and s["peak_pss_bytes"] > 0, s


def test_ratios_and_chart(quick_run):
    r = quick_run["result"]
    for mode in MODES:
        ratio = r["ratios"].get(mode)
        if "conveyord-unix" not in r["summary"][mode]:
            continue
        assert ratio, mode  # the Debian DataLoader is always a peer
        best = r["summary"][mode][ratio["best_peer"]]
        assert all(best["images_per_s"] >= s["images_per_s"]
                   for n, s in r["summary"][mode].items()
                   if n.startswith(("dataloader", "tfdata", "dali", "spdl")))
        u = r["summary"][mode]["conveyord-unix"]
        assert abs(ratio["images_per_s"] - u["images_per_s"] / best["images_per_s"]) < 1e-9
        assert "mode %s" % mode in quick_run["stdout"]
    data = quick_run["chart"].read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
