"""Smoke test of bench/audio_vs_dataloader.py on a few tiny files, so that
the benchmark cannot rot. Speed is not checked (meaningless at this size on
a shared machine); what is checked: both contenders ran every timed epoch
(the script asserts each batch's shape and, for conveyord, no failures),
every figure is positive and finite, and the ratio is the quotient of the
medians. Skipped when conveyord is not built (CI builds it).
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
BENCH = os.path.join(SOURCE_DIR, "bench", "audio_vs_dataloader.py")


def test_audio_bench_runs_both_contenders(tmp_path):
    if not os.path.exists(os.path.join(BUILD_DIR, "server", "conveyord")):
        if "CONVEYOR_BUILD_DIR" in os.environ:
            pytest.fail("conveyord not built in %s" % BUILD_DIR)
        pytest.skip("conveyord not built")
    out = tmp_path / "result.json"
    res = subprocess.run([sys.executable, BENCH, "--data", str(tmp_path / "data"), "--files", "4",
                          "--seconds", "1.5", "--formats", "wav,mp3", "--rounds", "1",
                          "--epochs", "1", "--batch-size", "2", "--build", BUILD_DIR,
                          "--json-out", str(out)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, "stdout:\n%s\nstderr:\n%s" % (res.stdout, res.stderr)
    results = json.loads(out.read_text())["results"]
    assert set(results) == {"wav", "mp3"}
    for fmt, r in results.items():
        for name in ("conveyord", "dataloader"):
            rates = r["clips_per_s"][name]
            assert len(rates) == 1 and all(math.isfinite(x) and x > 0 for x in rates), (fmt, r)
        assert r["ratio"] == pytest.approx(r["median"]["conveyord"] / r["median"]["dataloader"])
    assert "| wav |" in res.stdout and "| mp3 |" in res.stdout
