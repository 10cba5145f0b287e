#!/usr/bin/python3
"""Image-text pairs, CLIP-style: conveyord serving image + caption + JSON +
key from WebDataset tar shards against WebDataset itself in torch's
DataLoader (2 worker processes), over the same shards, the same transform
(RandomResizedCrop(224) + flip, uint8 CHW) and the same batch size. Both
sides hand the trainer the images as a uint8 tensor and every caption as a
str, every JSON as a parsed object and every key; A/B rounds alternate the
sides, one fresh daemon or DataLoader per round.

Reported per side: images/s (median of rounds) and CPU-ms per image (the
daemon's or the DataLoader workers' CPU plus the trainer process's), and
the ratios conveyord / WebDataset. Target (issue: sample fields): >= 2x the
images/s.

The shards are written from an ImageFolder (`--data`, e.g. made by
bench/gen_imagenet_like.py) into --shards: `<key>.jpg`, `<key>.txt` (a
caption of 40-200 characters) and `<key>.json` ({"width", "height",
"similarity", "url"}), `--per-shard` samples each.

WebDataset comes from scripts/venv.sh webdataset (pinned, PyPI); this
script re-runs its WebDataset side under that interpreter.

Usage: bench/clip_vs_webdataset.py --data DIR --shards DIR [--rounds 3]
       [--threads 2] [--batches N] [--smoke]
"""
import argparse
import io
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BATCH = 64
SIZE = 224


def folder_images(root):
    out = []
    for c in sorted(os.listdir(root)):
        folder = os.path.join(root, c)
        if os.path.isdir(folder):
            out += [os.path.join(folder, f) for f in sorted(os.listdir(folder))
                    if f.lower().endswith((".jpg", ".jpeg"))]
    return out


