#!/usr/bin/python3
"""Node memory at ImageNet scale: R ranks of DataLoaders against R conveyor.Loaders on one daemon.

    /usr/bin/python3 bench/node_memory.py --data DIR [--layouts 4x2,8x4]
        [--entries 1281167] [--seconds 20] [--credits 2] [--credits-sweep 2,3,4]
        [--rounds 1] [--build DIR] [--json-out FILE] [--chart-out FILE]

The data: an ImageFolder tree of real JPEGs (--data; generated with
gen_imagenet_like.py when missing) and a list file of --entries entries
(1,281,167: ImageNet's train split) that cycle over its files, each with its
file's class.

For each layout R x W, one after the other, every set-up in fresh processes:
  idle        R trainers: a python that imported torch and waits. Their summed
              PSS is what the node pays without any loading.
  dataloader  R trainers, each: torch + torchvision, a DatasetFolder-style
              sample list [(full path, class)] of all entries built from the
              list file, DistributedSampler(num_replicas=R, rank=r,
              shuffle=True), DataLoader(batch_size=64, num_workers=W,
              persistent_workers=True) with RandomResizedCrop(224) +
              RandomHorizontalFlip + PILToTensor, consuming batches.
  conveyor-cC one conveyord (threads = R x W, the DataLoaders' worker count)
              serving a list-file pipeline over the same list (train, 224,
              uint8 NCHW), and R trainers, each torch + conveyor.Loader(rank=r,
              world_size=R, batch_size=64, credits=C), consuming batches
              (torch.from_numpy on each, as a trainer hands it on). One set-up
              per C of --credits-sweep (the client's default first).
Every trainer sets up, takes its first batch, says "ready" and waits; when
all are ready the driver says "go", they consume for --seconds and report
images and the time they waited for batches. The driver samples the summed
PSS of every process (trainers, their DataLoader workers, the daemon) every
0.5 s from the first start to the last exit. "Loading adds" = peak summed
PSS of the set-up - summed PSS of the R idle trainers (median of 5
readings). Both sides pay their imports: torchvision + PIL for the
DataLoader, grpcio + the client for conveyor. "adds(a+s)" is the same
difference over the anonymous + shared-memory part of PSS alone: the file
part (torch's libraries) moves with how many other processes on the
machine map the same files, which makes the idle baseline move by tens of
MiB from run to run on a shared machine.

--step-ms S makes every trainer sleep S ms per batch (a GPU step): the
"waited" share then says whether the loader kept the trainer fed.
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
sys.path.insert(0, HERE)

from proc_sampler import PssSampler, now, pss_rollup, settle  # noqa: E402

MiB = 1024.0 * 1024.0
BATCH = 64
STATS = {}  # in a conveyor trainer: "stream", for its copied_batches


# --------------------------------------------------------------- the data

def real_files(root):
    """[(relative path, label)] of the ImageFolder tree, classes sorted."""
    classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    out = []
    for label, c in enumerate(classes):
        for name in sorted(os.listdir(os.path.join(root, c))):
            if name.lower().endswith((".jpg", ".jpeg")):
                out.append(("%s/%s" % (c, name), label))
    return out


def write_list(path, files, entries):
    """entries lines `relative/path<TAB>label` cycling over files."""
    n = len(files)
    with open(path, "w") as f:
        buf = []
        for i in range(entries):
            rel, label = files[i % n]
            buf.append("%s\t%d\n" % (rel, label))
            if len(buf) >= 65536:
                f.writelines(buf)
                buf.clear()
        f.writelines(buf)


# --------------------------------------------------------------- trainers
# `node_memory.py _trainer --mode idle|dataloader|conveyor ...`: prints
# "ready" after its first batch, waits for "go" on stdin, consumes for
# --seconds, prints one JSON line, waits for stdin to close.

def trainer_main(argv):
    ap = argparse.ArgumentParser(prog="node_memory.py _trainer")
    ap.add_argument("--mode", required=True, choices=["idle", "dataloader", "conveyor"])
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--world", type=int, default=1)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--list")
    ap.add_argument("--root")
    ap.add_argument("--address")
    ap.add_argument("--pipeline", default="imagenet")
    ap.add_argument("--credits", type=int, default=0, help="0: the client's default")
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--step-ms", type=float, default=0)
    a = ap.parse_args(argv)

    import torch

    t_start = time.monotonic()
    batches = None
    if a.mode == "dataloader":
        batches = dataloader_batches(a, torch)
    elif a.mode == "conveyor":
        batches = conveyor_batches(a, torch)
    first_s = None
    if batches is not None:
        next(batches)
        first_s = time.monotonic() - t_start
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        return 0
    images = 0
    waited = 0.0
    t0 = time.monotonic()
    if batches is not None:
        while time.monotonic() - t0 < a.seconds:
            w0 = time.monotonic()
            images += next(batches)
            waited += time.monotonic() - w0
            if a.step_ms:
                time.sleep(a.step_ms / 1000.0)
    else:
        time.sleep(a.seconds)
    wall = time.monotonic() - t0
    print(json.dumps({"rank": a.rank, "images": images, "seconds": wall, "waited_s": waited,
                      "first_batch_s": first_s,
                      "copied_batches": getattr(STATS.get("stream"), "copied_batches", None)}),
          flush=True)
    sys.stdin.readline()  # the driver closes stdin once it stopped sampling
    return 0


def dataloader_batches(a, torch):
    from torch.utils.data import DataLoader, Dataset
    from torch.utils.data.distributed import DistributedSampler
    from torchvision import transforms
    from torchvision.datasets.folder import default_loader

    class ListDataset(Dataset):
        """What torchvision's DatasetFolder keeps: samples [(path, class)], targets."""

        def __init__(self, samples, transform):
            self.samples = samples
            self.targets = [s[1] for s in samples]
            self.transform = transform

        def __len__(self):
            return len(self.samples)

        def __getitem__(self, i):
            path, target = self.samples[i]
            return self.transform(default_loader(path)), target

    samples = []
    join = os.path.join
    with open(a.list) as f:
        for line in f:
            rel, _, label = line.rstrip("\n").partition("\t")
            samples.append((join(a.root, rel), int(label)))
    tf = transforms.Compose([transforms.RandomResizedCrop(224), transforms.RandomHorizontalFlip(),
                             transforms.PILToTensor()])
    ds = ListDataset(samples, tf)
    sampler = DistributedSampler(ds, num_replicas=a.world, rank=a.rank, shuffle=True, seed=0)
    dl = DataLoader(ds, batch_size=BATCH, sampler=sampler, num_workers=a.workers,
                    persistent_workers=True, drop_last=True)
    epoch = 0
    while True:
        sampler.set_epoch(epoch)
        for images, labels in dl:
            yield images.shape[0]
        epoch += 1


