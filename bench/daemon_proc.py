"""Shared by the benchmark scripts: a conveyord config for the benchmark's
train pipeline, a conveyord on it through conveyor.daemon (the project's
one launcher: start, wait for the health check to say SERVING, stop), and a
thread reading one endless stream as fast as it can (StreamReader).

Run with Debian's /usr/bin/python3 like the scripts that import it.
"""
import json
import os
import sys
import threading

SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLIENT_DIR = os.path.join(SOURCE_DIR, "client", "python")
if CLIENT_DIR not in sys.path:
    sys.path.insert(0, CLIENT_DIR)

from conveyor.daemon import DaemonProcess  # noqa: E402


def write_config(path, threads, dataset, size=224, max_batch_size=1024, log_level="warn",
                 name="bench", augment="train", dtype="uint8", relay_cache=None):
    """A config serving one pipeline over `dataset` ({"root": DIR} or
    {"list": FILE, "root": DIR}): by default the train transform
    (RandomResizedCrop(size) + flip, uint8 NCHW); `augment="eval"` resizes
    and centre-crops, `dtype="float32"` normalises with the default mean/std.
    `relay_cache` (a folder): `relay_jpeg: true` with the daemon's cache
    there (4 GiB). The listeners come from the command line (see daemon())."""
    with open(path, "w") as f:
        f.write("threads: %d\nlog_level: %s\n" % (threads, log_level))
        if relay_cache:
            f.write("cache:\n  dir: %s\n  max_bytes: 4GiB\n" % json.dumps(relay_cache))
        f.write("pipelines:\n  %s:\n    dataset:\n" % name)
        for k, v in dataset.items():
            f.write("      %s: %s\n" % (k, json.dumps(v)))
        f.write("    augment: %s\n    size: %d\n    layout: nchw\n    dtype: %s\n"
                % (augment, size, dtype))
        f.write("    max_batch_size: %d\n" % max_batch_size)
        if relay_cache:
            f.write("    relay_jpeg: true\n")


def daemon(conveyord, workdir, threads, dataset, via="unix", **config):
    """A DaemonProcess (not started) serving write_config(...)'s pipeline in
    `workdir`: on a unix socket there (via="unix") or on TCP 127.0.0.1, a
    free port, and no unix socket (via="tcp")."""
    cfg = os.path.join(workdir, "conveyord.yaml")
    write_config(cfg, threads, dataset, **config)
    if via == "unix":
        return DaemonProcess(conveyord, cfg, workdir=workdir, threads=threads)
    return DaemonProcess(conveyord, cfg, workdir=workdir, socket="", tcp="127.0.0.1:0",
                         threads=threads)


class StreamReader(threading.Thread):
    """Reads one endless stream of a conveyor.Loader as fast as it can;
    count() is the samples of the batches received so far. stop() ends it
    and closes the loader; `error` is what ended it otherwise, `stats` the
    stream's stats() (pooled streams) when it was stopped."""

    def __init__(self, loader):
        super().__init__(daemon=True)
        self.loader = loader
        self.images = 0
        self.lock = threading.Lock()
        self.halt = threading.Event()
        self.error = None
        self.stats = None

    def run(self):
        try:
            with self.loader.stream(num_epochs=0) as stream:
                for batch in stream:
                    with self.lock:
                        self.images += batch.num_samples
                    if self.halt.is_set():
                        if hasattr(stream, "stats"):
                            self.stats = stream.stats()
                        return
        except Exception as e:  # noqa: BLE001
            self.error = repr(e)

    def count(self):
        with self.lock:
            return self.images

    def stop(self):
        self.halt.set()
        self.join(60)
        self.loader.close()
