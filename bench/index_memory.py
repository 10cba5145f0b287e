#!/usr/bin/python3
"""Memory of the dataset index at ImageNet scale: conveyord vs torchvision's sample list.

    /usr/bin/python3 bench/index_memory.py [--entries 1281167] [--classes 1000]
        [--list FILE] [--root DIR] [--workers 2,8] [--build DIR] [--json-out FILE]

The list: an ImageNet-like list file (`nXXXXXXXX/nXXXXXXXX_ID.JPEG<TAB>label`,
1,281,167 entries over 1000 classes by default; written to a temporary
folder unless --list names an existing one). The files need not exist.

conveyord: the daemon started with a list-file pipeline over that list, and
again with a one-entry list ("empty"); the figure is the difference of the
daemon's PSS (/proc/PID/smaps_rollup) once its health check says SERVING
(median of 5 readings over ~1 s). Its peak RSS (VmHWM) and the index size it
logs are reported too. build/bench/index_bench (DatasetIndex::MemoryBytes and
the RSS growth of a bare load), when built, is run for reference.

Python: what torchvision's ImageFolder/DatasetFolder holds - `samples`, a list
of (path, class_index) tuples with the full path string (root joined to the
relative path) and one shared int object per class, plus `targets` (the
class indices) - built directly from the list file in a fresh python that has
imported torch. Measured as summed PSS of the process tree against the same
process built with an empty list:
  - the process alone (num_workers = 0);
  - with a torch DataLoader of num_workers = N (each of --workers), persistent
    workers forked from the holder, each iterating over the whole list once
    (as an epoch's __getitem__ calls do across a few epochs: every refcount
    update dirties the page that holds the object, so copy-on-write gives each
    worker its own copy of the pages); parent + workers summed.
"""

import argparse
import gc
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.path.dirname(HERE)
sys.path.insert(0, HERE)

# bench/. (daemon_proc, which imports the conveyor client, is imported where
# the daemon is started: the Python holders must not load gRPC.)
from proc_sampler import (proc_status_bytes, process_tree, pss_rollup,  # noqa: E402
                          tree_rollup)

MiB = 1024.0 * 1024.0


def generate_list(path, entries, classes, seed=2012):
    """ImageNet-like list file, streamed (the same shape as index_bench's)."""
    rng = random.Random(seed)
    wnids = [1000000 + rng.randrange(14000000) for _ in range(classes)]
    with open(path, "w") as f:
        buf = []
        for i in range(entries):
            label = i * classes // entries
            w = wnids[label]
            buf.append("n%08d/n%08d_%d.JPEG\t%d\n" % (w, w, 1 + rng.randrange(60000), label))
            if len(buf) >= 65536:
                f.writelines(buf)
                buf.clear()
        f.writelines(buf)


# --------------------------------------------------------------- Python holder
# `index_memory.py _hold --list F --root R --workers N [--empty]`: prints one
# JSON line with the PSS figures of its tree.

def hold_main(argv):
    ap = argparse.ArgumentParser(prog="index_memory.py _hold")
    ap.add_argument("--list", required=True)
    ap.add_argument("--root", required=True)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--empty", action="store_true")
    a = ap.parse_args(argv)

    import torch  # noqa: F401  (a trainer has it loaded; its pages are the same with and without the list)
    from torch.utils.data import DataLoader, Dataset, get_worker_info

    class SampleList(Dataset):
        """What DatasetFolder keeps: samples [(path, class_index)], targets, classes."""

        def __init__(self, samples, targets, classes):
            self.samples = samples
            self.imgs = samples
            self.targets = targets
            self.classes = classes
            self.class_to_idx = {c: i for i, c in enumerate(classes)}

        def __len__(self):
            return len(self.samples)

        def __getitem__(self, i):
            path, target = self.samples[i]
            return target

    def touch_all(worker_id):
        ds = get_worker_info().dataset
        n = 0
        for path, target in ds.samples:  # refcount updates: tuple, str, int
            n += 1
        for t in ds.targets:
            n += 1

    me = os.getpid()
    gc.collect()
    before = pss_rollup(me)
    samples, targets, classes = [], [], []
    t0 = time.monotonic()
    if not a.empty:
        class_idx = {}   # one int object per class, as class_to_idx's values
        names = {}
        join = os.path.join
        root = a.root
        with open(a.list) as f:
            for line in f:
                rel, _, label = line.rstrip("\n").partition("\t")
                lab = int(label)
                idx = class_idx.get(lab)
                if idx is None:
                    idx = class_idx[lab] = lab
                    names[lab] = rel.split("/", 1)[0]
                samples.append((join(root, rel), idx))
        targets = [s[1] for s in samples]
        classes = [names[k] for k in sorted(names)]
    ds = SampleList(samples, targets, classes)
    build_s = time.monotonic() - t0
    gc.collect()
    out = {"entries": len(samples), "workers": a.workers, "empty": a.empty, "build_s": build_s,
           "holder_before": before, "holder_after": pss_rollup(me)}
    if samples:
        out["mean_path_chars"] = sum(len(p) for p, _ in samples[:100000]) / min(len(samples), 100000)
    if a.workers > 0:
        n = max(1, a.workers)
        dl = DataLoader(ds if samples else SampleList([("x", 0)] * n, [0] * n, ["x"]),
                        batch_size=1, sampler=list(range(n)), num_workers=a.workers,
                        persistent_workers=True, worker_init_fn=touch_all)
        it = iter(dl)
        got = sum(1 for _ in it)  # each worker gets one index, after its init touched the list
        time.sleep(0.3)
        pids = process_tree(me)
        per = {pid: pss_rollup(pid) for pid in pids}
        out.update({"items": got, "tree": tree_rollup(me, pids), "parent": per[me],
                    "workers_pss": [v for p, v in per.items() if p != me]})
        del it, dl
    else:
        out.update({"tree": tree_rollup(me, [me]), "parent": out["holder_after"],
                    "workers_pss": []})
    print(json.dumps(out), flush=True)
    return 0


