#!/usr/bin/python3
"""Conveyor vs PyTorch DataLoader: images/s, CPU per image, memory, time to first batch.

    /usr/bin/python3 bench/vs_dataloader.py --data DIR [--images 2000] [--build DIR]
        [--epochs 3] [--warmup-epochs 1] [--rounds 3] [--workers 1,2,NCORES]
        [--threads NCORES] [--batch-size 64] [--credits 4] [--credits-sweep 1,2]
        [--json-out FILE.json] [--chart-out FILE.png] [--only KINDS] [--quick]
        [--format jpeg|png|webp]

The same work for every contender, on an ImageFolder tree of JPEGs (made with
bench/gen_imagenet_like.py when DIR does not exist; --format png or webp
makes it of PNG or lossy WebP files instead, the same pixels): read -> decode ->
RandomResizedCrop(224) -> RandomHorizontalFlip -> uint8 CHW, batches of 64,
shuffled, timed full epochs after a warm-up epoch (files in the page cache).

Contenders (each in its own process tree, started fresh for every round):
  dataloader-wN   torchvision ImageFolder + RandomResizedCrop(224) +
                  RandomHorizontalFlip() + PILToTensor(), torch DataLoader with
                  num_workers=N, persistent_workers=True, shuffle=True
                  (N = each of --workers; default 1, 2 and the core count)
  conveyord-unix  conveyord (--threads = core count) + the Python client
                  (conveyor.Loader) over the unix socket (shared memory)
  conveyord-tcp   the same over TCP on 127.0.0.1 (the client's default there:
                  batch headers over gRPC, image bytes on the daemon's data
                  socket)
  conveyord-tcp-inline  (only with --only ...,tcp-inline) TCP with the image
                  bytes inside the gRPC messages (transport="inline")
  conveyord-unix-cN  (with --credits-sweep N,...) conveyord-unix with N
                  credits instead of --credits: memory against prefetch depth
  ceiling         build/bench/ceiling_bench: the engine in one process, no
                  daemon, no gRPC, no Python (the upper bound)
Rounds run the contenders alternately (A B C ... A B C ...) so that machine
drift affects all of them alike; before the next one starts, every process
of the previous one must be gone, then --settle s (2) pass (a DataLoader's
teardown otherwise lands on whoever runs next).

What is measured, per contender run:
  images/s        per timed epoch: images / wall time from asking for the
                  epoch's iterator to holding its last batch; the consumer
                  reads the labels and the batch shape and drops the batch
                  (no pixel is touched on either side, as a trainer that hands
                  the tensor to the GPU). Median and min-max over all timed
                  epochs of all rounds.
  CPU s/image     utime+stime (+cutime+cstime, so reaped children count) of
                  every process of the tree (runner + DataLoader workers;
                  client + conveyord), read from /proc/PID/stat by the runner
                  right before and after each epoch. Ceiling: its own figure.
  peak PSS        the sum of `Pss:` of /proc/PID/smaps_rollup over every
                  process of the tree, sampled by this driver every
                  --pss-interval s (and by the runner at each epoch end); the
                  peak of the sum over the epochs (its anonymous / file /
                  shmem parts are kept in the JSON: file-backed pages of
                  shared libraries are shared with any other process on the
                  machine that maps them, so that part moves with the load).
  TTFB            cold start to first batch in hand, measured from the
                  moment this driver spawns the contender's process (so the
                  Python start-up and imports count on both sides):
                  DataLoader: a fresh python that imports torch, builds the
                  ImageFolder and the DataLoader and takes the first batch;
                  conveyord: a fresh python that imports the client, launches
                  conveyord through conveyor.daemon (the launcher a trainer
                  would use), waits for the gRPC health check to say
                  SERVING, opens a Loader and takes the first batch (the
                  time from the conveyord launch and to SERVING are
                  reported too). Median over rounds.
  checksum        (--checksum, on with --quick) sha256 of each epoch's image
                  bytes in delivery order, per conveyord contender: equal
                  across transports, and to the in-process engine's for the
                  same seed (tests/python/test_bench_smoke.py checks both).

Ratios are taken against dataloader-w2; targets (PASS/FAIL):
  conveyord-unix images/s >= 2.5x, CPU s/image <= 0.45x, summed PSS <= 0.2x,
  TTFB <= 0.2x; conveyord-unix >= 95% of the ceiling's images/s,
  conveyord-tcp >= 80% - taken per round (the contender / the ceiling of
  the same round, minutes apart) and the median of those, so that drift
  between rounds cancels; the ratio of the overall medians is printed too.

--quick is a smoke mode (used by tests/python/test_bench_smoke.py): one round,
one epoch per contender, no warm-up, checksums on; the speed figures mean
nothing (the smoke test checks counts, consistency and bytes, not speed).
"""

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

