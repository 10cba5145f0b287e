#!/usr/bin/env python3
"""A second client process of the GPU tests (tests/gpu/test_device_memory.py):

    device_client.py ADDRESS PIPELINE --seed S [--batch-size N] [--stop-after K]

Reads epoch 0 of PIPELINE over the DEVICE_MEMORY transport on cuda:0 and prints one JSON
line per batch: {"batch": i, "indices": [...], "sha256": digest of the batch's bytes as
they are on the device (copied back to the host)}. With --stop-after K it prints
{"waiting": true} after K batches, keeping them unreleased, and sleeps until killed (the
kill -9 test). An open refused with RESOURCE_EXHAUSTED (the GPU budget still held by a client
killed a moment ago, not yet noticed by the daemon) is retried for up to 30 s.
"""

import argparse
import hashlib
import json
import sys
import time

import conveyor
from conveyor.errors import ResourceExhausted

import gpu_helpers as h


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("address")
    ap.add_argument("pipeline")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--stop-after", type=int, default=0)
    args = ap.parse_args(argv)

    deadline = time.monotonic() + 30
    while True:
        loader = conveyor.Loader(args.address, args.pipeline, batch_size=args.batch_size,
                                 seed=args.seed, transport="device_memory", device="cuda:0")
        try:
            stream = loader.epoch(0)
            it = iter(stream)
            first = next(it, None)
            break
        except ResourceExhausted:
            loader.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    held = []
    n = 0
    batch = first
    while batch is not None:
        t = h.as_torch(batch.images)
        data = h.host_bytes(t)
        print(json.dumps({"batch": n, "indices": [int(i) for i in batch.indices],
                          "sha256": hashlib.sha256(data.tobytes()).hexdigest(),
                          "device": str(t.device)}), flush=True)
        n += 1
        if args.stop_after and n >= args.stop_after:
            held.append(batch)
            print(json.dumps({"waiting": True}), flush=True)
            while True:
                time.sleep(60)
        batch.release()
        batch = next(it, None)
    stream.close()
    loader.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
