#!/usr/bin/python3
"""Delivered images/s through the Python client vs the in-process ceiling.

    /usr/bin/python3 bench/client_vs_ceiling.py --data DIR [--build DIR] [--threads N]
        [--rounds R] [--batch-size B] [--epochs E] [--credits C] [--size S] [--out FILE.json]

A: $BUILD/bench/ceiling_bench --root DIR --threads N --batch-size B --epochs E --json
   (the engine in one process, the consumer releasing each batch at once).
B: conveyord --threads N serving the same data with the same transform
   (train augment, S x S, uint8, NCHW, DCT scaling on), read by the Python
   client (conveyor.Loader) over the unix socket, i.e. through shared memory.

The rounds alternate A B A B ... (at least 3 each) in one invocation so that
both sides see the same machine state; each side reports the median over E
timed epochs after one warm-up epoch, and the table prints per-round figures,
the medians, and the ratio B/A (target >= 0.95).

What the client loop does with a batch: it reads the labels (a few hundred
bytes) and releases the batch - like a trainer that hands `batch.images` to
the GPU (the copy to the device is the trainer's cost, not the loader's), so
the figure is the delivery rate of the daemon + gRPC + client, not of a
consumer. The daemon is started once, stays idle during the A rounds, and its
CPU time per image (from /proc/PID/stat) is reported next to the ceiling's.

Make data with: /usr/bin/python3 bench/gen_imagenet_like.py --out DIR --images 2000 --classes 10
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.path.dirname(HERE)

import daemon_proc  # noqa: E402  (bench/, the folder of this script; puts the client on sys.path)
import conveyor  # noqa: E402
from conveyor.daemon import DaemonError  # noqa: E402
from proc_sampler import proc_cpu_seconds  # noqa: E402


def run_ceiling(args):
    cmd = [os.path.join(args.build, "bench", "ceiling_bench"), "--root", args.data,
           "--threads", str(args.threads), "--batch-size", str(args.batch_size),
           "--epochs", str(args.epochs), "--credits", str(args.credits),
           "--size", str(args.size), "--json"]
    res = subprocess.run(cmd, capture_output=True, text=True, check=True)
    line = [ln for ln in res.stdout.splitlines() if ln.strip().startswith("{")][-1]
    out = json.loads(line)
    return {"images_per_s": out["images_per_s"], "cpu_ms_per_image": out["cpu_ms_per_image"]}


def run_client(args, address, daemon_pid, first_epoch):
    loader = conveyor.Loader(address, pipeline="bench", batch_size=args.batch_size, seed=1,
                             credits=args.credits)
    rates, cpu_ms = [], []
    try:
        for i in range(1 + args.epochs):  # the first epoch warms up
            cpu0 = proc_cpu_seconds(daemon_pid)
            t0 = time.perf_counter()
            images = 0
            with loader.epoch(first_epoch + i) as stream:
                for batch in stream:
                    images += batch.labels.shape[0]  # touch the labels only (see module doc)
            dt = time.perf_counter() - t0
            cpu = proc_cpu_seconds(daemon_pid) - cpu0
            if i == 0:
                continue
            rates.append(images / dt)
            cpu_ms.append(1000.0 * cpu / images)
    finally:
        loader.close()
    return {"images_per_s": statistics.median(rates), "daemon_cpu_ms_per_image": statistics.median(cpu_ms),
            "transport": stream.transport}


def start_daemon(args, workdir):
    d = daemon_proc.daemon(os.path.join(args.build, "server", "conveyord"), workdir, args.threads,
                           {"root": os.path.abspath(args.data)}, size=args.size,
                           max_batch_size=max(args.batch_size, 1024), log_level="info")
    try:
        return d.start(timeout=60)
    except DaemonError as e:
        sys.exit(str(e))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="ImageFolder dataset root")
    ap.add_argument("--build", default=os.path.join(SOURCE_DIR, "build"), help="build folder")
    ap.add_argument("--threads", type=int, default=2, help="worker threads on both sides")
    ap.add_argument("--rounds", type=int, default=3, help="A/B rounds (at least 3)")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=3, help="timed epochs per round and side")
    ap.add_argument("--credits", type=int, default=4)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--out", default=os.path.join(SOURCE_DIR, "bench", "results",
                                                 "client_vs_ceiling.json"))
    args = ap.parse_args()
    if args.rounds < 3:
        ap.error("--rounds must be at least 3")
    for tool in (os.path.join(args.build, "bench", "ceiling_bench"),
                 os.path.join(args.build, "server", "conveyord")):
        if not os.access(tool, os.X_OK):
            ap.error("%s not built" % tool)

    workdir = tempfile.mkdtemp(prefix="conveyor-bench-", dir="/tmp")  # short: unix socket path
    daemon = start_daemon(args, workdir)
    rounds = []
    try:
        for r in range(args.rounds):
            a = run_ceiling(args)
            b = run_client(args, daemon.address, daemon.pid, first_epoch=0)  # ceiling_bench's epochs
            rounds.append({"round": r, "ceiling": a, "client": b,
                           "ratio": b["images_per_s"] / a["images_per_s"]})
            print("round %d: ceiling %.1f images/s, client %.1f images/s, ratio %.3f"
                  % (r, a["images_per_s"], b["images_per_s"], rounds[-1]["ratio"]),
                  file=sys.stderr, flush=True)
    finally:
        daemon.stop()
        shutil.rmtree(workdir, ignore_errors=True)

    med_a = statistics.median(x["ceiling"]["images_per_s"] for x in rounds)
    med_b = statistics.median(x["client"]["images_per_s"] for x in rounds)
    ratio = med_b / med_a
    print("%-8s %14s %14s %8s %18s %18s" % ("round", "ceiling img/s", "client img/s", "ratio",
                                             "ceiling CPU-ms/img", "daemon CPU-ms/img"))
    for x in rounds:
        print("%-8d %14.1f %14.1f %8.3f %18.3f %18.3f" % (
            x["round"], x["ceiling"]["images_per_s"], x["client"]["images_per_s"], x["ratio"],
            x["ceiling"]["cpu_ms_per_image"], x["client"]["daemon_cpu_ms_per_image"]))
    print("%-8s %14.1f %14.1f %8.3f   (target >= 0.95: %s)" % (
        "median", med_a, med_b, ratio, "met" if ratio >= 0.95 else "NOT met"))

    result = {"data": os.path.abspath(args.data), "threads": args.threads,
              "batch_size": args.batch_size, "epochs": args.epochs, "credits": args.credits,
              "size": args.size, "rounds": rounds, "ceiling_images_per_s": med_a,
              "client_images_per_s": med_b, "ratio": ratio, "target": 0.95,
              "transport": rounds[0]["client"]["transport"],
              "client_loop": "labels read, batch released; images not touched (handed to GPU)"}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    print("wrote %s" % args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