def conveyor_batches(a, torch):
    sys.path.insert(0, os.path.join(SOURCE_DIR, "client", "python"))
    import conveyor

    kw = {"credits": a.credits} if a.credits else {}
    loader = conveyor.Loader(a.address, pipeline=a.pipeline, batch_size=BATCH, rank=a.rank,
                             world_size=a.world, **kw)
    with loader.stream(0) as stream:
        STATS["stream"] = stream
        for batch in stream:
            images = torch.from_numpy(batch.images)
            labels = torch.from_numpy(batch.labels)
            n = images.shape[0] + 0 * labels.shape[0]
            del images, labels
            yield n


# --------------------------------------------------------------- driver

class Trainers:
    """R trainer processes of one set-up, started together."""

    def __init__(self, args, mode, world, extra):
        self.procs = []
        for r in range(world):
            cmd = [sys.executable, os.path.abspath(__file__), "_trainer", "--mode", mode,
                   "--rank", str(r), "--world", str(world), "--seconds", str(args.seconds),
                   "--step-ms", str(args.step_ms)] + extra
            self.procs.append(subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                               text=True))

    def pids(self):
        return [p.pid for p in self.procs]

    def expect(self, word, timeout):
        deadline = time.monotonic() + timeout
        for p in self.procs:
            line = p.stdout.readline()
            if line.strip() != word:
                raise RuntimeError("trainer %d said %r, not %r (exit %s)"
                                   % (p.pid, line, word, p.poll()))
            if time.monotonic() > deadline:
                raise RuntimeError("trainers not %s after %.0f s" % (word, timeout))

    def go(self):
        for p in self.procs:
            p.stdin.write("go\n")
            p.stdin.flush()

    def results(self):
        return [json.loads(p.stdout.readline()) for p in self.procs]

    def close(self):
        for p in self.procs:
            try:
                p.stdin.close()
            except OSError:
                pass
        for p in self.procs:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def mapping_breakdown(pid):
    """PSS of a process by kind of mapping, from /proc/PID/smaps: memfd
    (the batch slots), heap (malloc's main arena), arenas (malloc's
    per-thread heaps: anonymous, 64 MiB-aligned), stacks (anonymous 8 MiB
    thread stacks), other-anon (mmap'd blocks: large allocations, the
    index), files. {} if the process is gone."""
    out = dict.fromkeys(("memfd", "heap", "arenas", "stacks", "other-anon", "files"), 0)
    kind = None
    try:
        with open("/proc/%d/smaps" % pid) as f:
            for line in f:
                head = line.split(None, 6)
                if "-" in head[0] and len(head) >= 5 and ":" in head[3]:
                    start, end = (int(x, 16) for x in head[0].split("-"))
                    path = head[5].strip() if len(head) > 5 else ""
                    if "memfd:" in path:
                        kind = "memfd"
                    elif path == "[heap]":
                        kind = "heap"
                    elif path.startswith("/"):
                        kind = "files"
                    elif path == "" and start % (64 << 20) == 0:
                        kind = "arenas"
                    elif path == "" and abs(end - start - (8 << 20)) <= 64 << 10:
                        kind = "stacks"
                    else:
                        kind = "other-anon"
                elif head[0] == "Pss:" and kind:
                    out[kind] += int(head[1]) * 1024
    except OSError:
        return {}
    return out