def write_shards(images, out_dir, per_shard):
    os.makedirs(out_dir, exist_ok=True)
    rng = random.Random(0)
    words = ("a photo of the small red dog cat house tree car near under on with blue old "
             "bright river street at night morning picture painting").split()
    paths = []
    for s in range(0, len(images), per_shard):
        path = os.path.join(out_dir, "shard-%06d.tar" % (s // per_shard))
        paths.append(path)
        if os.path.exists(path):
            continue
        with tarfile.open(path + ".part", "w") as tar:
            for i, src in enumerate(images[s:s + per_shard], start=s):
                key = "%08d" % i
                tar.add(src, arcname=key + ".jpg")
                caption = " ".join(rng.choice(words) for _ in range(rng.randint(8, 35)))
                meta = {"width": rng.randint(200, 900), "height": rng.randint(200, 900),
                        "similarity": round(rng.random(), 4),
                        "url": "https://example.com/img/%d.jpg" % i}
                for ext, data in (("txt", caption.encode()), ("json", json.dumps(meta).encode())):
                    info = tarfile.TarInfo("%s.%s" % (key, ext))
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
        os.rename(path + ".part", path)
    return paths


def proc_cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def self_cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def consume(images, captions, metas, keys):
    """What a CLIP trainer touches: the image tensor and every text value."""
    assert images.shape[1:] == (3, SIZE, SIZE), images.shape
    n = images.shape[0]
    assert len(captions) == len(metas) == len(keys) == n
    chars = sum(len(c) for c in captions)
    sims = sum(m["similarity"] for m in metas)
    return n, chars, sims


# --------------------------------------------------------------- conveyord
def run_conveyord(conveyord, shards, threads, batches, warmup, startup=False):
    sys.path.insert(0, HERE)
    import daemon_proc
    import conveyor
    import torch
    self_cpu_at_start = self_cpu()
    with tempfile.TemporaryDirectory() as work:
        cfg = os.path.join(work, "conveyord.yaml")
        pipeline = {
            "dataset": {"shards": shards, "label_key": "", "shuffle_buffer": 1000},
            "augment": "train", "size": SIZE, "layout": "nchw", "dtype": "uint8",
            "max_batch_size": 1024,
            "fields": [{"name": "caption", "member": "txt", "type": "text", "max_bytes": 1024},
                       {"name": "meta", "member": "json", "type": "json", "max_bytes": 1024},
                       {"name": "key", "type": "key", "max_bytes": 64}]}
        with open(cfg, "w") as f:
            json.dump({"threads": threads, "log_level": "warn",
                       "pipelines": {"clip": pipeline}}, f)
        d = daemon_proc.DaemonProcess(conveyord, cfg, workdir=work, threads=threads)
        started = time.perf_counter()
        d.start()
        try:
            loader = conveyor.Loader(d.unix, pipeline="clip", batch_size=BATCH, seed=1)
            # Warm-up: the page cache and the daemon's buffers.
            with loader.stream(num_epochs=0) as stream:
                for i, b in enumerate(stream):
                    if i + 1 >= warmup:
                        break
            cpu0, mine0, t0 = proc_cpu_seconds(d.pid), self_cpu(), time.perf_counter()
            if startup:  # from the daemon's start: its index load and the warm-up count
                cpu0, mine0, t0 = 0.0, self_cpu_at_start, started
            n = 0
            with loader.stream(num_epochs=0) as stream:
                for i, b in enumerate(stream):
                    images = torch.from_numpy(b.images)
                    got = consume(images, list(b.fields["caption"]), list(b.fields["meta"]),
                                  list(b.fields["key"]))
                    n += got[0]
                    if i + 1 == batches:
                        break
            if startup:
                n += warmup * BATCH
            elapsed = time.perf_counter() - t0
            cpu = proc_cpu_seconds(d.pid) - cpu0 + self_cpu() - mine0
            loader.close()
        finally:
            d.stop()
    return n / elapsed, 1000 * cpu / n


# -------------------------------------------------------------- WebDataset
WDS_SIDE = r"""
import json, resource, sys, time
import torch, torchvision.transforms as T, webdataset as wds
shards, batches, batch, size = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
warmup = int(sys.argv[6])
startup = sys.argv[7] == "1"
start = time.perf_counter()
sys.path.insert(0, sys.argv[5])
from clip_vs_webdataset import consume

tf = T.Compose([T.RandomResizedCrop(size), T.RandomHorizontalFlip(), T.PILToTensor()])

def collate(samples):
    images, captions, metas, keys = zip(*samples)
    return torch.stack(images), list(captions), list(metas), list(keys)

def pipeline():
    ds = (wds.WebDataset(shards, shardshuffle=True, nodesplitter=None, empty_check=False)
          .repeat().shuffle(1000).decode("pil")
          .to_tuple("jpg", "txt", "json", "__key__").map_tuple(tf, None, None, None)
          .batched(batch, collation_fn=collate))
    return torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2, prefetch_factor=4)

def cpu():
    a = resource.getrusage(resource.RUSAGE_SELF)
    return a.ru_utime + a.ru_stime

cpu_at_start = cpu()  # after the imports, as on conveyord's side


def worker_cpu(loader_iter):
    total = 0.0
    for w in loader_iter._workers:
        with open("/proc/%d/stat" % w.pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / 100.0
    return total

it = iter(pipeline())
for _ in range(warmup):
    next(it)
w0, c0, t0 = worker_cpu(it), cpu(), time.perf_counter()
n = 0
if startup:  # from the DataLoader's creation: worker start-up and the warm-up count
    w0, c0, t0, n = 0.0, cpu_at_start, start, warmup * batch
for _ in range(batches):
    images, captions, metas, keys = next(it)
    n += consume(images, captions, metas, keys)[0]
elapsed = time.perf_counter() - t0
used = worker_cpu(it) - w0 + cpu() - c0
print(json.dumps({"rate": n / elapsed, "cpu_ms": 1000 * used / n}))
"""


def run_webdataset(python, shards, batches, warmup, startup=False):
    out = subprocess.run([python, "-c", WDS_SIDE, json.dumps(shards), str(batches), str(BATCH),
                          str(SIZE), HERE, str(warmup), "1" if startup else "0"],
                         capture_output=True, text=True, timeout=3600)
    if out.returncode != 0:
        raise RuntimeError("WebDataset side failed:\n" + out.stderr[-4000:])
    r = json.loads(out.stdout.strip().splitlines()[-1])
    return r["rate"], r["cpu_ms"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="an ImageFolder of JPEGs")
    ap.add_argument("--shards", required=True, help="where the shards are written (kept)")
    ap.add_argument("--per-shard", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2, help="daemon threads (WebDataset: 2 "
                    "DataLoader workers)")
    ap.add_argument("--batches", type=int, default=60, help="batches of 64 timed per round")
    ap.add_argument("--include-startup", action="store_true",
                    help="time from the daemon's start / the DataLoader's creation, warm-up "
                    "batches counted (default: after the warm-up)")
    ap.add_argument("--smoke", action="store_true", help="one round of 3 batches after 1 of "
                    "warm-up: checks that both sides run (tests/python/test_bench_smoke.py)")
    ap.add_argument("--conveyord", default=os.path.join(
        os.environ.get("CONVEYOR_BUILD_DIR", os.path.join(ROOT, "build")), "server", "conveyord"))
    args = ap.parse_args()
    warmup = 10
    if args.smoke:
        args.rounds, args.batches, warmup = 1, 3, 1

    shards = write_shards(folder_images(args.data), args.shards, args.per_shard)
    python = subprocess.run([os.path.join(ROOT, "scripts", "venv.sh"), "webdataset"],
                            capture_output=True, text=True, check=True).stdout.strip()
    print("%d shards, %d batches of %d per round, %d rounds" % (len(shards), args.batches,
                                                               BATCH, args.rounds))
    ours, theirs = [], []
    for r in range(args.rounds):
        ours.append(run_conveyord(args.conveyord, shards, args.threads, args.batches, warmup,
                                  args.include_startup))
        theirs.append(run_webdataset(python, shards, args.batches, warmup, args.include_startup))
        print("round %d: conveyord %.0f images/s %.2f CPU-ms/image | WebDataset+DataLoader(2) "
              "%.0f images/s %.2f CPU-ms/image" % (r, *ours[-1], *theirs[-1]), flush=True)
    rate = statistics.median(x[0] for x in ours)
    cpu = statistics.median(x[1] for x in ours)
    wrate = statistics.median(x[0] for x in theirs)
    wcpu = statistics.median(x[1] for x in theirs)
    print("conveyord (image+caption+json+key): %.0f images/s, %.2f CPU-ms/image" % (rate, cpu))
    print("WebDataset + DataLoader(2 workers): %.0f images/s, %.2f CPU-ms/image" % (wrate, wcpu))
    print("ratio: %.2fx the images/s at %.2fx the CPU per image (target >= 2x)"
          % (rate / wrate, cpu / wcpu))


if __name__ == "__main__":
    main()