def run_holder(args, workers, empty):
    cmd = [sys.executable, os.path.abspath(__file__), "_hold", "--list", args.list,
           "--root", args.root, "--workers", str(workers)] + (["--empty"] if empty else [])
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    if res.returncode != 0:
        raise RuntimeError("holder (workers=%d, empty=%s) failed:\n%s" % (workers, empty, res.stderr[-3000:]))
    return json.loads([ln for ln in res.stdout.splitlines() if ln.startswith("{")][-1])


# --------------------------------------------------------------- conveyord

def daemon_pss(args, list_path, workdir, tag):
    """Starts conveyord serving list_path, waits for SERVING, returns its PSS."""
    import daemon_proc  # the launcher (conveyor.daemon) with the bench's config

    folder = os.path.join(workdir, tag)
    os.makedirs(folder)
    d = daemon_proc.daemon(args.conveyord, folder, args.threads,
                           {"list": list_path, "root": args.root}, log_level="info",
                           name="imagenet")
    try:
        d.start(timeout=120)
        serving_s = d.serving_at - d.launched_at
        readings = []
        for _ in range(5):  # five readings over ~1 s: the median
            time.sleep(0.2)
            readings.append(pss_rollup(d.pid))
        hwm = proc_status_bytes(d.pid, "VmHWM")
        rss = proc_status_bytes(d.pid, "VmRSS")
    finally:
        d.stop()
    log_text = d.log()
    index_line = next((ln for ln in log_text.splitlines() if "samples" in ln and "index" in ln), "")
    return {"pss_bytes": statistics.median(r["pss"] for r in readings),
            "anon_bytes": statistics.median(r["anon"] for r in readings),
            "pss_readings": readings, "vm_hwm_bytes": hwm,
            "vm_rss_bytes": rss, "serving_s": serving_s, "log_index_line": index_line.strip()}


def run_index_bench(args):
    res = subprocess.run([args.index_bench, "--list", args.list, "--repeats", "1"],
                         capture_output=True, text=True, timeout=args.timeout)
    if res.returncode != 0:
        return {"error": res.stderr[-2000:]}
    line = next((ln for ln in res.stdout.splitlines() if "MemoryBytes" in ln), "")
    out = {"line": line.strip()}
    import re
    m = re.search(r"MemoryBytes ([\d.]+) MB.*RSS \+([\d.]+) MB; peak RSS \+([\d.]+) MB", line)
    if m:
        out.update({"memory_bytes": float(m.group(1)) * MiB, "rss_growth_bytes": float(m.group(2)) * MiB,
                    "peak_rss_growth_bytes": float(m.group(3)) * MiB})
    return out


# --------------------------------------------------------------- driver

