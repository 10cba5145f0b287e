#!/usr/bin/env python3
"""Batches landing in GPU memory: conveyord's pinned slots and device transport against a
torch DataLoader, side by side in one run, in alternating rounds.

    python3 bench/gpu_landing.py --data DIR [--conveyord PATH] [--json FILE] [--rounds 2]
        [--seconds 8] [--batch-size 128] [--size 224] [--workers N] [--threads N]

(a) host->device GB/s of cudaMemcpyAsync (torch's copy_ with non_blocking=True on a stream of
    its own) from conveyord's pinned slots (Loader(pin_memory=True): the mapped memfd
    page-locked with cudaHostRegister) against the same copy from cudaHostAlloc memory alone
    (torch.empty(pin_memory=True)); prints the ratio (target >= 0.90).
(b) images/s landed in GPU memory over DIR (an ImageFolder; bench/gen_imagenet_like.py):
      conveyor-device   Loader(device="cuda:0"): the client copies each pinned slot to the GPU
      conveyor-devmem   Loader(transport="device_memory", device="cuda:0"): the daemon does
      dataloader        torch DataLoader(pin_memory=True, num_workers=N) + .cuda(non_blocking=True),
                        the transform of bench/vs_dataloader.py (RandomResizedCrop(size),
                        RandomHorizontalFlip, PILToTensor; its PIL-only equivalent, named
                        dataloader-pil, when torchvision is missing)
    each a fresh process (`gpu_landing.py _contender KIND ...`) reading for --seconds after a
    warm-up, uint8 NCHW batches, the clock stopped after torch.cuda.synchronize();
(c) CPU-ms per image of each: CPU time of the contender's whole process tree (the client, the
    daemon it started, DataLoader workers) over the images it landed.
Prints the figures and their ratios; --json FILE writes them with the machine and GPU. On a
host without a CUDA device it prints "skipped: no CUDA device", measures nothing and exits 0.
"""

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from proc_sampler import tree_cpu_seconds  # noqa: E402

KINDS = ("conveyor-device", "conveyor-devmem", "dataloader")
H2D_TARGET = 0.90
SKIPPED = "skipped: no CUDA device"


def cuda_or_none():
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() and torch.cuda.device_count() > 0 else None


def emit(**kw):
    sys.stdout.write(json.dumps(kw) + "\n")
    sys.stdout.flush()


def as_torch(images):
    import torch
    if isinstance(images, torch.Tensor):
        return images
    if hasattr(images, "__dlpack__"):
        return torch.from_dlpack(images)
    return torch.as_tensor(images, device="cuda")


def start_daemon(args, workdir):
    import daemon_proc  # imports the conveyor client: only in the conveyor contenders
    d = daemon_proc.daemon(args.conveyord, workdir, args.threads, {"root": os.path.abspath(args.data)},
                           size=args.size, max_batch_size=max(args.batch_size, 256))
    d.start(timeout=60)
    return d


# --------------------------------------------------------------------------------- (a) GB/s
def copy_gbps(torch, src, dst, repeats):
    """GB/s of `repeats` host->device copies of src (a pinned CPU uint8 tensor) into dst."""
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        dst.copy_(src, non_blocking=True)  # warm-up
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(stream)
        for _ in range(repeats):
            dst.copy_(src, non_blocking=True)
        end.record(stream)
    end.synchronize()
    return src.numel() * repeats / (start.elapsed_time(end) / 1e3) / 1e9


def contender_h2d(args):
    import torch

    import conveyor
    workdir = tempfile.mkdtemp(prefix="cvl-", dir="/tmp")
    d = start_daemon(args, workdir)
    try:
        with conveyor.Loader(d.address, "bench", batch_size=args.batch_size, seed=args.seed,
                             credits=2, pin_memory=True) as loader:
            with loader.epoch(0) as stream:
                batch = next(iter(stream))
                host = torch.from_numpy(batch.images).view(-1)
                if not host.is_pinned():
                    raise SystemExit("the pinned loader's slot is not page-locked")
                alone = torch.empty(host.numel(), dtype=torch.uint8, pin_memory=True)
                alone.copy_(host)
                dst = torch.empty(host.numel(), dtype=torch.uint8, device="cuda:0")
                runs = {"pinned-slot": [], "cudaHostAlloc": []}
                for r in range(args.h2d_rounds):
                    order = [("pinned-slot", host), ("cudaHostAlloc", alone)]
                    for name, src in (order if r % 2 == 0 else order[::-1]):
                        runs[name].append(copy_gbps(torch, src, dst, args.h2d_repeats))
                del host
                batch.release()
        emit(event="h2d", bytes=int(dst.numel()), runs=runs)
    finally:
        d.stop()
        shutil.rmtree(workdir, ignore_errors=True)


