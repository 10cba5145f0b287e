"""client/python/examples/train_resnet18.py runs for a few steps against a
real daemon: ResNet-18 on CPU fed by conveyor, then the same through a torch
DataLoader over the dataset's folder, each printing per-step data wait and
compute time and a summary line."""

import re
import subprocess

from conveyor_integration import CLIENT_DIR, PYTHON, client_env, scaled

EXAMPLE = CLIENT_DIR / "examples" / "train_resnet18.py"
SUMMARY = re.compile(r"^(conveyor|dataloader): steps (\d+), data wait mean ([\d.]+) ms "
                     r"\(([\d.]+)% of step time\), compute mean ([\d.]+) ms, ([\d.]+) images/s$",
                     re.M)


def test_resnet18_example_trains_with_conveyor_and_with_a_dataloader(daemon, dataset):
    root, _ = dataset
    steps = 8
    r = subprocess.run([PYTHON, str(EXAMPLE), "--server", daemon.unix, "--pipeline", "train",
                        "--batch-size", "8", "--steps", str(steps), "--compare-dataloader",
                        str(root), "--workers", "1"],
                       env=client_env(), capture_output=True, text=True, timeout=scaled(600))
    print(r.stdout)
    assert r.returncode == 0, r.stderr[-4000:]
    assert "pipeline train: 48 samples, 3 classes, 64x64, 6 batches/epoch of 8" in r.stdout
    for name in ("conveyor", "dataloader"):
        for step in range(steps):
            assert re.search(r"^%s step %d: data [\d.]+ ms, compute [\d.]+ ms, loss [\d.]+$"
                             % (name, step), r.stdout, re.M), (name, step)
    summaries = {m.group(1): m for m in SUMMARY.finditer(r.stdout)}
    assert set(summaries) == {"conveyor", "dataloader"}, r.stdout
    for m in summaries.values():
        assert int(m.group(2)) == steps and float(m.group(5)) > 0