def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 2)[2],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--entries", type=int, default=1281167)
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--list", help="list file (generated there if missing; default: a temp file)")
    ap.add_argument("--root", help="dataset root the paths are joined to (default: the list's folder)")
    ap.add_argument("--workers", default="2,8", help="DataLoader num_workers to measure")
    ap.add_argument("--threads", type=int, default=2, help="conveyord --threads")
    ap.add_argument("--build", default=os.environ.get("CONVEYOR_BUILD_DIR",
                                                      os.path.join(SOURCE_DIR, "build")))
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--json-out", default=os.path.join(SOURCE_DIR, "bench", "results",
                                                       "index_memory.json"))
    args = ap.parse_args(argv)
    workers = sorted({int(x) for x in args.workers.split(",") if x.strip()} - {0})

    workdir = tempfile.mkdtemp(prefix="cvim-", dir="/tmp")
    try:
        if args.list is None:
            args.list = os.path.join(workdir, "train_list.txt")
        args.list = os.path.abspath(args.list)
        if not os.path.exists(args.list):
            t0 = time.monotonic()
            generate_list(args.list, args.entries, args.classes)
            print("generated %s (%d entries, %d classes) in %.1f s"
                  % (args.list, args.entries, args.classes, time.monotonic() - t0), file=sys.stderr)
        args.root = os.path.abspath(args.root or os.path.dirname(args.list))
        with open(args.list, "rb") as f:
            entries = sum(1 for ln in f if ln.strip() and not ln.startswith(b"#"))
        list_bytes = os.path.getsize(args.list)
        args.conveyord = os.path.join(args.build, "server", "conveyord")
        args.index_bench = os.path.join(args.build, "bench", "index_bench")

        result = {"list": args.list, "entries": entries, "list_bytes": list_bytes,
                  "root": args.root, "workers": workers}
        rows = []  # (label, absolute bytes or None, delta bytes)

        if os.access(args.conveyord, os.X_OK):
            one = os.path.join(workdir, "one_entry.txt")
            with open(args.list) as src, open(one, "w") as dst:
                dst.write(next(ln for ln in src if ln.strip() and not ln.startswith("#")))
            full = daemon_pss(args, args.list, workdir, "full")
            empty = daemon_pss(args, one, workdir, "empty")
            d = {"full": full, "empty": empty, "delta_pss_bytes": full["pss_bytes"] - empty["pss_bytes"],
                 "delta_anon_bytes": full["anon_bytes"] - empty["anon_bytes"],
                 "delta_hwm_bytes": (full["vm_hwm_bytes"] or 0) - (empty["vm_hwm_bytes"] or 0)}
            result["conveyord"] = d
            rows.append(("conveyord, list-file pipeline", full["pss_bytes"], d["delta_pss_bytes"],
                         d["delta_anon_bytes"]))
            print("conveyord: PSS %.1f MiB with the list, %.1f MiB with one entry; peak RSS delta %.1f MiB"
                  % (full["pss_bytes"] / MiB, empty["pss_bytes"] / MiB, d["delta_hwm_bytes"] / MiB),
                  file=sys.stderr)
        else:
            print("note: %s not built: no daemon figure" % args.conveyord, file=sys.stderr)
        if os.access(args.index_bench, os.X_OK):
            ib = run_index_bench(args)
            result["index_bench"] = ib
            if "memory_bytes" in ib:
                rows.append(("index_bench: DatasetIndex::MemoryBytes", None, None, ib["memory_bytes"]))
                rows.append(("index_bench: RSS growth of the load", None, None,
                             ib["rss_growth_bytes"]))
        else:
            print("note: %s not built: no index_bench figure" % args.index_bench, file=sys.stderr)

        py = []
        for w in [0] + workers:
            full = run_holder(args, w, empty=False)
            base = run_holder(args, w, empty=True)
            delta = full["tree"]["pss"] - base["tree"]["pss"]
            delta_anon = full["tree"]["anon"] - base["tree"]["anon"]
            py.append({"workers": w, "full": full, "empty": base, "delta_pss_bytes": delta,
                       "delta_anon_bytes": delta_anon})
            label = ("Python samples list, 1 process" if w == 0 else
                     "Python list + DataLoader num_workers=%d (sum of %d)" % (w, w + 1))
            rows.append((label, full["tree"]["pss"], delta, delta_anon))
            print("%s: summed PSS %.1f MiB (anon %.1f), empty list %.1f MiB (anon %.1f)"
                  % (label, full["tree"]["pss"] / MiB, full["tree"]["anon"] / MiB,
                     base["tree"]["pss"] / MiB, base["tree"]["anon"] / MiB), file=sys.stderr, flush=True)
        result["python"] = py
        result["rows"] = [{"what": r[0], "pss_bytes": r[1], "delta_pss_bytes": r[2],
                           "index_bytes": r[3]} for r in rows]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    ref = result.get("conveyord", {}).get("delta_anon_bytes")
    mib = lambda v: "" if v is None else "%.1f MiB" % (v / MiB)  # noqa: E731
    print("")
    print("Index of %d entries (%d classes; list file %.1f MB; mean Python path %.0f chars)"
          % (entries, args.classes, list_bytes / 1e6, py[0]["full"].get("mean_path_chars", 0)))
    print("%-52s %12s %12s %12s %9s %11s" % ("", "summed PSS", "PSS delta", "index cost",
                                             "B/entry", "x conveyord"))
    for what, absolute, delta, cost in rows:
        print("%-52s %12s %12s %12s %9.1f %11s" % (
            what, mib(absolute), mib(delta), mib(cost), cost / max(1, entries),
            "%.1f" % (cost / ref) if ref and ref > 0 else "n/a"))
    print("summed PSS: every process of the set-up (Python: parent + workers); PSS delta: minus the")
    print("same set-up with an empty list (one entry for conveyord); index cost: the delta of the")
    print("anonymous part of PSS (Pss_Anon) alone, which other processes' use of shared libraries")
    print("cannot move.")
    if args.json_out:
        os.makedirs(os.path.dirname(os.path.abspath(args.json_out)), exist_ok=True)
        with open(args.json_out, "w") as f:
            json.dump(result, f, indent=2)
        print("wrote %s" % args.json_out)
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_hold":
        sys.exit(hold_main(sys.argv[2:]))
    sys.exit(main(sys.argv[1:]))
