#!/usr/bin/python3
"""The daemon's CPU use with and without `engine.cpu_budget`.

Starts conveyord on a CPU-bound pipeline (large JPEGs to 64×64), opens
--streams endless streams from as many client threads that read as fast as
they can, and measures over --seconds the daemon's CPU time (utime + stime
of /proc/PID/stat, every thread of the process) divided by the wall time:
the cores it used. Once without a budget (`threads: 0`: one worker per
CPU), once with `engine.cpu_budget: BUDGET`; prints both and their ratio,
and the images/s each run delivered. The clients' own CPU is not counted.

    /usr/bin/python3 bench/cpu_budget_bench.py --budget 1 --streams 2 --seconds 10

Run with Debian's /usr/bin/python3 (grpcio, numpy, PIL).
"""
import argparse
import os
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import daemon_proc  # noqa: E402
import proc_sampler as ps  # noqa: E402

sys.path.insert(0, os.path.join(daemon_proc.SOURCE_DIR, "tests", "integration"))


def make_dataset(root, images):
    """`images` JPEGs of 480–640 px a side (decode is what costs)."""
    import numpy as np
    from PIL import Image
    rng = np.random.default_rng(0)
    os.makedirs(os.path.join(root, "a"), exist_ok=True)
    for i in range(images):
        w, h = (int(v) for v in rng.integers(480, 641, 2))
        yy, xx = np.mgrid[0:h, 0:w]
        img = np.stack([(xx * (c + 1) + yy * (3 - c)) % 256 for c in range(3)], -1)
        img = (img + rng.normal(0, 12, img.shape)).clip(0, 255).astype(np.uint8)
        Image.fromarray(img).save(os.path.join(root, "a", "%04d.jpg" % i), quality=90)


class Reader(threading.Thread):
    def __init__(self, address):
        super().__init__(daemon=True)
        import conveyor
        self.loader = conveyor.Loader(address, pipeline="bench", batch_size=16, credits=8)
        self.images = 0
        self.halt = threading.Event()

    def run(self):
        try:
            with self.loader.stream(num_epochs=0) as stream:
                for batch in stream:
                    self.images += batch.num_samples
                    if self.halt.is_set():
                        return
        except Exception as e:  # noqa: BLE001
            if not self.halt.is_set():
                print("reader failed: %s" % e, file=sys.stderr)


def run(conveyord, dataset, budget, streams, seconds, warmup):
    """(cores used by the daemon, images/s) of one run."""
    with tempfile.TemporaryDirectory(prefix="cpubudget-", dir="/tmp") as work:
        d = daemon_proc.daemon(conveyord, work, 0, {"root": dataset}, size=64)
        if budget:
            with open(d.config_path, "a") as f:
                f.write("engine:\n  cpu_budget: %s\n" % budget)
        d.start(60)
        readers = []
        try:
            readers = [Reader(d.unix) for _ in range(streams)]
            for r in readers:
                r.start()
            time.sleep(warmup)  # a benchmark's warm-up, not a test's wait
            cpu0, img0, t0 = ps.proc_cpu_seconds(d.pid), sum(r.images for r in readers), ps.now()
            time.sleep(seconds)
            cpu1, img1, t1 = ps.proc_cpu_seconds(d.pid), sum(r.images for r in readers), ps.now()
        finally:
            for r in readers:
                r.halt.set()
            for r in readers:
                r.join(30)
                r.loader.close()
            d.stop()
    return (cpu1 - cpu0) / (t1 - t0), (img1 - img0) / (t1 - t0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--conveyord", default=os.path.join(daemon_proc.SOURCE_DIR, "build", "server",
                                                        "conveyord"))
    ap.add_argument("--budget", default="1", help="engine.cpu_budget of the second run")
    ap.add_argument("--streams", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--warmup", type=float, default=2)
    ap.add_argument("--images", type=int, default=64, help="JPEGs in the generated dataset")
    args = ap.parse_args()
    print("machine: %d CPUs usable (affinity)" % len(os.sched_getaffinity(0)))
    with tempfile.TemporaryDirectory(prefix="cpubudget-data-", dir="/tmp") as data:
        make_dataset(data, args.images)
        free_cores, free_rate = run(args.conveyord, data, None, args.streams, args.seconds,
                                    args.warmup)
        print("no budget:          daemon CPU %.3f cores, %.0f images/s" % (free_cores, free_rate))
        cores, rate = run(args.conveyord, data, args.budget, args.streams, args.seconds,
                          args.warmup)
        print("cpu_budget: %-7s daemon CPU %.3f cores, %.0f images/s" % (args.budget, cores, rate))
        print("ratio (budget / none): CPU %.3f, images/s %.3f" % (cores / free_cores,
                                                                rate / free_rate))


if __name__ == "__main__":
    main()