# bench/, the folder of this script. (daemon_proc, which imports the conveyor
# client, is imported by the conveyor contender only: the DataLoader
# contender's process must not load gRPC.)
from proc_sampler import PssSampler, now, settle, tree_cpu_seconds, tree_rollup

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.path.dirname(HERE)
BASELINE = "dataloader-w2"
KINDS = ("dataloader", "unix", "tcp", "tcp-inline", "ceiling")
DEFAULT_KINDS = ("dataloader", "unix", "tcp", "ceiling")


# --------------------------------------------------------------- contender runners
# Run as `vs_dataloader.py _contender KIND ...` in a fresh process; print one
# JSON object per line on stdout (events), everything else on stderr.

def emit(**kw):
    sys.stdout.write(json.dumps(kw) + "\n")
    sys.stdout.flush()


def run_epochs(make_iter, args, first_epoch_event):
    """Warm-up + timed epochs over make_iter(epoch) (an iterable of
    (images, labels) pairs); emits one 'epoch' event each."""
    me = os.getpid()
    first = True
    for e in range(args.warmup_epochs + args.epochs):
        cpu0 = tree_cpu_seconds(me)
        t0 = now()
        images = batches = 0
        for imgs, labels in make_iter(e):
            if first:
                first = False
                first_epoch_event(now(), imgs)
            images += int(labels.shape[0])
            batches += 1
        t1 = now()
        cpu1 = tree_cpu_seconds(me)
        roll = tree_rollup(me)
        emit(event="epoch", epoch=e, warmup=e < args.warmup_epochs, images=images,
             batches=batches, t0=t0, t1=t1, seconds=t1 - t0, cpu_s=cpu1 - cpu0,
             pss_bytes=roll["pss"], processes=roll["processes"], rollup=roll)


def contender_dataloader(args):
    import torch
    from torch.utils.data import DataLoader
    from torchvision import datasets, transforms

    torch.manual_seed(args.seed)
    tf = transforms.Compose([transforms.RandomResizedCrop(args.size),
                             transforms.RandomHorizontalFlip(),
                             transforms.PILToTensor()])
    ds = datasets.ImageFolder(args.data, transform=tf)
    dl = DataLoader(ds, batch_size=args.batch_size, shuffle=True, num_workers=args.workers,
                    persistent_workers=args.workers > 0)

    def first(t, imgs):
        emit(event="first_batch", t=t, shape=list(imgs.shape), dtype=str(imgs.dtype))

    run_epochs(lambda e: dl, args, first)
    emit(event="done", samples=len(ds))


def contender_conveyor(args):
    import shutil

    import daemon_proc  # the launcher (conveyor.daemon) with the bench's config
    import conveyor
    workdir = tempfile.mkdtemp(prefix="cvd-", dir="/tmp")  # short: unix socket paths
    daemon = daemon_proc.daemon(args.conveyord, workdir, args.threads,
                                {"root": os.path.abspath(args.data)},
                                via="unix" if args.transport == "unix" else "tcp",
                                size=args.size, max_batch_size=max(args.batch_size, 256))
    try:
        daemon.start(timeout=60)
        t_launch, t_serving = daemon.launched_at, daemon.serving_at  # CLOCK_MONOTONIC, as now()
        emit(event="serving", t=t_serving, t_launch=t_launch, address=daemon.address,
             daemon_pid=daemon.pid)

        loader = conveyor.Loader(daemon.address, pipeline="bench", batch_size=args.batch_size,
                                 seed=args.seed, credits=args.credits,
                                 transport="inline" if args.transport == "tcp-inline" else "auto")
        transport = []
        digests = []

        def epoch_iter(e):
            digest = hashlib.sha256() if args.checksum else None
            with loader.epoch(e) as stream:
                if not transport:
                    transport.append(stream.transport)
                for batch in stream:
                    if digest is not None:
                        digest.update(batch.images.tobytes())
                    yield batch.images, batch.labels
            if digest is not None:
                digests.append({"epoch": e, "sha256": digest.hexdigest()})

        def first(t, imgs):
            emit(event="first_batch", t=t, shape=list(imgs.shape), dtype=str(imgs.dtype),
                 t_launch=t_launch, t_serving=t_serving)

        try:
            run_epochs(epoch_iter, args, first)
        finally:
            loader.close()
        emit(event="done", transport=transport[0] if transport else None, checksums=digests)
    finally:
        daemon.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def contender_main(argv):
    ap = argparse.ArgumentParser(prog="vs_dataloader.py _contender")
    ap.add_argument("kind", choices=("dataloader", "conveyor"))
    ap.add_argument("--data", required=True)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--transport", choices=("unix", "tcp", "tcp-inline"), default="unix")
    ap.add_argument("--conveyord")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--credits", type=int, default=4)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--warmup-epochs", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--checksum", action="store_true",
                    help="sha256 of each epoch's image bytes (conveyor only; touches every pixel)")
    args = ap.parse_args(argv)
    if args.kind == "dataloader":
        contender_dataloader(args)
    else:
        contender_conveyor(args)
    return 0


