"""Shared by the benchmark scripts: a conveyord config for the benchmark's
train pipeline, and stopping a daemon started with subprocess.

Run with Debian's /usr/bin/python3 like the scripts that import it.
"""
import json
import subprocess


def write_config(path, listen, threads, dataset, size=224, max_batch_size=1024,
                 log_level="warn", name="bench"):
    """A config serving one train pipeline (RandomResizedCrop(size) + flip,
    uint8 NCHW) over `dataset`: {"root": DIR} or {"list": FILE, "root": DIR}.
    `listen`: the `listen:` mapping, e.g. {"unix": PATH} or {"tcp": "127.0.0.1:0"}."""
    with open(path, "w") as f:
        f.write("listen:\n")
        for k, v in listen.items():
            f.write("  %s: %s\n" % (k, json.dumps(v)))
        f.write("threads: %d\nlog_level: %s\n" % (threads, log_level))
        f.write("pipelines:\n  %s:\n    dataset:\n" % name)
        for k, v in dataset.items():
            f.write("      %s: %s\n" % (k, json.dumps(v)))
        f.write("    augment: train\n    size: %d\n    layout: nchw\n    dtype: uint8\n" % size)
        f.write("    max_batch_size: %d\n" % max_batch_size)


def stop(proc, timeout=15):
    """SIGTERM, then SIGKILL if the daemon has not exited within `timeout` s."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