def snapshot_processes(roots):
    """[{pid, name, pss, anon, file, shmem}] of every process of the trees now
    (conveyord's with its mapping_breakdown)."""
    from proc_sampler import process_tree
    out = []
    for pid in sorted({p for r in roots for p in process_tree(r)}):
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        name = os.path.basename(argv[0].decode(errors="replace"))
        if b"--mode" in argv:
            name = "trainer-" + argv[argv.index(b"--mode") + 1].decode()
            if pid not in roots:
                name = "dataloader-worker"
        out.append(dict(pid=pid, name=name, **pss_rollup(pid)))
        if name == "conveyord":
            out[-1]["mappings"] = mapping_breakdown(pid)
    return out


def idle_baseline(args, world):
    t = Trainers(args, "idle", world, [])
    try:
        t.expect("ready", 300)
        time.sleep(2)
        readings, private = [], []
        for _ in range(5):
            rollups = [pss_rollup(pid) for pid in t.pids()]
            readings.append(sum(r["pss"] for r in rollups))
            private.append(sum(r["anon"] + r["shmem"] for r in rollups))
            time.sleep(0.5)
        t.go()
        t.results()
    finally:
        t.close()
    settle(t.pids(), 2)
    return statistics.median(readings), statistics.median(private)


def private_bytes(rollup):
    """The anonymous + shared-memory part of a PSS rollup: what the set-up
    itself owns. The file part (libraries, torch's .so files) moves with how
    many other processes on the machine map the same files; this does not."""
    return rollup["anon"] + rollup["shmem"]