# --------------------------------------------------------------------------- (b), (c) landing
def timed(args, batches, land):
    """Lands batches (an endless iterator) for args.seconds after args.warmup batches:
    {images, seconds, cpu_s}."""
    import torch
    me = os.getpid()
    it = iter(batches)
    for _ in range(args.warmup):
        land(next(it))
    torch.cuda.synchronize()
    cpu0, t0, images = tree_cpu_seconds(me), time.monotonic(), 0
    while time.monotonic() - t0 < args.seconds:
        images += land(next(it))
    torch.cuda.synchronize()
    t1, cpu1 = time.monotonic(), tree_cpu_seconds(me)
    return {"images": images, "seconds": t1 - t0, "cpu_s": cpu1 - cpu0}


def contender_conveyor(args, kind):
    import conveyor
    workdir = tempfile.mkdtemp(prefix="cvl-", dir="/tmp")
    d = start_daemon(args, workdir)
    extra = {"device": "cuda:0"}
    if kind == "conveyor-devmem":
        extra["transport"] = "device_memory"
    try:
        with conveyor.Loader(d.address, "bench", batch_size=args.batch_size, seed=args.seed,
                             credits=args.credits, **extra) as loader:
            with loader.stream(num_epochs=0) as stream:
                def land(b):
                    t = as_torch(b.images)
                    assert t.is_cuda
                    n = int(b.num_samples)
                    b.release()
                    return n
                result = timed(args, stream, land)
                result["transport"] = stream.transport
        emit(event="landing", kind=kind, **result)
    finally:
        d.stop()
        shutil.rmtree(workdir, ignore_errors=True)


class _PilTrainTransform:
    """torchvision's RandomResizedCrop(size) + RandomHorizontalFlip + PILToTensor with PIL and
    numpy only (same parameter draws: scale (0.08, 1), ratio (3/4, 4/3), 10 tries, then the
    centre crop of the clamped ratio; bilinear resize)."""

    def __init__(self, size):
        self.size = size

    def __call__(self, img):
        import math
        import random

        import numpy as np
        import torch
        from PIL import Image
        w, h = img.size
        area = w * h
        box = None
        for _ in range(10):
            target = area * random.uniform(0.08, 1.0)
            ratio = math.exp(random.uniform(math.log(3 / 4), math.log(4 / 3)))
            cw, ch = int(round(math.sqrt(target * ratio))), int(round(math.sqrt(target / ratio)))
            if 0 < cw <= w and 0 < ch <= h:
                x, y = random.randint(0, w - cw), random.randint(0, h - ch)
                box = (x, y, x + cw, y + ch)
                break
        if box is None:
            r = w / h
            cw, ch = (w, int(round(w / (4 / 3)))) if r > 4 / 3 else \
                ((int(round(h * 3 / 4)), h) if r < 3 / 4 else (w, h))
            x, y = (w - cw) // 2, (h - ch) // 2
            box = (x, y, x + cw, y + ch)
        img = img.resize((self.size, self.size), Image.BILINEAR, box=box)
        if random.random() < 0.5:
            img = img.transpose(Image.FLIP_LEFT_RIGHT)
        return torch.from_numpy(np.asarray(img.convert("RGB")).transpose(2, 0, 1).copy())


class _PilImageFolder:
    def __init__(self, root, transform):
        from PIL import Image
        self._open = Image.open
        classes = sorted(e.name for e in os.scandir(root) if e.is_dir())
        self.samples = [(os.path.join(root, c, f), i) for i, c in enumerate(classes)
                        for f in sorted(os.listdir(os.path.join(root, c)))]
        self.transform = transform

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        path, label = self.samples[i]
        with self._open(path) as img:
            return self.transform(img.convert("RGB")), label


def contender_dataloader(args):
    import torch
    from torch.utils.data import DataLoader
    torch.manual_seed(args.seed)
    try:
        from torchvision import datasets, transforms
        tf = transforms.Compose([transforms.RandomResizedCrop(args.size),
                                 transforms.RandomHorizontalFlip(), transforms.PILToTensor()])
        ds, kind = datasets.ImageFolder(args.data, transform=tf), "dataloader"
    except ImportError:
        ds, kind = _PilImageFolder(args.data, _PilTrainTransform(args.size)), "dataloader-pil"
    dl = DataLoader(ds, batch_size=args.batch_size, shuffle=True, num_workers=args.workers,
                    pin_memory=True, persistent_workers=args.workers > 0, drop_last=True)

    def endless():
        while True:
            yield from dl

    copy_stream = torch.cuda.Stream()

    def land(batch):
        imgs, labels = batch
        with torch.cuda.stream(copy_stream):
            imgs.cuda(non_blocking=True)
            labels.cuda(non_blocking=True)
        return int(labels.shape[0])

    emit(event="landing", kind=kind, workers=args.workers, **timed(args, endless(), land))


def contender_main(argv):
    args = parse(argv[1:], contender=True)
    if args.kind == "h2d":
        contender_h2d(args)
    elif args.kind == "dataloader":
        contender_dataloader(args)
    else:
        contender_conveyor(args, args.kind)