# --------------------------------------------------------------- driver

def parse_events(text):
    events = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                events.append(json.loads(line))
            except ValueError:
                pass
    return events


def run_python_contender(c, args, workdir):
    cmd = [sys.executable, os.path.abspath(__file__), "_contender", c["runner"],
           "--data", args.data, "--batch-size", str(args.batch_size), "--size", str(args.size),
           "--epochs", str(args.epochs), "--warmup-epochs", str(args.warmup_epochs),
           "--seed", str(args.seed), "--credits", str(c.get("credits", args.credits)),
           "--threads", str(args.threads)]
    if c["runner"] == "dataloader":
        cmd += ["--workers", str(c["workers"])]
    else:
        cmd += ["--transport", c["transport"], "--conveyord", args.conveyord]
        if args.checksum:
            cmd.append("--checksum")
    return measure_contender(cmd, c, args, workdir)


def measure_contender(cmd, c, args, workdir):
    """Runs a contender process (cmd prints run_epochs' events), samples the
    PSS of its tree, waits for it all to be gone, and returns its figures;
    shared with bench/vs_peers.py, whose peers run in other interpreters."""
    err_path = os.path.join(workdir, "%s.stderr" % c["name"])
    with open(err_path, "w") as err:
        t_spawn = now()
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
        sampler = PssSampler(p.pid, interval=args.pss_interval)
        sampler.start()
        try:
            out, _ = p.communicate(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
            p.returncode = -9
        finally:
            sampler.stop()
    events = parse_events(out)
    settle(sampler.seen | {p.pid} | {e["daemon_pid"] for e in events if "daemon_pid" in e},
           args.settle)
    errtext = open(err_path, errors="replace").read()
    if p.returncode != 0:
        raise RuntimeError("%s exited with %d:\n%s" % (c["name"], p.returncode, errtext[-4000:]))
    epochs = [e for e in events if e.get("event") == "epoch"]
    fb = next((e for e in events if e.get("event") == "first_batch"), None)
    done = next((e for e in events if e.get("event") == "done"), {})
    if not epochs or fb is None:
        raise RuntimeError("%s printed no epochs:\n%s\n%s" % (c["name"], out[-2000:], errtext[-2000:]))
    timed = [e for e in epochs if not e["warmup"]]
    t_first_epoch, t_last = epochs[0]["t0"], epochs[-1]["t1"]
    candidates = [sampler.peak_sample(t_first_epoch, t_last)] + [e.get("rollup") for e in epochs]
    candidates = [x for x in candidates if x and x["pss"]]
    peak = max(candidates, key=lambda x: x["pss"]) if candidates else None
    run = {
        "epochs": [{"epoch": e["epoch"], "images": e["images"], "batches": e["batches"],
                    "seconds": e["seconds"], "images_per_s": e["images"] / e["seconds"],
                    "cpu_s": e["cpu_s"], "cpu_s_per_image": e["cpu_s"] / max(1, e["images"]),
                    "pss_bytes_at_end": e["pss_bytes"], "processes": e["processes"]}
                   for e in timed],
        "ttfb_s": fb["t"] - t_spawn,
        "first_batch_shape": fb.get("shape"),
        "first_batch_dtype": fb.get("dtype"),
        "peak_pss_bytes": peak["pss"] if peak else None,
        "peak_pss_breakdown": peak,
        "pss_samples": len(sampler.samples),
        "max_processes": max([s[2] for s in sampler.samples] + [e["processes"] for e in epochs]),
        "stderr_tail": errtext[-1000:] if errtext.strip() else "",
        "done": done,
    }
    ids = [{"epoch": e["epoch"], "ids": e["ids"]} for e in events if e.get("event") == "ids"]
    if ids:  # vs_peers.py --ids: the dataset indices each epoch delivered
        run["ids"] = ids
    if c["runner"] == "conveyor":
        run["ttfb_from_daemon_launch_s"] = fb["t"] - fb["t_launch"]
        run["daemon_launch_s"] = fb["t_launch"] - t_spawn
        run["serving_s"] = fb["t_serving"] - t_spawn
        run["transport"] = done.get("transport")
        run["checksums"] = done.get("checksums") or []
    return run


def run_ceiling(c, args, workdir):
    cmd = [args.ceiling, "--root", args.data, "--threads", str(args.threads),
           "--batch-size", str(args.batch_size), "--epochs", str(args.epochs),
           "--warmup-epochs", str(args.warmup_epochs), "--size", str(args.size),
           "--credits", str(args.credits), "--augment", getattr(args, "augment", "train"), "--json"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sampler = PssSampler(p.pid, interval=args.pss_interval)
    sampler.start()
    try:
        out, err = p.communicate(timeout=args.timeout)
    finally:
        sampler.stop()
        settle(sampler.seen | {p.pid}, args.settle)
    if p.returncode != 0:
        raise RuntimeError("ceiling_bench exited with %d:\n%s" % (p.returncode, err[-4000:]))
    line = [ln for ln in out.splitlines() if ln.strip().startswith("{")][-1]
    j = json.loads(line)
    return {"images_per_s": j["images_per_s"], "images_per_s_min": j["images_per_s_min"],
            "images_per_s_max": j["images_per_s_max"],
            "cpu_s_per_image": j["cpu_ms_per_image"] / 1000.0,
            "peak_pss_bytes": sampler.peak(), "peak_pss_breakdown": sampler.peak_sample(),
            "pss_samples": len(sampler.samples),
            "ttfb_s": None, "raw": j}


def summarize(c, runs):
    """Median / min / max over all timed epochs of all rounds."""
    # Each round's own figure (the median of its epochs), for paired ratios.
    per_round = {str(r["round"]): (r["images_per_s"] if c["kind"] == "ceiling" else
                                   statistics.median(e["images_per_s"] for e in r["epochs"]))
                 for r in runs}
    if c["kind"] == "ceiling":
        ips = [r["images_per_s"] for r in runs]
        lo = min(r["images_per_s_min"] for r in runs)
        hi = max(r["images_per_s_max"] for r in runs)
        cpu = [r["cpu_s_per_image"] for r in runs]
    else:
        eps = [e for r in runs for e in r["epochs"]]
        ips = [e["images_per_s"] for e in eps]
        lo, hi = min(ips), max(ips)
        cpu = [e["cpu_s_per_image"] for e in eps]
    pss = [r["peak_pss_bytes"] for r in runs if r["peak_pss_bytes"]]
    anon = [r["peak_pss_breakdown"]["anon"] for r in runs if r.get("peak_pss_breakdown")]
    ttfb = [r["ttfb_s"] for r in runs if r.get("ttfb_s") is not None]
    s = {"images_per_s": statistics.median(ips), "images_per_s_min": lo, "images_per_s_max": hi,
         "timed_epochs": len(ips),
         "cpu_s_per_image": statistics.median(cpu),
         "peak_pss_bytes": statistics.median(pss) if pss else None,
         "peak_pss_bytes_max": max(pss) if pss else None,
         "peak_pss_anon_bytes": statistics.median(anon) if anon else None,
         "ttfb_s": statistics.median(ttfb) if ttfb else None,
         "ttfb_s_min": min(ttfb) if ttfb else None, "ttfb_s_max": max(ttfb) if ttfb else None,
         "round_images_per_s": per_round}
    if c["kind"] == "ceiling":
        s["timed_epochs"] = len(runs) * runs[0]["raw"].get("epochs", 0)
    if c["runner"] == "conveyor":
        s["ttfb_from_daemon_launch_s"] = statistics.median(r["ttfb_from_daemon_launch_s"] for r in runs)
        s["serving_s"] = statistics.median(r["serving_s"] for r in runs)
        s["transport"] = runs[0].get("transport")
    return s


def ratio(a, b):
    return a / b if a is not None and b not in (None, 0) else None


def fmt(v, spec, none="n/a"):
    return none if v is None else format(v, spec)


def evaluate(summary):
    """Ratios against the baseline and the targets."""
    base = summary.get(BASELINE)
    ratios = {}
    for name, s in summary.items():
        if base is None:
            break
        ratios[name] = {"images_per_s": ratio(s["images_per_s"], base["images_per_s"]),
                        "cpu_s_per_image": ratio(s["cpu_s_per_image"], base["cpu_s_per_image"]),
                        "peak_pss": ratio(s["peak_pss_bytes"], base["peak_pss_bytes"]),
                        "ttfb": ratio(s["ttfb_s"], base["ttfb_s"])}
    targets = []

    def target(what, value, op, limit, unit="x"):
        ok = None if value is None else (value >= limit if op == ">=" else value <= limit)
        targets.append({"target": what, "value": value, "op": op, "limit": limit, "unit": unit,
                        "result": "n/a" if ok is None else ("PASS" if ok else "FAIL")})

    u = "conveyord-unix"
    if u in ratios:
        target("%s images/s vs %s" % (u, BASELINE), ratios[u]["images_per_s"], ">=", 2.5)
        target("%s CPU s/image vs %s" % (u, BASELINE), ratios[u]["cpu_s_per_image"], "<=", 0.45)
        target("%s summed PSS vs %s" % (u, BASELINE), ratios[u]["peak_pss"], "<=", 0.2)
        target("%s time to first batch vs %s" % (u, BASELINE), ratios[u]["ttfb"], "<=", 0.2)
    ceil = summary.get("ceiling")
    if ceil is not None:
        for name, limit in (("conveyord-unix", 0.95), ("conveyord-tcp", 0.80)):
            if name in summary:
                paired = paired_ratios(summary[name], ceil)
                target("%s images/s vs ceiling" % name,
                       statistics.median(paired) if paired else None, ">=", limit, "%")
                targets[-1]["per_round"] = paired
                targets[-1]["ratio_of_medians"] = ratio(summary[name]["images_per_s"],
                                                        ceil["images_per_s"])
    return ratios, targets


def paired_ratios(s, ceil):
    """a/ceiling per round, for the rounds both ran: the two run minutes apart
    in the same round, so machine drift between rounds cancels in the ratio
    (the vs-ceiling targets use the median of these)."""
    a, b = s.get("round_images_per_s", {}), ceil.get("round_images_per_s", {})
    return [ratio(a[r], b[r]) for r in sorted(a, key=int) if r in b and b[r]]


def print_report(contenders, summary, ratios, targets, out=sys.stdout):
    w = max(len(c["name"]) for c in contenders) + 2
    print("", file=out)
    print("%-*s %28s %12s %14s %10s" % (w, "contender", "images/s median [min-max]",
                                          "CPU-ms/img", "peak PSS MiB", "TTFB s"), file=out)
    for c in contenders:
        s = summary.get(c["name"])
        if s is None:
            print("%-*s %s" % (w, c["name"], c.get("skipped", "skipped")), file=out)
            continue
        rng = "%.1f [%.1f-%.1f]" % (s["images_per_s"], s["images_per_s_min"], s["images_per_s_max"])
        print("%-*s %28s %12.3f %14s %10s" % (
            w, c["name"], rng, 1000 * s["cpu_s_per_image"],
            fmt(s["peak_pss_bytes"] and s["peak_pss_bytes"] / 2**20, ".1f"),
            fmt(s["ttfb_s"], ".3f")), file=out)
    for c in contenders:
        s = summary.get(c["name"])
        if s is not None and "serving_s" in s:
            print("  %s cold start (medians): SERVING at +%.3f s, first batch at +%.3f s after the "
                  "python start (+%.3f s after launching conveyord)"
                  % (c["name"], s["serving_s"], s["ttfb_s"], s["ttfb_from_daemon_launch_s"]),
                  file=out)
    if ratios:
        print("", file=out)
        print("ratios against %s:" % BASELINE, file=out)
        print("%-*s %10s %12s %10s %10s" % (w, "contender", "images/s", "CPU s/img", "PSS", "TTFB"),
              file=out)
        for c in contenders:
            r = ratios.get(c["name"])
            if r is None:
                continue
            print("%-*s %10s %12s %10s %10s" % (
                w, c["name"], fmt(r["images_per_s"], ".2f"),
                fmt(r["cpu_s_per_image"], ".3f"), fmt(r["peak_pss"], ".3f"),
                fmt(r["ttfb"], ".3f")), file=out)
    if targets:
        print("", file=out)
        print("targets:", file=out)
        for t in targets:
            if t["unit"] == "%":
                val = fmt(t["value"] and 100 * t["value"], ".1f")
                lim = "%s %.0f%%" % (t["op"], 100 * t["limit"])
                val = val + "%"
            else:
                val = fmt(t["value"], ".3f") + "x"
                lim = "%s %.2fx" % (t["op"], t["limit"])
            print("  %-52s %10s  (%s)  %s" % (t["target"], val, lim, t["result"]), file=out)
            if t.get("per_round"):
                print("  %-52s %s (median of rounds; ratio of the medians: %s)" % (
                    "", " ".join("%.1f%%" % (100 * v) for v in t["per_round"]),
                    fmt(t.get("ratio_of_medians") and 100 * t["ratio_of_medians"], ".1f")),
                    file=out)


def draw_chart(path, contenders, summary, ratios, targets, meta):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [c["name"] for c in contenders if c["name"] in summary]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(14, 5.5), gridspec_kw={"width_ratios": [3, 2]})
    metrics = [("images_per_s", "images/s", 2.5), ("cpu_s_per_image", "CPU s/image", 0.45),
               ("peak_pss", "summed PSS", 0.2), ("ttfb", "time to first batch", 0.2)]
    rnames = [n for n in names if n in ratios]
    width = 0.8 / max(1, len(rnames))
    cmap = plt.get_cmap("tab10")
    for i, n in enumerate(rnames):
        xs, ys = [], []
        for j, (key, _, _) in enumerate(metrics):
            v = ratios[n][key]
            if v is not None and v > 0:
                xs.append(j + (i - (len(rnames) - 1) / 2) * width)
                ys.append(v)
        bars = ax1.bar(xs, ys, width=width, label=n, color=cmap(i % 10))
        for b, v in zip(bars, ys):
            ax1.text(b.get_x() + b.get_width() / 2, v, "%.2f" % v, ha="center", va="bottom",
                     fontsize=6, rotation=90)
    for j, (_, label, limit) in enumerate(metrics):
        ax1.hlines(limit, j - 0.45, j + 0.45, colors="red", linestyles="dashed",
                   label="conveyord-unix target" if j == 0 else None)
    ax1.axhline(1.0, color="grey", linewidth=0.8)
    ax1.set_yscale("log")
    ax1.set_xticks(range(len(metrics)))
    ax1.set_xticklabels([m[1] for m in metrics])
    ax1.set_ylabel("ratio to %s (log scale)" % BASELINE)
    ax1.set_title("Ratios against %s (red: target)" % BASELINE)
    ax1.legend(fontsize=7, loc="best")

    ips = [summary[n]["images_per_s"] for n in names]
    lo = [summary[n]["images_per_s"] - summary[n]["images_per_s_min"] for n in names]
    hi = [summary[n]["images_per_s_max"] - summary[n]["images_per_s"] for n in names]
    ax2.barh(range(len(names)), ips, xerr=[lo, hi], color=[cmap(i % 10) for i in range(len(names))],
             capsize=3)
    for i, v in enumerate(ips):
        ax2.text(v, i, " %.0f" % v, va="center", fontsize=8)
    ax2.set_yticks(range(len(names)))
    ax2.set_yticklabels(names)
    ax2.invert_yaxis()
    ax2.set_xlabel("images/s (median, min-max bars)")
    ax2.set_title("Throughput")
    fig.suptitle("Conveyor vs PyTorch DataLoader: %d images, batch %d, %d cores%s; %s"
                 % (meta["images"], meta["batch_size"], meta["cores"],
                    " (QUICK: not meaningful)" if meta["quick"] else "",
                    "targets: %d/%d PASS" % (sum(t["result"] == "PASS" for t in targets), len(targets))
                    if targets else "no targets evaluated"), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def count_images(root):
    exts = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
    n = 0
    for d in os.listdir(root):
        p = os.path.join(root, d)
        if os.path.isdir(p):
            n += sum(1 for f in os.listdir(p) if f.lower().endswith(exts))
    return n


def machine_info():
    info = {"cores": len(os.sched_getaffinity(0)), "kernel": os.uname().release}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    from importlib import metadata
    for dist in ("torch", "torchvision", "Pillow", "grpcio", "numpy"):
        try:
            info[dist] = metadata.version(dist)
        except Exception:
            info[dist] = None
    info["loadavg_start"] = os.getloadavg()
    return info


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 2)[2],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="ImageFolder root (generated if missing)")
    ap.add_argument("--images", type=int, default=None,
                    help="images to generate when --data is missing (default 2000; --quick 40)")
    ap.add_argument("--classes", type=int, default=None,
                    help="classes to generate (default 100; --quick 4)")
    ap.add_argument("--build", default=os.environ.get("CONVEYOR_BUILD_DIR",
                                                      os.path.join(SOURCE_DIR, "build")))
    ap.add_argument("--epochs", type=int, default=3, help="timed epochs per contender run")
    ap.add_argument("--warmup-epochs", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3,
                    help="rounds of A B C ... (each contender once per round, fresh processes)")
    ap.add_argument("--workers", default=None,
                    help="DataLoader num_workers list (default 1,2,<cores>)")
    ap.add_argument("--threads", type=int, default=None,
                    help="conveyord / ceiling worker threads (default: the core count)")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--credits", type=int, default=4, help="conveyor client prefetch (credits)")
    ap.add_argument("--credits-sweep", default="",
                    help="extra conveyord-unix-cN contenders with N credits, e.g. 1,2 (memory "
                         "against prefetch depth)")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--format", choices=("jpeg", "png", "webp"), default="jpeg",
                    help="file format of a generated dataset (default jpeg)")
    ap.add_argument("--only", default=",".join(DEFAULT_KINDS),
                    help="contender kinds to run, comma-separated: %s" % ",".join(KINDS))
    ap.add_argument("--allow-missing", action="store_true",
                    help="skip contenders whose binary is not built instead of failing")
    # Reading smaps_rollup is not free (about 6 ms of CPU for conveyord and
    # its client, 2 ms for the ceiling, more for DataLoader's 3 processes): at
    # 0.1 s the sampler took a few % of this 2-core machine from the contenders.
    ap.add_argument("--pss-interval", type=float, default=0.5)
    ap.add_argument("--settle", type=float, default=2.0,
                    help="seconds of rest after a contender's processes are all gone")
    ap.add_argument("--timeout", type=float, default=3600, help="per contender run, seconds")
    ap.add_argument("--json-out", default=os.path.join(SOURCE_DIR, "bench", "results",
                                                       "vs_dataloader.json"))
    ap.add_argument("--chart-out", default=os.path.join(SOURCE_DIR, "bench", "results",
                                                        "vs_dataloader.png"))
    ap.add_argument("--quick", action="store_true",
                    help="smoke mode: 1 round, 1 epoch per contender, no warm-up, --checksum")
    ap.add_argument("--checksum", action="store_true",
                    help="conveyord contenders report the sha256 of each epoch's image bytes "
                         "(in delivery order; costs a pass over the pixels, so not for timing)")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a target FAILs")
    args = ap.parse_args(argv)

    cores = len(os.sched_getaffinity(0))
    if args.quick:
        args.checksum = True
        args.rounds, args.epochs, args.warmup_epochs = 1, 1, 0
        args.settle = min(args.settle, 0.2)
    if args.images is None:
        args.images = 40 if args.quick else 2000
    if args.classes is None:
        args.classes = 4 if args.quick else 100
    if args.threads is None:
        args.threads = cores
    if args.workers is None:
        workers = [1, 2, cores]
    else:
        workers = [int(x) for x in args.workers.split(",") if x.strip()]
    workers = sorted(set(workers))
    kinds = [k.strip() for k in args.only.split(",") if k.strip()]
    for k in kinds:
        if k not in KINDS:
            ap.error("--only: unknown kind %r (known: %s)" % (k, ", ".join(KINDS)))
    if args.rounds < 1 or args.epochs < 1 or args.warmup_epochs < 0:
        ap.error("--rounds and --epochs must be >= 1, --warmup-epochs >= 0")
    if not args.quick and (args.warmup_epochs < 1 or args.rounds * args.epochs < 3):
        print("note: the benchmark asks for >= 1 warm-up epoch and >= 3 timed epochs",
              file=sys.stderr)

    args.data = os.path.abspath(args.data)
    if not os.path.isdir(args.data):
        print("generating %d images in %d classes into %s ..." % (args.images, args.classes, args.data),
              file=sys.stderr, flush=True)
        subprocess.run([sys.executable, os.path.join(HERE, "gen_imagenet_like.py"), "--out", args.data,
                        "--images", str(args.images), "--classes", str(args.classes),
                        "--seed", "1", "--workers", str(min(cores, 8)), "--format", args.format],
                       check=True)
    n_images = count_images(args.data)
    if n_images == 0:
        ap.error("%s holds no images in ImageFolder layout" % args.data)
    if not args.quick and n_images < 2000:
        print("note: the benchmark asks for >= 2000 images, %s has %d" % (args.data, n_images),
              file=sys.stderr)

    args.conveyord = os.path.join(args.build, "server", "conveyord")
    args.ceiling = os.path.join(args.build, "bench", "ceiling_bench")
    contenders = []
    if "dataloader" in kinds:
        for w in workers:
            contenders.append({"name": "dataloader-w%d" % w, "kind": "dataloader",
                               "runner": "dataloader", "workers": w})
    for t in ("unix", "tcp", "tcp-inline"):
        if t in kinds:
            contenders.append({"name": "conveyord-" + t, "kind": t, "runner": "conveyor",
                               "transport": t, "binary": args.conveyord})
    for n in [int(x) for x in args.credits_sweep.split(",") if x.strip()]:
        contenders.append({"name": "conveyord-unix-c%d" % n, "kind": "unix", "runner": "conveyor",
                           "transport": "unix", "binary": args.conveyord, "credits": n})
    if "ceiling" in kinds:
        contenders.append({"name": "ceiling", "kind": "ceiling", "runner": "ceiling",
                           "binary": args.ceiling})
    for c in contenders:
        b = c.get("binary")
        if b and not os.access(b, os.X_OK):
            if not args.allow_missing:
                ap.error("%s is not built (build it, or pass --allow-missing / --only)" % b)
            c["skipped"] = "skipped: %s not built" % b
            print("note: %s" % c["skipped"], file=sys.stderr)
    active = [c for c in contenders if "skipped" not in c]
    if not active:
        ap.error("no contender to run")
    if "dataloader" in kinds and 2 not in workers:
        print("note: %s is not among the contenders: no ratios" % BASELINE, file=sys.stderr)

    meta = {"data": args.data, "images": n_images, "batch_size": args.batch_size,
            "size": args.size, "epochs": args.epochs, "warmup_epochs": args.warmup_epochs,
            "rounds": args.rounds, "workers": workers, "threads": args.threads,
            "credits": args.credits, "seed": args.seed, "quick": args.quick,
            "checksum": args.checksum,
            "cores": cores, "pss_interval_s": args.pss_interval, "baseline": BASELINE,
            "python": sys.executable, "build": os.path.abspath(args.build),
            "consumer": "reads labels and batch shape, drops the batch; pixels untouched",
            "ttfb_from": "driver spawning the contender process (python start-up included)",
            "machine": machine_info()}
    print("%d images, batch %d, %d cores, %d round(s) x (%d warm-up + %d timed) epochs; contenders: %s"
          % (n_images, args.batch_size, cores, args.rounds, args.warmup_epochs, args.epochs,
             ", ".join(c["name"] for c in active)), file=sys.stderr, flush=True)

    runs = {c["name"]: [] for c in active}
    workdir = tempfile.mkdtemp(prefix="vs-dataloader-")
    t_start = time.time()
    try:
        for r in range(args.rounds):
            for c in active:
                if c["runner"] == "ceiling":
                    run = run_ceiling(c, args, workdir)
                else:
                    run = run_python_contender(c, args, workdir)
                run["round"] = r
                runs[c["name"]].append(run)
                if c["runner"] == "ceiling":
                    ips = run["images_per_s"]
                    cpu = run["cpu_s_per_image"]
                else:
                    ips = statistics.median(e["images_per_s"] for e in run["epochs"])
                    cpu = statistics.median(e["cpu_s_per_image"] for e in run["epochs"])
                print("round %d %-16s %8.1f images/s  %7.3f CPU-ms/img  PSS %7s MiB  TTFB %s s"
                      % (r, c["name"], ips, 1000 * cpu,
                         fmt(run["peak_pss_bytes"] and run["peak_pss_bytes"] / 2**20, ".1f"),
                         fmt(run.get("ttfb_s"), ".3f")), file=sys.stderr, flush=True)
    finally:
        import shutil
        shutil.rmtree(workdir, ignore_errors=True)
    meta["wall_s"] = time.time() - t_start
    meta["loadavg_end"] = os.getloadavg()

    summary = {c["name"]: summarize(c, runs[c["name"]]) for c in active}
    ratios, targets = evaluate(summary)
    print_report(contenders, summary, ratios, targets)

    result = {"meta": meta,
              "contenders": {c["name"]: {"config": {k: v for k, v in c.items() if k != "binary"},
                                         "runs": runs.get(c["name"], []),
                                         "summary": summary.get(c["name"])}
                             for c in contenders},
              "ratios_vs": BASELINE, "ratios": ratios, "targets": targets}
    if args.json_out:
        os.makedirs(os.path.dirname(os.path.abspath(args.json_out)), exist_ok=True)
        with open(args.json_out, "w") as f:
            json.dump(result, f, indent=2)
        print("wrote %s" % args.json_out)
    if args.chart_out:
        os.makedirs(os.path.dirname(os.path.abspath(args.chart_out)), exist_ok=True)
        draw_chart(args.chart_out, contenders, summary, ratios, targets, meta)
        print("wrote %s" % args.chart_out)
    if args.strict and any(t["result"] == "FAIL" for t in targets):
        return 1
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_contender":
        sys.exit(contender_main(sys.argv[2:]))
    sys.exit(main(sys.argv[1:]))