def measure(args, mode, world, extra, daemon_pid=None):
    """Runs one set-up; returns its peak summed PSS (with breakdown) and the trainers' figures."""
    t = Trainers(args, mode, world, extra)
    roots = t.pids() + ([daemon_pid] if daemon_pid else [])
    sampler = PssSampler(roots, interval=0.5, rescan=1.0)
    sampler.start()
    try:
        t.expect("ready", args.timeout)
        t.go()
        time.sleep(args.seconds / 2)
        snapshot = snapshot_processes(roots)
        res = t.results()
    finally:
        sampler.stop()
        t.close()
    if daemon_pid is None:
        settle(sorted(sampler.seen), 2)
    peak = sampler.peak_sample()
    peak_private = max((private_bytes(smp[3]) for smp in sampler.samples), default=0)
    images = sum(r["images"] for r in res)
    seconds = max(r["seconds"] for r in res)
    return {"peak": peak, "peak_private_bytes": peak_private,
            "processes": peak["processes"] if peak else 0, "trainers": res,
            "mid_run_processes": snapshot,
            "images": images, "images_per_s": images / seconds if seconds else 0,
            "waited_share": sum(r["waited_s"] for r in res) / sum(r["seconds"] for r in res)}


def run_layout(args, world, workers, list_path):
    out = {"ranks": world, "workers": workers, "sets": {}}
    base, base_private = idle_baseline(args, world)
    out["idle_pss_bytes"] = base
    out["idle_private_bytes"] = base_private
    print("  %dx%d idle trainers: %.0f MiB" % (world, workers, base / MiB), file=sys.stderr, flush=True)

    def add(name, m):
        m["adds_bytes"] = m["peak"]["pss"] - base
        m["adds_private_bytes"] = m["peak_private_bytes"] - base_private
        out["sets"][name] = m
        print("  %dx%d %-14s peak %.0f MiB (%d processes), adds %.0f MiB; %.0f images/s, waited %.0f%%"
              % (world, workers, name, m["peak"]["pss"] / MiB, m["processes"], m["adds_bytes"] / MiB,
                 m["images_per_s"], 100 * m["waited_share"]), file=sys.stderr, flush=True)

    for rnd in range(args.rounds):
        sfx = "" if args.rounds == 1 else "#%d" % rnd
        if "dataloader" in args.only:
            add("dataloader" + sfx, measure(args, "dataloader", world,
                                            ["--workers", str(workers), "--list", list_path,
                                             "--root", args.data]))
        for c in args.credits_list if "conveyor" in args.only else []:
            add("conveyor-c%d%s" % (c, sfx), measure_conveyor(args, world, workers, list_path, c))
    return out


def measure_conveyor(args, world, workers, list_path, credits):
    import daemon_proc

    folder = tempfile.mkdtemp(prefix="cvnm-", dir="/tmp")
    d = daemon_proc.daemon(os.path.join(args.build, "server", "conveyord"), folder,
                           world * workers, {"list": list_path, "root": args.data},
                           name="imagenet")
    try:
        d.start(timeout=120)
        m = measure(args, "conveyor", world,
                    ["--address", d.address, "--credits", str(credits)], daemon_pid=d.pid)
        m["daemon_threads"] = world * workers
        m["credits"] = credits
    finally:
        d.stop()
        shutil.rmtree(folder, ignore_errors=True)
    settle([d.pid], 2)
    return m


