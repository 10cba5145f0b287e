"""Smoke test of bench/vs_dataloader.py: `--quick` on ~40 generated images.

Runs every contender once (one epoch, no warm-up) so that the benchmark
cannot rot. Speed is not checked (meaningless at this size, and this machine
is shared); what is checked would be wrong if the benchmark were broken:
every contender delivered exactly the dataset's images in the expected
batches and shape; every figure is positive and finite; the figures agree
with each other (images/s = images / seconds, the ratios are the quotients
of the reported figures, each target's PASS/FAIL follows from its value);
the conveyord contenders' image bytes (sha256 per epoch, --quick turns
--checksum on) are equal across transports and equal to the in-process
engine's (tests/engine_dump) for the same seed. The conveyord contenders are
skipped only when the daemon is not built (CI builds it); likewise the
ceiling binary. Needs ~30 s on 2 cores.
"""

import hashlib
import json
import math
import os
import statistics
import subprocess
import sys

import numpy as np
import pytest

SOURCE_DIR = os.environ.get("CONVEYOR_SOURCE_DIR") or os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD_DIR = os.environ.get("CONVEYOR_BUILD_DIR") or os.path.join(SOURCE_DIR, "build")
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
BENCH = os.path.join(SOURCE_DIR, "bench", "vs_dataloader.py")
GEN = os.path.join(SOURCE_DIR, "bench", "gen_imagenet_like.py")
CONVEYORD = os.path.join(BUILD_DIR, "server", "conveyord")
CEILING = os.path.join(BUILD_DIR, "bench", "ceiling_bench")
ENGINE_DUMP = os.path.join(BUILD_DIR, "tests", "engine_dump")
IMAGES = 40
BATCH = 16
SIZE = 224
SEED = 0  # the benchmark's default --seed
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
    return {"result": result, "stdout": res.stdout, "stderr": res.stderr, "chart": chart_out,
            "data": data, "tmp": tmp}


