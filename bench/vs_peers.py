#!/usr/bin/python3
"""Conveyor against the strongest input pipelines: DALI, tf.data, SPDL, Pillow-SIMD.

    /usr/bin/python3 bench/vs_peers.py --data DIR [--images 1000] [--build DIR]
        [--modes train,eval,float32] [--only NAMES] [--rounds 4] [--epochs 1]
        [--warmup-epochs 1] [--workers 2] [--json-out F.json] [--chart-out F.png]
        [--quick] [--ids]

The same files and the same work for every contender, 64 images a batch,
--workers (2) worker threads or processes each:
  train    read -> decode -> RandomResizedCrop(224) + horizontal flip -> uint8 CHW
  eval     read -> decode -> resize shorter side 256 -> centre crop 224 -> uint8 CHW
  float32  the train transform, output float32 normalised with ImageNet mean/std

Contenders (each in a fresh process tree for every round; rounds alternate
A B C ... A B C ..., modes inside each round):
  dataloader       torchvision ImageFolder + transforms, DataLoader(num_workers=W,
                   persistent_workers=True), Debian's Pillow
  dataloader-simd  the same in the venv `pillow-simd` (Pillow-SIMD built from PyPI)
  tfdata           tf.data in the venv `tensorflow`: the standard ImageNet input
                   function (extract_jpeg_shape + sample_distorted_bounding_box +
                   decode_and_crop_jpeg + resize + random flip; eval: the
                   centre window of 224/256 of the shorter side decoded with
                   decode_and_crop_jpeg, then resized), num_parallel_calls = W,
                   private thread pool of W threads, prefetch
  dali             DALI in the venv `dali`, CPU only (device_id=None):
                   readers.file -> decoders.image_random_crop -> resize ->
                   crop_mirror_normalize (eval: decoders.image -> resize_shorter
                   -> centre crop), num_threads = W
  spdl             SPDL in the venv `spdl` (system FFmpeg): a spdl.pipeline
                   of load_image (FFmpeg decode + crop/scale/flip filter graph)
                   at concurrency W on W threads, then a batch stage
  conveyord-unix   conveyord --threads W + conveyor.Loader over the unix socket
  conveyord-tcp    the same over TCP on 127.0.0.1 (data socket)
  conveyord-relaid conveyord-unix with relay_jpeg: every JPEG re-laid
                   ahead (conveyord --prepare) into a cache folder kept
                   beside the data (DIR.relaid-cache), so crops decode only
                   the restart intervals they cover; the steady state
  ceiling          build/bench/ceiling_bench: the engine in one process (train and
                   eval only: it has no float output)
A peer whose virtual environment cannot be made (scripts/venv.sh NAME) is
reported as skipped with pip's error; it never fails the run.

Figures per contender and mode (the machinery of vs_dataloader.py and
proc_sampler.py): images/s per timed epoch (median, min-max over all rounds),
CPU-ms per image of the whole process tree, peak summed PSS of the tree,
time to first batch from spawning the contender's python. Ratios:
conveyord-unix against the best peer of each mode (the one with the highest
median images/s): images/s (target >= 1.3x train, >= 1.2x eval and float32)
and CPU per image (target <= 0.8x); also the median of the per-round ratios.

--ids makes every contender report the dataset indices it delivered each
epoch (the smoke test checks every image came exactly once); --quick is the
smoke mode: 1 round, 1 epoch, no warm-up, --ids.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from proc_sampler import now

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.path.dirname(HERE)
MODES = ("train", "eval", "float32")
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
EVAL_RESIZE = 256
# name -> (runner, venv or None); the order is the order within a round.
CONTENDERS = {
    "dataloader": ("dataloader", None),
    "dataloader-simd": ("dataloader", "pillow-simd"),
    "tfdata": ("tfdata", "tensorflow"),
    "dali": ("dali", "dali"),
    "spdl": ("spdl", "spdl"),
    "conveyord-unix": ("conveyor", None),
    "conveyord-tcp": ("conveyor", None),
    "conveyord-relaid": ("conveyor", None),
    "ceiling": ("ceiling", None),
}
PEERS = ("dataloader", "dataloader-simd", "tfdata", "dali", "spdl")
TARGETS = {"train": 1.3, "eval": 1.2, "float32": 1.2}
CPU_TARGET = 0.8


# --------------------------------------------------------------- contender side
# `vs_peers.py _peer NAME ...` runs in the contender's own interpreter (a venv
# for the peers); it prints vs_dataloader.run_epochs' JSON events on stdout.

def file_list(root):
    """(paths, labels) in torchvision ImageFolder's order (classes sorted,
    files sorted in each): index i is the same image for every contender."""
    exts = (".jpg", ".jpeg")
    classes = sorted(d.name for d in os.scandir(root) if d.is_dir())
    paths, labels = [], []
    for ci, c in enumerate(classes):
        for f in sorted(os.listdir(os.path.join(root, c))):
            if f.lower().endswith(exts):
                paths.append(os.path.join(root, c, f))
                labels.append(ci)
    return paths, labels


def peer_dataloader(args, batches):
    import numpy as np  # noqa: F401  (torchvision's PIL path)
    import PIL
    import torch
    from torch.utils.data import DataLoader
    from torchvision import datasets, transforms

    torch.manual_seed(args.seed)
    if args.mode == "eval":
        ops = [transforms.Resize(EVAL_RESIZE), transforms.CenterCrop(args.size),
               transforms.PILToTensor()]
    else:
        ops = [transforms.RandomResizedCrop(args.size), transforms.RandomHorizontalFlip()]
        ops += ([transforms.ToTensor(), transforms.Normalize(MEAN, STD)]
                if args.mode == "float32" else [transforms.PILToTensor()])

    class Indexed(datasets.ImageFolder):
        def __getitem__(self, i):
            return super().__getitem__(i)[0], i

    ds = Indexed(args.data, transform=transforms.Compose(ops))
    dl = DataLoader(ds, batch_size=args.batch_size, shuffle=True, num_workers=args.workers,
                    persistent_workers=args.workers > 0)
    batches(lambda e: ((imgs, ids.numpy()) for imgs, ids in dl))
    return {"library": "Pillow " + PIL.__version__, "samples": len(ds)}


def peer_tfdata(args, batches):
    import tensorflow as tf

    tf.config.threading.set_inter_op_parallelism_threads(args.workers)
    tf.config.threading.set_intra_op_parallelism_threads(args.workers)
    tf.random.set_seed(args.seed)
    paths, _ = file_list(args.data)
    size = args.size
    mean = tf.constant([255 * m for m in MEAN])
    std = tf.constant([255 * s for s in STD])

    def train(data):
        shape = tf.image.extract_jpeg_shape(data)
        bbox = tf.constant([0.0, 0.0, 1.0, 1.0], dtype=tf.float32, shape=[1, 1, 4])
        begin, crop, _ = tf.image.sample_distorted_bounding_box(
            shape, bounding_boxes=bbox, min_object_covered=0.1,
            aspect_ratio_range=[3 / 4, 4 / 3], area_range=[0.08, 1.0], max_attempts=10,
            use_image_if_no_bounding_boxes=True)
        y, x, _ = tf.unstack(begin)
        h, w, _ = tf.unstack(crop)
        img = tf.image.decode_and_crop_jpeg(data, tf.stack([y, x, h, w]), channels=3)
        img = tf.image.resize(img, [size, size], method="bilinear")
        return tf.image.random_flip_left_right(img)

    def evaluate(data):
        shape = tf.image.extract_jpeg_shape(data)
        h, w = shape[0], shape[1]
        side = tf.cast(tf.cast(tf.minimum(h, w), tf.float32) * (size / EVAL_RESIZE), tf.int32)
        y, x = (h - side + 1) // 2, (w - side + 1) // 2
        img = tf.image.decode_and_crop_jpeg(data, tf.stack([y, x, side, side]), channels=3)
        return tf.image.resize(img, [size, size], method="bilinear")

    def load(path, i):
        data = tf.io.read_file(path)
        img = evaluate(data) if args.mode == "eval" else train(data)
        if args.mode == "float32":
            img = (img - mean) / std
        else:
            img = tf.cast(tf.clip_by_value(tf.round(img), 0, 255), tf.uint8)
        return tf.transpose(img, [2, 0, 1]), i

    ds = tf.data.Dataset.from_tensor_slices((paths, list(range(len(paths)))))
    ds = ds.shuffle(len(paths), seed=args.seed, reshuffle_each_iteration=True)
    ds = ds.map(load, num_parallel_calls=args.workers, deterministic=False)
    ds = ds.batch(args.batch_size).prefetch(2)
    opts = tf.data.Options()
    opts.threading.private_threadpool_size = args.workers
    ds = ds.with_options(opts)
    batches(lambda e: ((imgs, ids.numpy()) for imgs, ids in ds))
    return {"library": "tensorflow " + tf.__version__, "samples": len(paths)}


def peer_dali(args, batches):
    import numpy as np
    import nvidia.dali as dali
    from nvidia.dali import fn, pipeline_def, types

    paths, _ = file_list(args.data)
    n = len(paths)

    @pipeline_def(batch_size=args.batch_size, num_threads=args.workers, device_id=None,
                  seed=args.seed + 1, prefetch_queue_depth=2)
    def pipe():
        jpegs, ids = fn.readers.file(files=paths, labels=list(range(n)), name="Reader",
                                     shuffle_after_epoch=True, pad_last_batch=True)
        if args.mode == "eval":
            imgs = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
            imgs = fn.resize(imgs, resize_shorter=EVAL_RESIZE)
            crop, mirror = (args.size, args.size), 0
        else:
            imgs = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB,
                                                 random_aspect_ratio=[3 / 4, 4 / 3],
                                                 random_area=[0.08, 1.0], num_attempts=10)
            imgs = fn.resize(imgs, resize_x=args.size, resize_y=args.size)
            crop, mirror = None, fn.random.coin_flip(probability=0.5)
        kw = {"crop": crop} if crop else {}
        if args.mode == "float32":
            kw.update(dtype=types.FLOAT, mean=[255 * m for m in MEAN], std=[255 * s for s in STD])
        else:
            kw.update(dtype=types.UINT8)
        imgs = fn.crop_mirror_normalize(imgs, output_layout="CHW", mirror=mirror, **kw)
        return imgs, ids

    p = pipe()
    p.build()
    per_epoch = (n + args.batch_size - 1) // args.batch_size

    def epoch(e):
        left = n
        for _ in range(per_epoch):
            imgs, ids = p.run()
            take = min(left, args.batch_size)
            left -= take
            arr = np.asarray(imgs.as_tensor())[:take]
            yield arr, np.asarray(ids.as_tensor()).reshape(-1)[:take]

    batches(epoch)
    return {"library": "nvidia-dali " + dali.__version__, "samples": n}


def peer_spdl(args, batches):
    import random

    import numpy as np
    import spdl.io
    from spdl.pipeline import PipelineBuilder

    try:
        from importlib import metadata
        version = metadata.version("spdl")
    except Exception:
        version = "?"
    # Loads libspdl here, on this thread: spdl.io loads it lazily on first use,
    # and two pipeline threads arriving at once both initialize its glog,
    # whose second initialization aborts the process.
    spdl.io.decode_config()
    paths, _ = file_list(args.data)
    n, size = len(paths), args.size
    rng = random.Random(args.seed)
    mean = np.array([255 * m for m in MEAN], np.float32).reshape(1, 3, 1, 1)
    inv_std = 1 / np.array([255 * s for s in STD], np.float32).reshape(1, 3, 1, 1)

    def filter_desc():
        if args.mode == "eval":
            return ("scale=w=%d:h=%d:force_original_aspect_ratio=increase:flags=bilinear,"
                    "crop=%d:%d,format=rgb24" % (EVAL_RESIZE, EVAL_RESIZE, size, size))
        # RandomResizedCrop: area fraction and aspect ratio as torchvision draws
        # them (log-uniform ratio); the window is clamped to the image.
        import math
        a = rng.uniform(0.08, 1.0)
        r = math.exp(rng.uniform(math.log(3 / 4), math.log(4 / 3)))
        flip = ",hflip" if rng.random() < 0.5 else ""
        return ("crop=w='min(iw,sqrt(%.5f*iw*ih*%.5f))':h='min(ih,sqrt(%.5f*iw*ih/%.5f))':"
                "x='(iw-ow)*%.4f':y='(ih-oh)*%.4f',scale=%d:%d:flags=bilinear%s,format=rgb24"
                % (a, r, a, r, rng.random(), rng.random(), size, size, flip))

    def source(e):
        order = list(range(n))
        random.Random(args.seed * 1000 + e).shuffle(order)
        for i in order:
            yield i, paths[i], filter_desc()

    def decode(item):
        i, path, desc = item
        return i, spdl.io.load_image(path, filter_desc=desc)

    def collate(items):
        ids = np.array([i for i, _ in items], np.int64)
        nhwc = np.stack([spdl.io.to_numpy(f) for _, f in items])
        nchw = np.ascontiguousarray(nhwc.transpose(0, 3, 1, 2))
        if args.mode == "float32":
            nchw = (nchw.astype(np.float32) - mean) * inv_std
        return nchw, ids

    def epoch(e):
        pipeline = (PipelineBuilder().add_source(source(e))
                    .pipe(decode, concurrency=args.workers)
                    .aggregate(args.batch_size)
                    .pipe(collate)
                    .add_sink(2)
                    .build(num_threads=args.workers))
        with pipeline.auto_stop():
            yield from pipeline

    batches(epoch)
    return {"library": "spdl " + version, "samples": n}


def peer_conveyor(args, batches):
    import shutil

    import daemon_proc
    import conveyor
    workdir = tempfile.mkdtemp(prefix="cvp-", dir="/tmp")  # short: unix socket paths
    daemon = daemon_proc.daemon(args.conveyord, workdir, args.workers,
                                {"root": os.path.abspath(args.data)}, via=args.transport,
                                size=args.size, max_batch_size=max(args.batch_size, 256),
                                augment="eval" if args.mode == "eval" else "train",
                                dtype="float32" if args.mode == "float32" else "uint8",
                                relay_cache=args.relay_cache)
    try:
        if args.relay_cache:
            # Every copy made before the daemon serves (the first round's
            # run makes them; later ones find them all there).
            subprocess.run([args.conveyord, "--config", os.path.join(workdir, "conveyord.yaml"),
                            "--prepare", "bench"], check=True, stdout=subprocess.DEVNULL)
        daemon.start(timeout=60)
        loader = conveyor.Loader(daemon.address, pipeline="bench", batch_size=args.batch_size,
                                 seed=args.seed, credits=args.credits)
        transport = []

        def epoch(e):
            with loader.epoch(e) as stream:
                if not transport:
                    transport.append(stream.transport)
                for batch in stream:
                    yield batch.images, batch.indices

        try:
            batches(epoch)
        finally:
            loader.close()
        return {"library": "conveyord", "transport": transport[0] if transport else None}
    finally:
        daemon.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def peer_main(argv):
    ap = argparse.ArgumentParser(prog="vs_peers.py _peer")
    ap.add_argument("runner", choices=("dataloader", "tfdata", "dali", "spdl", "conveyor"))
    ap.add_argument("--data", required=True)
    ap.add_argument("--mode", choices=MODES, default="train")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--transport", choices=("unix", "tcp"), default="unix")
    ap.add_argument("--conveyord")
    ap.add_argument("--relay-cache", help="conveyord-relaid: the cache folder of the copies")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--credits", type=int, default=4)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--warmup-epochs", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ids", action="store_true", help="report the indices delivered per epoch")
    args = ap.parse_args(argv)
    from vs_dataloader import emit, run_epochs

    def batches(make_iter):
        def with_ids(e):
            seen = []
            for imgs, ids in make_iter(e):
                if args.ids:
                    seen.extend(int(i) for i in ids)
                yield imgs, ids
            if args.ids:
                emit(event="ids", epoch=e, ids=seen)

        def first(t, imgs):
            emit(event="first_batch", t=t, shape=[int(d) for d in imgs.shape],
                 dtype=str(imgs.dtype))

        run_epochs(with_ids, args, first)

    info = globals()["peer_" + args.runner](args, batches)
    emit(event="done", **info)
    return 0


# --------------------------------------------------------------- driver

def venv_python(name):
    """(interpreter, None) of the cached venv NAME, made by scripts/venv.sh
    when missing, or (None, why) when it cannot be made."""
    r = subprocess.run([os.path.join(SOURCE_DIR, "scripts", "venv.sh"), name],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return None, "scripts/venv.sh %s failed (%d): %s" % (name, r.returncode, r.stderr[-1500:])
    return r.stdout.strip().splitlines()[-1], None


def venv_ready(name):
    """(interpreter, None) if the venv NAME is already made and current, else
    (None, why): for --existing-venvs (the smoke test never runs pip)."""
    import hashlib
    req = os.path.join(SOURCE_DIR, "scripts", "venvs", name + ".txt")
    d = os.path.join(os.environ.get("CONVEYOR_VENV_DIR", os.path.join(SOURCE_DIR, ".venvs")), name)
    try:
        with open(req, "rb") as f:
            want = hashlib.sha256(f.read()).hexdigest()
        with open(os.path.join(d, ".conveyor-stamp")) as f:
            have = f.read().strip()
    except OSError as e:
        return None, "venv %s not made (%s; make it with scripts/venv.sh %s)" % (name, e, name)
    if have != want:
        return None, "venv %s is stale (scripts/venv.sh %s remakes it)" % (name, name)
    return os.path.join(d, "bin", "python"), None


def run_contender(c, mode, args, workdir):
    import vs_dataloader as vd
    if c["runner"] == "ceiling":
        a = argparse.Namespace(**vars(args))
        a.augment, a.threads = mode, args.workers
        run = vd.run_ceiling(c, a, workdir)
        return run
    cmd = [c["python"], os.path.abspath(__file__), "_peer", c["runner"], "--data", args.data,
           "--mode", mode, "--workers", str(args.workers), "--batch-size", str(args.batch_size),
           "--size", str(args.size), "--epochs", str(args.epochs),
           "--warmup-epochs", str(args.warmup_epochs), "--seed", str(args.seed),
           "--credits", str(args.credits)]
    if c["runner"] == "conveyor":
        cmd += ["--conveyord", args.conveyord,
                "--transport", "tcp" if c["name"].endswith("-tcp") else "unix"]
        if c["name"] == "conveyord-relaid":
            # Kept beside the data across rounds and runs: the steady state.
            cmd += ["--relay-cache", os.path.abspath(args.data).rstrip("/") + ".relaid-cache"]
    if args.ids:
        cmd.append("--ids")
    # "peer": vs_dataloader's conveyor runner reports daemon launch times, this one not.
    run = vd.measure_contender(cmd, {"name": "%s-%s" % (c["name"], mode), "runner": "peer"},
                               args, workdir)
    done = run.pop("done", {})
    run["library"] = done.get("library")
    if done.get("transport"):
        run["transport"] = done["transport"]
    return run


def best_peer(summary, mode):
    peers = [(s["images_per_s"], n) for n, s in summary.get(mode, {}).items() if n in PEERS]
    return max(peers)[1] if peers else None


def evaluate(summary):
    import vs_dataloader as vd
    out = {}
    for mode in summary:
        best = best_peer(summary, mode)
        u = summary[mode].get("conveyord-unix")
        if best is None or u is None:
            continue
        b = summary[mode][best]
        paired = vd.paired_ratios(u, b)
        ips = vd.ratio(u["images_per_s"], b["images_per_s"])
        cpu = vd.ratio(u["cpu_s_per_image"], b["cpu_s_per_image"])
        out[mode] = {"best_peer": best, "images_per_s": ips,
                     "images_per_s_per_round": paired,
                     "images_per_s_median_of_rounds": statistics.median(paired) if paired else None,
                     "cpu_s_per_image": cpu,
                     "target_images_per_s": TARGETS[mode], "target_cpu": CPU_TARGET,
                     "result": "PASS" if ips >= TARGETS[mode] and cpu <= CPU_TARGET else "FAIL"}
        t = summary[mode].get("conveyord-tcp")
        if t:
            out[mode]["tcp_images_per_s"] = vd.ratio(t["images_per_s"], b["images_per_s"])
        r = summary[mode].get("conveyord-relaid")
        if r:
            out[mode]["relaid_images_per_s"] = vd.ratio(r["images_per_s"], b["images_per_s"])
            out[mode]["relaid_cpu_s_per_image"] = vd.ratio(r["cpu_s_per_image"],
                                                           b["cpu_s_per_image"])
            out[mode]["relaid_vs_unix_cpu_s_per_image"] = vd.ratio(r["cpu_s_per_image"],
                                                                   u["cpu_s_per_image"])
    return out


def print_report(summary, ratios, skipped, out=sys.stdout):
    from vs_dataloader import fmt
    for mode, rows in summary.items():
        print("\nmode %s" % mode, file=out)
        print("  %-16s %24s %12s %10s %8s  %s" % ("contender", "images/s med [min-max]",
                                                  "CPU-ms/img", "PSS MiB", "TTFB s", "library"),
              file=out)
        for n, s in rows.items():
            print("  %-16s %8.0f [%5.0f-%5.0f]  %12.3f %10s %8s  %s" % (
                n, s["images_per_s"], s["images_per_s_min"], s["images_per_s_max"],
                1000 * s["cpu_s_per_image"], fmt(s["peak_pss_bytes"] and s["peak_pss_bytes"] / 2**20, ".0f"),
                fmt(s["ttfb_s"], ".2f"), s.get("library") or ""), file=out)
        r = ratios.get(mode)
        if r:
            print("  conveyord-unix / %s: images/s %.2fx (target >= %.1fx; median of rounds %s), "
                  "CPU/image %.2fx (target <= %.1fx): %s" % (
                      r["best_peer"], r["images_per_s"], r["target_images_per_s"],
                      fmt(r["images_per_s_median_of_rounds"], ".2f"), r["cpu_s_per_image"],
                      CPU_TARGET, r["result"]), file=out)
            if "relaid_images_per_s" in r:
                print("  conveyord-relaid / %s: images/s %.2fx, CPU/image %.2fx; CPU/image "
                      "%.2fx conveyord-unix's" % (
                          r["best_peer"], r["relaid_images_per_s"], r["relaid_cpu_s_per_image"],
                          r["relaid_vs_unix_cpu_s_per_image"]), file=out)
    for n, why in skipped.items():
        print("skipped %s: %s" % (n, why.strip().splitlines()[-1] if why.strip() else why), file=out)


def draw_chart(path, summary, ratios, meta):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = list(summary)
    fig, axes = plt.subplots(1, len(modes), figsize=(5.5 * len(modes), 5), squeeze=False)
    cmap = plt.get_cmap("tab10")
    names = list(CONTENDERS)
    for ax, mode in zip(axes[0], modes):
        rows = [(n, summary[mode][n]) for n in names if n in summary[mode]]
        ips = [s["images_per_s"] for _, s in rows]
        err = [[s["images_per_s"] - s["images_per_s_min"] for _, s in rows],
               [s["images_per_s_max"] - s["images_per_s"] for _, s in rows]]
        ax.barh(range(len(rows)), ips, xerr=err, capsize=3,
                color=[cmap(names.index(n) % 10) for n, _ in rows])
        for i, (n, s) in enumerate(rows):
            ax.text(s["images_per_s"], i, " %.0f/s, %.2f CPU-ms" % (
                s["images_per_s"], 1000 * s["cpu_s_per_image"]), va="center", fontsize=7)
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels([n for n, _ in rows])
        ax.invert_yaxis()
        ax.set_xlabel("images/s (median, min-max bars)")
        r = ratios.get(mode)
        ax.set_title("%s%s" % (mode, "" if not r else "\nconveyord-unix / %s: %.2fx, CPU %.2fx"
                               % (r["best_peer"], r["images_per_s"], r["cpu_s_per_image"])),
                     fontsize=9)
    fig.suptitle("Conveyor vs peers: %d images, batch %d, %d workers, %d cores%s"
                 % (meta["images"], meta["batch_size"], meta["workers"], meta["cores"],
                    " (QUICK: not meaningful)" if meta["quick"] else ""), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv):
    import vs_dataloader as vd
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 2)[2],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="ImageFolder root of JPEGs (generated if missing)")
    ap.add_argument("--images", type=int, default=None, help="to generate (default 1000; --quick 40)")
    ap.add_argument("--build", default=os.environ.get("CONVEYOR_BUILD_DIR",
                                                      os.path.join(SOURCE_DIR, "build")))
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--only", default=",".join(CONTENDERS), help="contender names, comma-separated")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=1, help="timed epochs per run")
    ap.add_argument("--warmup-epochs", type=int, default=1)
    ap.add_argument("--workers", type=int, default=2, help="worker threads/processes of every contender")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--credits", type=int, default=4)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pss-interval", type=float, default=0.5)
    ap.add_argument("--settle", type=float, default=2.0)
    ap.add_argument("--timeout", type=float, default=900, help="per contender run, seconds")
    ap.add_argument("--existing-venvs", action="store_true",
                    help="use only venvs already made (never run pip); skip the others")
    ap.add_argument("--ids", action="store_true", help="contenders report delivered indices")
    ap.add_argument("--quick", action="store_true",
                    help="smoke mode: 1 round, 1 epoch, no warm-up, --ids")
    ap.add_argument("--json-out", default=os.path.join(SOURCE_DIR, "bench", "results", "vs_peers.json"))
    ap.add_argument("--chart-out", default=os.path.join(SOURCE_DIR, "bench", "results", "vs_peers.png"))
    args = ap.parse_args(argv)
    if args.quick:
        args.rounds, args.epochs, args.warmup_epochs, args.ids = 1, 1, 0, True
        args.settle = min(args.settle, 0.2)
    modes = [m for m in args.modes.split(",") if m]
    names = [n for n in args.only.split(",") if n]
    for m in modes:
        if m not in MODES:
            ap.error("--modes: unknown %r (known: %s)" % (m, ", ".join(MODES)))
    for n in names:
        if n not in CONTENDERS:
            ap.error("--only: unknown %r (known: %s)" % (n, ", ".join(CONTENDERS)))
    args.data = os.path.abspath(args.data)
    if not os.path.isdir(args.data):
        images = args.images or (40 if args.quick else 1000)
        subprocess.run([sys.executable, os.path.join(HERE, "gen_imagenet_like.py"), "--out",
                        args.data, "--images", str(images), "--classes", "4" if args.quick else "50",
                        "--seed", "1", "--workers", "2"], check=True)
    n_images = len(file_list(args.data)[0])
    if n_images == 0:
        ap.error("%s holds no JPEGs in ImageFolder layout" % args.data)
    args.conveyord = os.path.join(args.build, "server", "conveyord")
    args.ceiling = os.path.join(args.build, "bench", "ceiling_bench")

    skipped, active = {}, []
    for n in names:
        runner, venv = CONTENDERS[n]
        c = {"name": n, "runner": runner, "kind": "ceiling" if runner == "ceiling" else n,
             "venv": venv, "python": "/usr/bin/python3"}
        binary = {"conveyor": args.conveyord, "ceiling": args.ceiling}.get(runner)
        if binary and not os.access(binary, os.X_OK):
            skipped[n] = "%s is not built" % binary
            continue
        if venv:
            py, why = (venv_ready if args.existing_venvs else venv_python)(venv)
            if py is None:
                skipped[n] = why
                continue
            c["python"] = py
        active.append(c)
    for n, why in skipped.items():
        print("note: skipping %s: %s" % (n, why.strip()[-300:]), file=sys.stderr)
    cores = len(os.sched_getaffinity(0))
    meta = {"data": args.data, "images": n_images, "batch_size": args.batch_size, "size": args.size,
            "modes": modes, "rounds": args.rounds, "epochs": args.epochs,
            "warmup_epochs": args.warmup_epochs, "workers": args.workers, "credits": args.credits,
            "seed": args.seed, "quick": args.quick, "cores": cores,
            "consumer": "reads the batch's indices and shape, drops the batch; pixels untouched",
            "machine": vd.machine_info()}
    print("%d images, batch %d, %d workers, %d cores, %d round(s) x (%d warm-up + %d timed) "
          "epochs; modes %s; contenders: %s" % (
              n_images, args.batch_size, args.workers, cores, args.rounds, args.warmup_epochs,
              args.epochs, ",".join(modes), ", ".join(c["name"] for c in active)),
          file=sys.stderr, flush=True)

    runs = {m: {c["name"]: [] for c in active if not (c["runner"] == "ceiling" and m == "float32")}
            for m in modes}
    errors = {}
    workdir = tempfile.mkdtemp(prefix="vs-peers-")
    t_start = time.time()
    try:
        for r in range(args.rounds):
            for mode in modes:
                for c in active:
                    if c["name"] not in runs[mode] or (mode, c["name"]) in errors:
                        continue
                    try:
                        run = run_contender(c, mode, args, workdir)
                    except RuntimeError as e:  # a peer that fails is reported, not fatal
                        errors[(mode, c["name"])] = str(e)[-3000:]
                        print("round %d %-8s %-16s FAILED: %s" % (r, mode, c["name"],
                                                                 str(e)[-600:]),
                              file=sys.stderr, flush=True)
                        continue
                    run["round"] = r
                    runs[mode][c["name"]].append(run)
                    ips = run["images_per_s"] if c["runner"] == "ceiling" else statistics.median(
                        e["images_per_s"] for e in run["epochs"])
                    cpu = run["cpu_s_per_image"] if c["runner"] == "ceiling" else statistics.median(
                        e["cpu_s_per_image"] for e in run["epochs"])
                    print("round %d %-8s %-16s %8.1f images/s %7.3f CPU-ms/img PSS %6s MiB TTFB %s s"
                          % (r, mode, c["name"], ips, 1000 * cpu,
                             vd.fmt(run["peak_pss_bytes"] and run["peak_pss_bytes"] / 2**20, ".0f"),
                             vd.fmt(run.get("ttfb_s"), ".2f")), file=sys.stderr, flush=True)
    finally:
        import shutil
        shutil.rmtree(workdir, ignore_errors=True)
    meta["wall_s"] = time.time() - t_start
    meta["loadavg_end"] = os.getloadavg()

    summary = {}
    for mode in modes:
        summary[mode] = {}
        for c in active:
            rs = runs[mode].get(c["name"])
            if rs:
                s = vd.summarize({"kind": c["kind"], "runner": "ceiling" if c["kind"] == "ceiling"
                                  else "peer"}, rs)
                s["library"] = rs[0].get("library")
                summary[mode][c["name"]] = s
    ratios = evaluate(summary)
    print_report(summary, ratios, {**skipped, **{"%s (%s)" % (n, m): e for (m, n), e in errors.items()}})
    result = {"meta": meta, "runs": runs, "summary": summary, "ratios": ratios,
              "skipped": skipped, "failed": {"%s/%s" % (m, n): e for (m, n), e in errors.items()}}
    if args.json_out:
        os.makedirs(os.path.dirname(os.path.abspath(args.json_out)), exist_ok=True)
        with open(args.json_out, "w") as f:
            json.dump(result, f, indent=1)
        print("wrote %s" % args.json_out)
    if args.chart_out and any(summary.values()):
        os.makedirs(os.path.dirname(os.path.abspath(args.chart_out)), exist_ok=True)
        draw_chart(args.chart_out, summary, ratios, meta)
        print("wrote %s" % args.chart_out)
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_peer":
        sys.exit(peer_main(sys.argv[2:]))
    sys.exit(main(sys.argv[1:]))
