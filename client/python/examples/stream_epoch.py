#!/usr/bin/python3
"""Streams epochs of a pipeline through the Python client and prints images/s.

    stream_epoch.py --server unix:///tmp/conveyor-demo/conveyor.sock \
        --pipeline demo-train --batch-size 64 --epochs 2

A training loop in miniature: each batch's images are wrapped as a torch
tensor (when torch is installed) without a copy, the labels are read, and
the batch is released when the next one is taken.
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import conveyor  # noqa: E402

try:
    import torch
except ImportError:  # numpy alone is enough to stream
    torch = None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", default=os.environ.get("CONVEYOR_SERVER",
                                                       "unix:///run/conveyor/conveyor.sock"))
    ap.add_argument("--pipeline", required=True)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--credits", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    loader = conveyor.Loader(args.server, pipeline=args.pipeline, batch_size=args.batch_size,
                             credits=args.credits, seed=args.seed)
    try:
        for epoch in range(args.epochs):
            images = batches = 0
            label_sum = 0
            start = time.perf_counter()
            first = None
            for batch in loader.epoch(epoch):
                if first is None:
                    first = time.perf_counter() - start
                x = torch.from_numpy(batch.images) if torch is not None else batch.images
                label_sum += int(batch.labels.sum())
                images += x.shape[0]
                batches += 1
            wall = time.perf_counter() - start
            print("epoch %d: %d images in %d batches, %.2f s, %.1f images/s "
                  "(first batch after %.3f s), shape %s"
                  % (epoch, images, batches, wall, images / wall, first or 0.0,
                     tuple(x.shape) if batches else ()))
    except conveyor.ConveyorError as e:
        print("error: %s" % e, file=sys.stderr)
        return 1
    finally:
        loader.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