def positive(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0


def close(a, b, rel=1e-9):
    return math.isclose(a, b, rel_tol=rel, abs_tol=0.0)


def check_python_contender(c, name, workers_or_transport):
    runs = c["runs"]
    assert len(runs) == 1, name
    run = runs[0]
    assert len(run["epochs"]) == 1, name
    ep = run["epochs"][0]
    assert ep["images"] == IMAGES, (name, ep)
    assert ep["batches"] == (IMAGES + BATCH - 1) // BATCH, (name, ep)
    for key in ("seconds", "images_per_s", "cpu_s", "cpu_s_per_image", "pss_bytes_at_end"):
        assert positive(ep[key]), (name, key, ep)
    assert close(ep["images_per_s"], ep["images"] / ep["seconds"]), (name, ep)
    assert close(ep["cpu_s_per_image"], ep["cpu_s"] / ep["images"]), (name, ep)
    assert run["first_batch_shape"] == [BATCH, 3, SIZE, SIZE], (name, run)
    assert "uint8" in run["first_batch_dtype"], (name, run)
    assert positive(run["ttfb_s"]), (name, run)
    assert positive(run["peak_pss_bytes"]) and run["peak_pss_bytes"] > 1 << 20, (name, run)
    # The peak is the largest reading, so at least the epoch end's.
    assert run["peak_pss_bytes"] >= ep["pss_bytes_at_end"], (name, run)
    s = c["summary"]
    for key in ("images_per_s", "cpu_s_per_image", "peak_pss_bytes", "ttfb_s"):
        assert positive(s[key]), (name, key, s)
    # One run of one epoch: the summary is that epoch's figures.
    assert close(s["images_per_s"], ep["images_per_s"]), (name, s)
    assert s["images_per_s_min"] == s["images_per_s_max"] == s["images_per_s"], (name, s)
    assert close(s["cpu_s_per_image"], ep["cpu_s_per_image"]), (name, s)
    assert close(s["peak_pss_bytes"], run["peak_pss_bytes"]), (name, s)
    assert close(s["ttfb_s"], run["ttfb_s"]), (name, s)


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


def test_ratios_are_the_quotients_of_the_figures(quick_run):
    r = quick_run["result"]
    base = r["contenders"]["dataloader-w2"]["summary"]
    keys = {"images_per_s": "images_per_s", "cpu_s_per_image": "cpu_s_per_image",
            "peak_pss": "peak_pss_bytes", "ttfb": "ttfb_s"}
    assert r["ratios"], "no ratios"
    for name, ratios in r["ratios"].items():
        s = r["contenders"][name]["summary"]
        for rk, sk in keys.items():
            if s[sk] is None:  # the ceiling has no TTFB
                assert ratios[rk] is None, (name, rk)
                continue
            assert close(ratios[rk], s[sk] / base[sk]), (name, rk, ratios[rk], s[sk], base[sk])


def test_target_results_follow_from_their_values(quick_run):
    r = quick_run["result"]
    assert r["targets"], "no targets evaluated"
    for t in r["targets"]:
        assert positive(t["value"]), t
        ok = t["value"] >= t["limit"] if t["op"] == ">=" else t["value"] <= t["limit"]
        assert t["result"] == ("PASS" if ok else "FAIL"), t
        if t.get("per_round"):  # the vs-ceiling targets: median of per-round ratios
            assert close(t["value"], statistics.median(t["per_round"])), t


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
        assert 0 < run["ttfb_from_daemon_launch_s"] < run["ttfb_s"], run
        for key in ("images_per_s", "cpu_s_per_image", "peak_pss", "ttfb"):
            assert positive(r["ratios"][name][key]), (name, key)
    names = [t["target"] for t in r["targets"]]
    assert len([n for n in names if n.startswith("conveyord-unix") and "dataloader-w2" in n]) == 4
    assert "targets:" in quick_run["stdout"]
    for t in r["targets"]:
        assert "%s" % t["result"] in quick_run["stdout"]


def _engine_sha256(quick_run):
    """sha256 of the in-process engine's epoch 0 images for the benchmark's
    pipeline (train augment, 224 px, uint8 NCHW) and seed."""
    out = quick_run["tmp"] / "engine.npz"
    subprocess.run([ENGINE_DUMP, "--root", str(quick_run["data"]), "--batch-size", str(BATCH),
                    "--seed", str(SEED), "--epoch", "0", "--augment", "train",
                    "--size", str(SIZE), "--out", str(out)], check=True, timeout=120)
    with np.load(out) as z:
        images = z["images"]
        assert images.shape == (IMAGES, 3, SIZE, SIZE) and images.dtype == np.uint8
        return hashlib.sha256(np.ascontiguousarray(images).tobytes()).hexdigest()


@pytest.mark.skipif(not built(CONVEYORD), reason="conveyord not built at %s" % CONVEYORD)
def test_conveyord_bytes_equal_the_in_process_engine(quick_run):
    r = quick_run["result"]
    assert r["meta"]["checksum"] is True and r["meta"]["seed"] == SEED
    sums = {}
    for name in ("conveyord-unix", "conveyord-tcp"):
        checksums = r["contenders"][name]["runs"][0]["checksums"]
        assert [c["epoch"] for c in checksums] == [0], (name, checksums)
        sums[name] = checksums[0]["sha256"]
    assert sums["conveyord-unix"] == sums["conveyord-tcp"], sums
    if not built(ENGINE_DUMP):
        pytest.skip("engine_dump not built at %s" % ENGINE_DUMP)
    assert sums["conveyord-unix"] == _engine_sha256(quick_run)


@pytest.mark.skipif(not built(CEILING), reason="ceiling_bench not built at %s" % CEILING)
def test_ceiling_contender(quick_run):
    r = quick_run["result"]
    c = r["contenders"]["ceiling"]
    assert len(c["runs"]) == 1
    raw = c["runs"][0]["raw"]
    assert raw["images"] == IMAGES * raw["epochs"] and raw["epochs"] == 1, raw
    assert raw["failed"] == 0, raw
    for key in ("images_per_s", "cpu_s_per_image", "peak_pss_bytes"):
        assert positive(c["summary"][key]), (key, c["summary"])
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


# --- bench/soak.py -----------------------------------------------------------
SOAK = os.path.join(SOURCE_DIR, "bench", "soak.py")


@pytest.mark.skipif(not built(CONVEYORD), reason="conveyord not built at %s" % CONVEYORD)
def test_soak_smoke(tmp_path):
    """bench/soak.py for two rounds of 10 s: three clients (one per
    transport), one killed every 4 s. Checked: the run passes (RSS and fds
    flat after warm-up by the script's own thresholds, no unexpected client
    error, the daemon idle after each round with as many fds as before the
    clients came, a clean exit) and its figures hold together."""
    json_out = tmp_path / "soak.json"
    res = subprocess.run([PYTHON, SOAK, "--build", BUILD_DIR, "--rounds", "2", "--seconds", "10",
                          "--clients", "3", "--kill-every", "4", "--images", "24", "--interval", "0.5",
                          "--json-out", str(json_out)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, "soak.py failed (%d)\nstdout:\n%s\nstderr:\n%s" % (
        res.returncode, res.stdout[-4000:], res.stderr[-4000:])
    with open(json_out) as f:
        r = json.load(f)
    t = r["traffic"]
    assert t["errors"] == []
    assert t["killed"] >= 2, t
    assert t["early_closes"] >= 1, t
    assert t["streams"] > t["early_closes"], t
    for transport in ("shared_memory", "inline", "data_socket"):
        assert t["by_transport"][transport]["batches"] > 0, t["by_transport"]
    assert r["idle_verdict"] == "flat"
    assert len(r["idle_rounds"]) == 2
    for idle in r["idle_rounds"]:
        # A stream, a killed client or a closed connection that left an fd
        # behind would show here: the daemon is idle again, so it holds no
        # more than it held idle. Fewer is no leak: gRPC's own pollers and
        # threads come and go (once 21 fds before and 20 after, with two
        # threads more), which soak.py's verdict allows too.
        assert idle["idle"] is True
        assert idle["fds"] <= r["idle_before"]["fds"], (r["idle_before"], idle)
    assert r["daemon_exit_status"] == 0
    assert max(s["streams"] for s in r["samples"]) >= 2
    for key in ("rss", "rss_less_slots", "fds"):
        j = r[key]
        assert j["verdict"] == "flat", (key, j)
        assert j["max"] >= max(j["warm"], j["end"]), (key, j)
        assert math.isclose(j["growth"], j["end"] - j["warm"]), (key, j)
        assert j["samples"] >= 8, (key, j)
    for line in ("figure", "warm-up", "slope/min", "threshold", "idle after round 2",
                 "idle verdict: flat", "soak: PASS"):
        assert line in res.stdout, res.stdout


# --- bench/autotune.py -------------------------------------------------------
AUTOTUNE = os.path.join(SOURCE_DIR, "bench", "autotune.py")


@pytest.mark.skipif(not built(CONVEYORD), reason="conveyord not built at %s" % CONVEYORD)
def test_autotune_smoke(tmp_path):
    """bench/autotune.py --smoke (~1 min): a local folder and the same
    images over HTTP (50 ms a request), a short sweep of hand-tuned limits
    and one autotuned run each. Speed is not checked (2 shared cores, a
    tiny data set); checked: every figure is positive and is the quotient
    it says, the sweep's streams ran at the limits configured (the
    defaults too) and untuned, the autotuned stream was tuned from
    fetch 1 / decode 1 / queue 1 and its limits never fell below them or
    rose past the ceilings, the best and the ratios follow from the
    figures, and PASS/FAIL from the ratio."""
    json_out = tmp_path / "autotune.json"
    threads = 2
    res = subprocess.run([PYTHON, AUTOTUNE, "--conveyord", CONVEYORD, "--smoke",
                          "--threads", str(threads), "--work", str(tmp_path / "work"),
                          "--out", str(json_out)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, "autotune.py --smoke failed (%d)\nstdout:\n%s\nstderr:\n%s" % (
        res.returncode, res.stdout[-4000:], res.stderr[-4000:])
    with open(json_out) as f:
        r = json.load(f)
    meta = r["meta"]
    assert meta["smoke"] is True and meta["threads"] == threads and meta["target"] == 0.95
    assert [d["dataset"] for d in r["datasets"]] == ["local folder", "http 50ms"]
    for d in r["datasets"]:
        name = d["dataset"]
        sweep = d["sweep"]
        assert sweep[0]["setting"] == "defaults" and len(sweep) >= 3, (name, sweep)
        for m in sweep:
            assert positive(m["images_per_s"]) and positive(m["seconds"]), (name, m)
            assert close(m["images_per_s"], m["images"] / m["seconds"]), (name, m)
            lim = m["limits"]
            assert lim["autotune"] is False and lim["autotune_changes"] == 0, (name, m)
            assert m["engine"]["autotune"] is False, (name, m)  # fixed: autotune is the default
            if len(m["engine"]) > 1:
                for key in ("fetch_concurrency", "decode_concurrency", "fetch_queue_capacity"):
                    assert lim[key] == m["engine"][key], (name, key, m)
            else:  # the daemon's defaults: fetch 4, decode = threads, queue 2 x threads (>= 4)
                assert (lim["fetch_concurrency"], lim["decode_concurrency"],
                        lim["fetch_queue_capacity"]) == (4, threads, max(4, 2 * threads)), lim
        best = max(sweep, key=lambda m: m["images_per_s"])
        assert d["best_setting"] == best["setting"] and d["best_engine"] == best["engine"]
        assert close(d["best_sweep_images_per_s"], best["images_per_s"])
        assert len(d["rounds"]) == meta["rounds"] == 1
        again, autos, reached = [], [], []
        for rnd in d["rounds"]:
            b, b2 = rnd["best_again"], rnd["best_again_2"]  # before and after the autotune run
            for x in (b, b2):
                assert positive(x["images_per_s"]) and x["limits"]["autotune"] is False, x
                assert close(x["images_per_s"], x["images"] / x["seconds"]), x
            ref = (b["images_per_s"] + b2["images_per_s"]) / 2
            assert close(rnd["reference_images_per_s"], ref), rnd["reference_images_per_s"]
            again.append(ref)
            at = rnd["autotune"]
            w = at["windows"]
            assert len(w) == meta["autotune_seconds"], (name, len(w))
            assert [x["t_end_s"] for x in w] == sorted(x["t_end_s"] for x in w)
            for x in w:
                assert x["images_per_s"] >= 0 and x["images"] >= 0, x
                lim = x["limits"]
                assert lim["autotune"] is True, (name, x)
                assert 1 <= lim["fetch_concurrency"] <= 64, (name, lim)
                assert 1 <= lim["decode_concurrency"] <= threads, (name, lim)
                assert 1 <= lim["fetch_queue_capacity"] <= 64 + 2 * threads, (name, lim)
            steady = [x["images_per_s"] for x in w[-meta["steady_seconds"]:]]
            assert close(at["steady_images_per_s"], statistics.mean(steady)), (name, at)
            assert positive(at["steady_images_per_s"]), (name, at)
            assert at["final_limits"] == w[-1]["limits"]
            assert close(at["reference_images_per_s"], ref)
            assert close(at["target_images_per_s"], 0.95 * ref)
            assert close(at["ratio_vs_reference"], at["steady_images_per_s"] / ref)
            for key in ("reached_target_s", "first_reached_target_s", "reached_sweep_target_s",
                        "limits_settled_s"):
                if at[key] is not None:
                    assert 0 < at[key] <= w[-1]["t_end_s"], (key, at[key])
            if at["reached_target_s"] is not None:  # reached and stayed: reached first no later
                assert at["first_reached_target_s"] <= at["reached_target_s"], at
            settled = [x for x in w if x["t_end_s"] >= at["limits_settled_s"]]
            assert settled and all(x["limits"]["fetch_concurrency"] ==
                                   at["final_limits"]["fetch_concurrency"] for x in settled)
            reached.append(at["reached_target_s"])
            autos.append(at["steady_images_per_s"])
        assert d["reached_target_s"] == reached
        assert d["first_reached_target_s"] == [x["autotune"]["first_reached_target_s"]
                                               for x in d["rounds"]]
        assert close(d["best_again_median_images_per_s"], statistics.median(again))
        assert close(d["autotune_median_images_per_s"], statistics.median(autos))
        assert close(d["ratio_vs_best_again"],
                     d["autotune_median_images_per_s"] / d["best_again_median_images_per_s"])
        assert close(d["ratio_vs_best_sweep"],
                     d["autotune_median_images_per_s"] / d["best_sweep_images_per_s"])
        assert d["pass"] == (d["ratio_vs_best_again"] >= 0.95), d["ratio_vs_best_again"]
        assert "%s: autotune %.2fx the best hand-tuned" % (name, d["ratio_vs_best_again"]) \
            in res.stdout, res.stdout
    assert "| dataset | setting | fetch | decode | queue | images/s |" in res.stdout


def test_pool_smoke(tmp_path):
    """bench/pool.py --smoke (~15 s): the node's daemon on CPU 0, a remote
    one on CPU 1 (in a network namespace when root can make one), read
    alone and as servers=[local, remote]. Speed is not checked; checked:
    each figure is positive and the quotient it says, the pool read from
    both daemons, and the ratios and PASS/FAIL follow from the medians."""
    json_out = tmp_path / "pool.json"
    res = subprocess.run([PYTHON, os.path.join(SOURCE_DIR, "bench", "pool.py"), "--conveyord",
                          CONVEYORD, "--smoke", "--work", str(tmp_path / "work"),
                          "--out", str(json_out)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, "pool.py --smoke failed (%d)\nstdout:\n%s\nstderr:\n%s" % (
        res.returncode, res.stdout[-4000:], res.stderr[-4000:])
    with open(json_out) as f:
        r = json.load(f)
    assert r["meta"]["smoke"] is True and len(r["rounds"]) == r["meta"]["rounds"] == 1
    assert r["meta"]["remote_in_namespace"] == (r["meta"]["why_not_namespace"] is None)
    if os.geteuid() == 0:
        assert r["meta"]["remote_in_namespace"], r["meta"]["why_not_namespace"]
    for kind in ("local", "remote", "pool"):
        m = r["rounds"][0][kind]
        assert m["images"] > 0 and m["seconds"] > 0
        assert math.isclose(m["images_per_s"], m["images"] / m["seconds"], rel_tol=1e-9)
        assert m["trainer_cpu_ms_per_image"] >= 0 and m["local_daemon_cpu_ms_per_image"] >= 0
        assert math.isclose(r["median_images_per_s"][kind], m["images_per_s"], rel_tol=1e-9)
    daemons = r["rounds"][0]["pool"]["pool"]["daemons"]
    assert len(daemons) == 2 and all(d["batches"] > 0 for d in daemons), daemons
    med = r["median_images_per_s"]
    assert math.isclose(r["pool_vs_sum"], med["pool"] / (med["local"] + med["remote"]))
    assert math.isclose(r["pool_vs_local"], med["pool"] / med["local"])
    for line, ratio, target in (("pool / (local + remote)", r["pool_vs_sum"], 0.9),
                                ("pool / local", r["pool_vs_local"], 1.8)):
        verdict = "PASS" if ratio >= target else "FAIL"
        assert "%s = %.2f (target >= %.1f) -> %s" % (line, ratio, target, verdict) in res.stdout


# --- bench/clip_vs_webdataset.py ---------------------------------------------
CLIP = os.path.join(SOURCE_DIR, "bench", "clip_vs_webdataset.py")


def test_clip_vs_webdataset_smoke(tmp_path):
    """bench/clip_vs_webdataset.py --smoke (~20 s): conveyord serving image +
    caption + JSON + key from tar shards, and WebDataset in a DataLoader over
    the same shards, each for 3 batches; both report a rate and the ratio is
    printed. Skipped when the webdataset environment is not made (the test
    never runs pip)."""
    conveyord = os.path.join(BUILD_DIR, "server", "conveyord")
    if not os.path.exists(conveyord):
        pytest.skip("conveyord is not built")
    venvs = os.environ.get("CONVEYOR_VENV_DIR") or os.path.join(SOURCE_DIR, ".venvs")
    if not os.path.exists(os.path.join(venvs, "webdataset", "bin", "python")):
        pytest.skip("the webdataset environment is not made (scripts/venv.sh webdataset)")
    data = tmp_path / "data"
    subprocess.run([PYTHON, GEN, "--out", str(data), "--images", "40", "--classes", "2"],
                   check=True, capture_output=True, timeout=300)
    res = subprocess.run([PYTHON, CLIP, "--data", str(data), "--shards", str(tmp_path / "shards"),
                          "--per-shard", "20", "--smoke", "--conveyord", conveyord],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, "clip_vs_webdataset.py --smoke failed (%d)\nstdout:\n%s\n" \
        "stderr:\n%s" % (res.returncode, res.stdout, res.stderr)
    assert "2 shards, 3 batches of 64" in res.stdout
    assert "conveyord (image+caption+json+key):" in res.stdout
    assert "WebDataset + DataLoader(2 workers):" in res.stdout
    assert "x the images/s at" in res.stdout


# --- bench/augment_ops.py ------------------------------------------------------
def test_augment_ops_smoke(tmp_path):
    """bench/augment_ops.py --smoke (~5 s): the train preset, the same as a
    list of ops, and the list with vertical_flip and grayscale each serve
    two batches on one daemon."""
    conveyord = os.path.join(BUILD_DIR, "server", "conveyord")
    if not os.path.exists(conveyord):
        pytest.skip("conveyord is not built")
    data = tmp_path / "data"
    subprocess.run([PYTHON, GEN, "--out", str(data), "--images", "40", "--classes", "2"],
                   check=True, capture_output=True, timeout=300)
    res = subprocess.run([PYTHON, os.path.join(SOURCE_DIR, "bench", "augment_ops.py"), "--data",
                          str(data), "--smoke", "--conveyord", conveyord],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, "augment_ops.py --smoke failed (%d)\nstdout:\n%s\nstderr:\n%s" % (
        res.returncode, res.stdout, res.stderr)
    for name in ("preset", "ops ", "ops-vflip-gray"):
        assert name in res.stdout
    assert "x the preset" in res.stdout


# --- bench/augment_vs_torchvision.py -------------------------------------------
def test_augment_vs_torchvision_smoke(tmp_path):
    """bench/augment_vs_torchvision.py --smoke (~5 s): the train, simclr and
    trivial recipes served by conveyord and by torchvision's DataLoader (2
    workers), two batches each; both report a rate and the ratios are
    printed."""
    conveyord = os.path.join(BUILD_DIR, "server", "conveyord")
    if not os.path.exists(conveyord):
        pytest.skip("conveyord is not built")
    data = tmp_path / "data"
    subprocess.run([PYTHON, GEN, "--out", str(data), "--images", "40", "--classes", "2"],
                   check=True, capture_output=True, timeout=300)
    res = subprocess.run([PYTHON, os.path.join(SOURCE_DIR, "bench", "augment_vs_torchvision.py"),
                          "--data", str(data), "--smoke", "--conveyord", conveyord],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, "augment_vs_torchvision.py --smoke failed (%d)\nstdout:\n%s\n" \
        "stderr:\n%s" % (res.returncode, res.stdout, res.stderr)
    for name in ("train", "simclr", "trivial"):
        assert "%s: conveyord " % name in res.stdout
        assert "| %s | " % name in res.stdout
    assert res.stdout.count("x the images/s at") == 3
    assert "round 0 conveyord" in res.stdout and "round 0 torchvision" in res.stdout