def chart(result, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layouts = result["layouts"]
    names = []
    for lay in layouts:
        for n in lay["sets"]:
            if n not in names:
                names.append(n)
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.8 / len(names)
    for i, n in enumerate(names):
        xs = [j + i * width for j in range(len(layouts))]
        ys = [lay["sets"][n]["adds_bytes"] / MiB if n in lay["sets"] else 0 for lay in layouts]
        bars = ax.bar(xs, ys, width, label=n)
        for b, y in zip(bars, ys):
            ax.text(b.get_x() + b.get_width() / 2, y, "%.0f" % y, ha="center", va="bottom", fontsize=7)
    ax.set_xticks([j + width * (len(names) - 1) / 2 for j in range(len(layouts))])
    ax.set_xticklabels(["%d ranks x %d workers" % (lay["ranks"], lay["workers"]) for lay in layouts])
    ax.set_ylabel("MiB added (peak summed PSS - idle)")
    ax.set_title("Node memory, 1,281,167-entry list dataset")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 2)[2],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="ImageFolder tree of JPEGs (generated if missing)")
    ap.add_argument("--images", type=int, default=200, help="images to generate when --data is missing")
    ap.add_argument("--entries", type=int, default=1281167)
    ap.add_argument("--layouts", default="4x2,8x4", help="RxW,... ranks x DataLoader workers")
    ap.add_argument("--seconds", type=float, default=20, help="consuming time per set-up")
    ap.add_argument("--step-ms", type=float, default=0, help="sleep per batch in every trainer")
    ap.add_argument("--credits-sweep", default="", help="credits per conveyor set-up, e.g. 2,3,4 "
                    "(default: the client's default alone)")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--only", default="dataloader,conveyor", help="set-ups to run besides idle")
    ap.add_argument("--build", default=os.environ.get("CONVEYOR_BUILD_DIR",
                                                      os.path.join(SOURCE_DIR, "build")))
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--json-out", default=os.path.join(SOURCE_DIR, "bench", "results",
                                                       "node_memory.json"))
    ap.add_argument("--chart-out")
    args = ap.parse_args(argv)
    args.data = os.path.abspath(args.data)
    args.credits_list = [int(c) for c in args.credits_sweep.split(",") if c.strip()] or [0]
    layouts = []
    for spec in args.layouts.split(","):
        r, _, w = spec.strip().partition("x")
        layouts.append((int(r), int(w)))

    if not os.path.isdir(args.data):
        subprocess.run([sys.executable, os.path.join(HERE, "gen_imagenet_like.py"), "--out",
                        args.data, "--images", str(args.images), "--classes", "10", "--seed", "5"],
                       check=True)
    files = real_files(args.data)
    if not files:
        raise SystemExit("no JPEGs under %s" % args.data)
    workdir = tempfile.mkdtemp(prefix="cvnm-", dir="/tmp")
    try:
        list_path = os.path.join(workdir, "train_list.txt")
        write_list(list_path, files, args.entries)
        result = {"entries": args.entries, "files": len(files), "seconds": args.seconds,
                  "step_ms": args.step_ms, "cpus": os.cpu_count(), "batch_size": BATCH,
                  "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "layouts": []}
        for world, workers in layouts:
            print("layout %d ranks x %d workers" % (world, workers), file=sys.stderr, flush=True)
            result["layouts"].append(run_layout(args, world, workers, list_path))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    print("")
    print("Memory the loading adds to the node (peak summed PSS - R idle torch trainers), "
          "%d entries cycling over %d files, batch %d, %.0f s per set-up"
          % (args.entries, len(files), BATCH, args.seconds))
    print("%-7s %-16s %10s %10s %9s %12s %9s %11s %8s %7s" % (
        "R x W", "set-up", "peak PSS", "adds", "x DL", "adds(a+s)", "x DL", "images/s", "waited",
        "procs"))
    for lay in result["layouts"]:
        dl = lay["sets"].get("dataloader", {}).get("adds_bytes")
        dl_private = lay["sets"].get("dataloader", {}).get("adds_private_bytes")
        for name, m in lay["sets"].items():
            print("%-7s %-16s %8.0f MiB %6.0f MiB %9s %8.0f MiB %9s %11.0f %7.0f%% %7d" % (
                "%dx%d" % (lay["ranks"], lay["workers"]), name, m["peak"]["pss"] / MiB,
                m["adds_bytes"] / MiB, "%.3f" % (m["adds_bytes"] / dl) if dl else "n/a",
                m["adds_private_bytes"] / MiB,
                "%.3f" % (m["adds_private_bytes"] / dl_private) if dl_private else "n/a",
                m["images_per_s"], 100 * m["waited_share"], m["processes"]))
    print("adds(a+s): the same difference over the anonymous + shared-memory part of PSS alone "
          "(what the set-up owns; the file part moves with other processes mapping the same "
          "libraries)")
    if args.json_out:
        os.makedirs(os.path.dirname(os.path.abspath(args.json_out)), exist_ok=True)
        with open(args.json_out, "w") as f:
            json.dump(result, f, indent=2)
        print("wrote %s" % args.json_out)
    if args.chart_out:
        chart(result, args.chart_out)
        print("wrote %s" % args.chart_out)
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_trainer":
        sys.exit(trainer_main(sys.argv[2:]))
    sys.exit(main(sys.argv[1:]))