# ------------------------------------------------------------------------------------- driver
def parse(argv, contender=False):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    if contender:
        ap.add_argument("kind", choices=KINDS + ("h2d",))
    ap.add_argument("--data", required=True, help="ImageFolder root (bench/gen_imagenet_like.py)")
    ap.add_argument("--conveyord", default=os.environ.get("CONVEYORD") or os.path.join(
        os.environ.get("CONVEYOR_BUILD_DIR", os.path.join(os.path.dirname(HERE), "build")),
        "server", "conveyord"))
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds of (b)")
    ap.add_argument("--seconds", type=float, default=8.0, help="timed seconds per run of (b)")
    ap.add_argument("--warmup", type=int, default=4, help="batches before the clock starts")
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--size", type=int, default=224)
    cpus = os.cpu_count() or 2
    ap.add_argument("--workers", type=int, default=max(1, cpus // 2), help="DataLoader workers")
    ap.add_argument("--threads", type=int, default=max(1, cpus // 2), help="conveyord threads")
    ap.add_argument("--credits", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--h2d-rounds", type=int, default=6)
    ap.add_argument("--h2d-repeats", type=int, default=50)
    ap.add_argument("--only", default=",".join(KINDS), help="contenders of (b), comma-separated")
    ap.add_argument("--timeout", type=float, default=120, help="per contender run, seconds")
    return ap.parse_args(argv)


def run_contender(kind, argv, args):
    cmd = [sys.executable, os.path.abspath(__file__), "_contender", kind] + argv
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"kind": kind, "error": "timed out after %s s" % args.timeout}
    events = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
    if r.returncode != 0 or not events:
        return {"kind": kind, "error": "exit %d: %s" % (r.returncode, r.stderr[-2000:])}
    return events[-1]


def median(xs):
    return statistics.median(xs) if xs else None


def main(argv):
    if len(argv) > 1 and argv[1] == "_contender":
        return contender_main(argv[1:])
    args = parse(argv[1:])
    torch = cuda_or_none()
    if torch is None:
        print(SKIPPED + " (torch sees none): nothing measured")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"skipped": "no CUDA device"}, f)
        return 0
    passthrough = argv[1:]
    props = torch.cuda.get_device_properties(0)
    out = {"date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "gpu": props.name, "gpu_uuid": "GPU-%s" % props.uuid,
           "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                       "torch": torch.__version__, "cuda": torch.version.cuda},
           "args": vars(args), "errors": []}

    h2d = run_contender("h2d", passthrough, args)
    if "error" in h2d:
        out["errors"].append(h2d)
        print("h2d: FAILED: %s" % h2d["error"])
    else:
        pinned, alone = median(h2d["runs"]["pinned-slot"]), median(h2d["runs"]["cudaHostAlloc"])
        out["h2d"] = dict(h2d, median_gbps={"pinned-slot": pinned, "cudaHostAlloc": alone},
                          ratio=pinned / alone, target=H2D_TARGET)
        print("h2d GB/s (median of %d, %d MB copies): pinned slot %.2f, cudaHostAlloc %.2f"
              % (args.h2d_rounds, h2d["bytes"] // 10**6, pinned, alone))
        print("ratio h2d pinned-slot/cudaHostAlloc: %.3f (target >= %.2f: %s)"
              % (pinned / alone, H2D_TARGET, "met" if pinned / alone >= H2D_TARGET else "MISSED"))

    kinds = [k for k in args.only.split(",") if k]
    landing = {}
    for r in range(args.rounds):
        for kind in (kinds if r % 2 == 0 else kinds[::-1]):
            res = run_contender(kind, passthrough, args)
            if "error" in res:
                out["errors"].append(dict(res, round=r))
                print("round %d %s: FAILED: %s" % (r, kind, res["error"][-600:]))
                continue
            name = res["kind"]
            ips = res["images"] / res["seconds"]
            cpu_ms = 1e3 * res["cpu_s"] / max(res["images"], 1)
            landing.setdefault(name, {"images_per_s": [], "cpu_ms_per_image": [], "runs": []})
            landing[name]["images_per_s"].append(ips)
            landing[name]["cpu_ms_per_image"].append(cpu_ms)
            landing[name]["runs"].append(res)
            print("round %d %-16s %8.0f images/s landed  %6.3f CPU-ms/image" % (r, name, ips, cpu_ms))
    out["landing"] = {k: dict(v, median_images_per_s=median(v["images_per_s"]),
                              median_cpu_ms_per_image=median(v["cpu_ms_per_image"]))
                      for k, v in landing.items()}
    base = next((k for k in ("dataloader", "dataloader-pil") if k in landing), None)
    out["ratios"] = {}
    if base:
        b = out["landing"][base]
        for k in ("conveyor-device", "conveyor-devmem"):
            if k in landing:
                v = out["landing"][k]
                ips = v["median_images_per_s"] / b["median_images_per_s"]
                cpu = v["median_cpu_ms_per_image"] / b["median_cpu_ms_per_image"]
                out["ratios"]["%s/%s" % (k, base)] = {"images_per_s": ips, "cpu_ms_per_image": cpu}
                print("ratio %s/%s: images/s %.2fx, CPU-ms/image %.2fx" % (k, base, ips, cpu))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
    return 1 if out["errors"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
