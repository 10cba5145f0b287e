#!/usr/bin/python3
"""Images/s of `augment` written as ops against the fixed `train` recipe, on
one daemon over one ImageFolder: the preset, the same recipe as a list of
ops (target: >= 0.97x the preset), and the list with vertical_flip and
grayscale (p 0.5 each) added, to show what the extra ops cost in the fused
pass. uint8 NCHW at 224, 2 threads; A/B rounds alternate the pipelines, one
epoch each after a warm-up epoch.

Usage: bench/augment_ops.py --data DIR [--rounds 3] [--threads 2] [--smoke]
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import daemon_proc  # noqa: E402  (puts the client on sys.path)
import conveyor  # noqa: E402

PIPELINES = {
    "preset": "train",
    "ops": [{"op": "random_resized_crop"}, {"op": "horizontal_flip"}],
    "ops-vflip-gray": [{"op": "random_resized_crop"}, {"op": "horizontal_flip"},
                       {"op": "vertical_flip"}, {"op": "grayscale", "p": 0.5}],
}


def rate(address, pipeline, epoch, batch_size, max_batches):
    loader = conveyor.Loader(address, pipeline=pipeline, batch_size=batch_size, seed=1)
    n = 0
    t0 = time.perf_counter()
    with loader.epoch(epoch) as stream:
        for i, b in enumerate(stream):
            n += b.num_samples
            if max_batches and i + 1 >= max_batches:
                break
    elapsed = time.perf_counter() - t0
    loader.close()
    return n / elapsed


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--smoke", action="store_true", help="one round of 2 batches per pipeline")
    ap.add_argument("--conveyord", default=os.path.join(
        os.environ.get("CONVEYOR_BUILD_DIR", os.path.join(os.path.dirname(HERE), "build")),
        "server", "conveyord"))
    args = ap.parse_args()
    rounds, max_batches, batch = (1, 2, 16) if args.smoke else (args.rounds, 0, 64)
    with tempfile.TemporaryDirectory() as work:
        cfg = os.path.join(work, "conveyord.yaml")
        pipelines = {name: {"dataset": {"root": args.data}, "augment": augment, "size": 224,
                            "layout": "nchw", "dtype": "uint8", "max_batch_size": 1024}
                     for name, augment in PIPELINES.items()}
        with open(cfg, "w") as f:
            json.dump({"threads": args.threads, "log_level": "warn", "pipelines": pipelines}, f)
        d = daemon_proc.DaemonProcess(args.conveyord, cfg, workdir=work, threads=args.threads)
        d.start()
        try:
            if not args.smoke:
                rate(d.unix, "preset", 0, batch, 0)  # warm-up: the page cache
            rates = {name: [] for name in PIPELINES}
            for r in range(rounds):
                for name in PIPELINES:
                    rates[name].append(rate(d.unix, name, r, batch, max_batches))
                print("round %d: %s" % (r, ", ".join("%s %.0f images/s" % (n, v[-1])
                                                     for n, v in rates.items())), flush=True)
        finally:
            d.stop()
    base = statistics.median(rates["preset"])
    for name, values in rates.items():
        m = statistics.median(values)
        print("%-16s %6.0f images/s  %.3fx the preset" % (name, m, m / base))


if __name__ == "__main__":
    main()
