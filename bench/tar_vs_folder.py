#!/usr/bin/python3
"""Images/s of conveyord reading WebDataset tar shards against the same
images as an ImageFolder, local disk, same pipeline (RandomResizedCrop(224) +
flip, uint8), A/B rounds alternating the two sides, one daemon per side.

The shards are written from the folder (sorted like the daemon's index,
`--per-shard` samples each, `<key>.jpg` + `<key>.cls`) into --shards.

Usage: bench/tar_vs_folder.py --data DIR --shards DIR [--rounds 3 --epochs 2]
"""
import argparse
import io
import os
import statistics
import sys
import tarfile
import tempfile
import time

import daemon_proc  # noqa: E402  (puts the client on sys.path)
import conveyor  # noqa: E402


def folder_samples(root):
    classes = sorted(d for d in os.listdir(root)
                     if not d.startswith(".") and os.path.isdir(os.path.join(root, d)))
    out = []
    for label, c in enumerate(classes):
        for f in sorted(os.listdir(os.path.join(root, c))):
            if f.lower().endswith((".jpg", ".jpeg")):
                out.append((os.path.join(root, c, f), label))
    return out


def write_shards(samples, out_dir, per_shard):
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    for s in range(0, len(samples), per_shard):
        path = os.path.join(out_dir, "shard-%06d.tar" % (s // per_shard))
        with tarfile.open(path, "w") as tar:
            for i, (src, label) in enumerate(samples[s:s + per_shard]):
                key = "%08d" % (s + i)
                tar.add(src, arcname=key + ".jpg")
                data = b"%d" % label
                info = tarfile.TarInfo(key + ".cls")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        paths.append(path)
    return paths


def images_per_second(conveyord, dataset, threads, epochs, batch_size):
    with tempfile.TemporaryDirectory() as work:
        d = daemon_proc.daemon(conveyord, work, threads, dataset)
        d.start()
        try:
            loader = conveyor.Loader(d.unix, pipeline="bench", batch_size=batch_size, seed=1)
            with loader.epoch(0) as stream:  # warm-up: page cache, buffers
                for _ in stream:
                    pass
            n = 0
            t0 = time.monotonic()
            with loader.stream(num_epochs=epochs, first_epoch=1) as stream:
                for b in stream:
                    n += len(b.indices)
            dt = time.monotonic() - t0
            loader.close()
            return n / dt
        finally:
            d.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="ImageFolder dataset root")
    ap.add_argument("--shards", required=True, help="folder to write the shards into")
    ap.add_argument("--per-shard", type=int, default=100)
    ap.add_argument("--build", default=os.path.join(daemon_proc.SOURCE_DIR, "build"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64)
    a = ap.parse_args()
    conveyord = os.path.join(a.build, "server", "conveyord")
    samples = folder_samples(a.data)
    shards = write_shards(samples, a.shards, a.per_shard)
    sides = {"folder": {"root": os.path.abspath(a.data)}, "tar": {"shards": shards}}
    rates = {k: [] for k in sides}
    for r in range(a.rounds):
        for side in (("folder", "tar") if r % 2 == 0 else ("tar", "folder")):
            rates[side].append(images_per_second(conveyord, sides[side], a.threads, a.epochs,
                                                 a.batch_size))
            print("round %d %-6s %.1f images/s" % (r, side, rates[side][-1]), flush=True)
    f, t = statistics.median(rates["folder"]), statistics.median(rates["tar"])
    print("%d images, %d shards: folder %.1f images/s, tar %.1f images/s (median of %d); "
          "tar/folder %.3f" % (len(samples), len(shards), f, t, a.rounds, t / f))
    return 0


if __name__ == "__main__":
    sys.exit(main())
