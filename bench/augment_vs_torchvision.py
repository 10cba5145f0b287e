#!/usr/bin/python3
"""Heavy augmentation recipes: conveyord serving them as `augment` ops
against torchvision's own DataLoader doing the same recipe, side by side in
one run, over one ImageFolder of JPEGs, at 224, uint8 CHW on both sides (no
normalisation, so neither side pays for one the other skips), batches of 64,
shuffled:

  train   RandomResizedCrop(224) + RandomHorizontalFlip (the plain preset:
          the baseline each side's heavy recipes are compared with)
  simclr  RandomResizedCrop(224) + RandomHorizontalFlip +
          RandomApply([ColorJitter(0.4, 0.4, 0.4, 0.1)], p=0.8) +
          RandomGrayscale(0.2) + RandomApply([GaussianBlur(23, (0.1, 2.0))],
          p=0.5)
  trivial RandomResizedCrop(224) + RandomHorizontalFlip + TrivialAugmentWide()

conveyord: one daemon (--threads, 2) serving the three pipelines, the
ops of config/README.md "Augmentation ops", `dct_scaling` at its default
(true: libjpeg decodes at 1/2, 1/4 or 1/8 when the crop allows), read by the
Python client over the unix socket. torchvision: ImageFolder (PIL loading,
which decodes every JPEG at full size) + T.Compose of the same ops +
PILToTensor, DataLoader(num_workers=2, batch_size=64, shuffle=True,
persistent_workers=False, pin_memory=False), run in a separate process (the
DataLoader forks its workers; that process never loads gRPC). Neither side
touches the pixels it is handed (as a trainer that hands the tensor on).

A/B rounds alternate the sides (conveyord first in even rounds,
torchvision first in odd ones), a fresh daemon or a fresh torchvision
process per round, one fresh DataLoader per recipe (its workers start and
stop within the timed epoch, as with persistent workers off). Before the
rounds every file is read once (the page cache); each side then takes 2
untimed batches of `train`. Per round and recipe one timed epoch (or
--batches batches): images / wall time from asking for the epoch to holding
its last batch.

Reported per recipe and side: images/s (median of rounds) and CPU-ms per
image (median of rounds): the daemon's CPU plus the trainer process's
(client, gRPC threads), or the DataLoader workers' plus the trainer
process's (utime + stime from /proc, reaped workers included); the ratios
conveyord / torchvision; and each heavy recipe against its side's own
`train`.

Usage: bench/augment_vs_torchvision.py --data DIR [--rounds 3] [--threads 2]
       [--batches N] [--smoke]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import proc_sampler  # noqa: E402  (no dependencies: safe in the torchvision process)

SIZE = 224
RECIPES = ("train", "simclr", "trivial")
BLUR = {"op": "gaussian_blur", "kernel_size": 23, "sigma": [0.1, 2.0], "p": 0.5}
JITTER = {"op": "color_jitter", "brightness": 0.4, "contrast": 0.4, "saturation": 0.4,
          "hue": 0.1, "p": 0.8}
CONVEYOR_AUGMENT = {
    "train": "train",
    "simclr": [{"op": "random_resized_crop"}, {"op": "horizontal_flip"}, JITTER,
               {"op": "grayscale", "p": 0.2}, BLUR],
    "trivial": [{"op": "random_resized_crop"}, {"op": "horizontal_flip"},
                {"op": "trivial_augment_wide"}],
}
WARMUP_BATCHES = 2


def self_cpu():
    return proc_sampler.proc_cpu_seconds(os.getpid())


def warm_page_cache(root):
    n = 0
    for dirpath, _, files in os.walk(root):
        for name in files:
            with open(os.path.join(dirpath, name), "rb") as f:
                n += len(f.read())
    return n


# --------------------------------------------------------------- conveyord
def run_conveyord(conveyord, data, threads, batch, max_batches, epoch, warmup):
    """{recipe: (images/s, CPU-ms/image)} from one fresh daemon."""
    import daemon_proc  # puts the client on sys.path
    import conveyor
    import torch
    out = {}
    with tempfile.TemporaryDirectory(prefix="cvd-", dir="/tmp") as work:  # short socket path
        cfg = os.path.join(work, "conveyord.yaml")
        pipelines = {name: {"dataset": {"root": data}, "augment": augment, "size": SIZE,
                            "layout": "nchw", "dtype": "uint8", "max_batch_size": 1024}
                     for name, augment in CONVEYOR_AUGMENT.items()}
        with open(cfg, "w") as f:
            json.dump({"threads": threads, "log_level": "warn", "pipelines": pipelines}, f)
        d = daemon_proc.DaemonProcess(conveyord, cfg, workdir=work, threads=threads)
        d.start()
        try:
            if warmup:
                loader = conveyor.Loader(d.unix, pipeline="train", batch_size=batch, seed=1)
                with loader.stream(num_epochs=0) as stream:
                    for i, b in enumerate(stream):
                        if i + 1 >= warmup:
                            break
                loader.close()
            for name in RECIPES:
                loader = conveyor.Loader(d.unix, pipeline=name, batch_size=batch, seed=1)
                n = 0
                cpu0 = proc_sampler.proc_cpu_seconds(d.pid) + self_cpu()
                t0 = time.perf_counter()
                with loader.epoch(epoch) as stream:
                    for i, b in enumerate(stream):
                        images = torch.from_numpy(b.images)
                        assert tuple(images.shape[1:]) == (3, SIZE, SIZE), images.shape
                        n += images.shape[0]
                        if max_batches and i + 1 >= max_batches:
                            break
                elapsed = time.perf_counter() - t0
                cpu = proc_sampler.proc_cpu_seconds(d.pid) + self_cpu() - cpu0
                loader.close()
                out[name] = (n / elapsed, 1000 * cpu / n)
        finally:
            d.stop()
    return out


# ------------------------------------------------------------- torchvision
def torchvision_transform(name):
    import torchvision.transforms as T
    ops = [T.RandomResizedCrop(SIZE), T.RandomHorizontalFlip()]
    if name == "simclr":
        ops += [T.RandomApply([T.ColorJitter(0.4, 0.4, 0.4, 0.1)], p=0.8),
                T.RandomGrayscale(0.2),
                T.RandomApply([T.GaussianBlur(23, (0.1, 2.0))], p=0.5)]
    elif name == "trivial":
        ops += [T.TrivialAugmentWide()]
    return T.Compose(ops + [T.PILToTensor()])


def torchvision_side(argv):
    """`_torchvision DATA BATCH MAX_BATCHES SEED WARMUP`: one JSON line,
    {recipe: [images/s, CPU-ms/image]}."""
    data, batch, max_batches, seed, warmup = argv[0], int(argv[1]), int(argv[2]), \
        int(argv[3]), int(argv[4])
    import torch
    from torch.utils.data import DataLoader
    from torchvision import datasets
    torch.manual_seed(seed)
    me = os.getpid()

    def loader(name):
        ds = datasets.ImageFolder(data, transform=torchvision_transform(name))
        return DataLoader(ds, batch_size=batch, shuffle=True, num_workers=2,
                          persistent_workers=False, pin_memory=False)

    if warmup:
        it = iter(loader("train"))
        for _ in range(warmup):
            next(it)
        it._shutdown_workers()
        del it
    out = {}
    for name in RECIPES:
        dl = loader(name)
        n = 0
        cpu0 = proc_sampler.tree_cpu_seconds(me)
        t0 = time.perf_counter()
        it = iter(dl)
        for i, (images, labels) in enumerate(it):
            assert tuple(images.shape[1:]) == (3, SIZE, SIZE), images.shape
            assert images.dtype == torch.uint8
            n += int(labels.shape[0])
            if max_batches and i + 1 >= max_batches:
                break
        elapsed = time.perf_counter() - t0
        # The workers' CPU counts once they are reaped (cutime of this
        # process): after the last batch of an epoch they are already; after
        # a --batches break, shut them down first.
        it._shutdown_workers()
        cpu = proc_sampler.tree_cpu_seconds(me) - cpu0
        del it, dl
        out[name] = (n / elapsed, 1000 * cpu / n)
    print(json.dumps(out), flush=True)


def run_torchvision(data, batch, max_batches, seed, warmup):
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "_torchvision", data,
                          str(batch), str(max_batches), str(seed), str(warmup)],
                         capture_output=True, text=True, timeout=3600)
    if out.returncode != 0:
        raise RuntimeError("torchvision side failed:\n" + out.stderr[-4000:])
    return {k: tuple(v) for k, v in json.loads(out.stdout.strip().splitlines()[-1]).items()}


# -------------------------------------------------------------------- main
def main():
    if len(sys.argv) > 1 and sys.argv[1] == "_torchvision":
        return torchvision_side(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="an ImageFolder of JPEGs")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2, help="daemon threads (torchvision: 2 "
                    "DataLoader workers)")
    ap.add_argument("--batches", type=int, default=0, help="batches timed per recipe and "
                    "round (default: the whole folder, one epoch)")
    ap.add_argument("--smoke", action="store_true", help="one round of 2 batches of 16 per "
                    "side and recipe, no warm-up (tests/python/test_bench_smoke.py)")
    ap.add_argument("--conveyord", default=os.path.join(
        os.environ.get("CONVEYOR_BUILD_DIR", os.path.join(ROOT, "build")), "server", "conveyord"))
    args = ap.parse_args()
    batch, warmup = 64, WARMUP_BATCHES
    if args.smoke:
        args.rounds, args.batches, batch, warmup = 1, 2, 16, 0
    data = os.path.abspath(args.data)
    if not args.smoke:
        print("page cache: read %.1f MB" % (warm_page_cache(data) / 1e6), flush=True)
    print("%d rounds, %s per recipe and round, batches of %d; conveyord %d threads, "
          "torchvision DataLoader(num_workers=2)"
          % (args.rounds, "%d batches" % args.batches if args.batches else "one epoch", batch,
             args.threads), flush=True)
    ours, theirs = [], []
    for r in range(args.rounds):
        sides = [("conveyord", ours, lambda: run_conveyord(
                     args.conveyord, data, args.threads, batch, args.batches, r, warmup)),
                 ("torchvision", theirs, lambda: run_torchvision(
                     data, batch, args.batches, r, warmup))]
        if r % 2:
            sides.reverse()
        for side, results, run in sides:
            results.append(run())
            print("round %d %-11s: %s" % (r, side, ", ".join(
                "%s %.0f images/s %.2f CPU-ms/image" % (name, *results[-1][name])
                for name in RECIPES)), flush=True)

    def med(results, name, k):
        return statistics.median(x[name][k] for x in results)

    rows = []
    for name in RECIPES:
        rate, cpu = med(ours, name, 0), med(ours, name, 1)
        trate, tcpu = med(theirs, name, 0), med(theirs, name, 1)
        rows.append((name, rate, cpu, trate, tcpu))
        print("%s: conveyord %.0f images/s %.2f CPU-ms/image | torchvision %.0f images/s %.2f "
              "CPU-ms/image | ratio: %.2fx the images/s at %.2fx the CPU per image"
              % (name, rate, cpu, trate, tcpu, rate / trate, cpu / tcpu))
    base = rows[0]
    print()
    print("| recipe | conveyord images/s | CPU-ms/image | torchvision images/s | CPU-ms/image "
          "| images/s ratio | CPU ratio | conveyord vs train | torchvision vs train |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, rate, cpu, trate, tcpu in rows:
        print("| %s | %.0f | %.2f | %.0f | %.2f | %.2fx | %.2fx | %.2fx | %.2fx |"
              % (name, rate, cpu, trate, tcpu, rate / trate, cpu / tcpu, rate / base[1],
                 trate / base[3]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
