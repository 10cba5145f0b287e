#!/usr/bin/python3
"""The node-local object cache (config `cache`, config/README.md "Object
cache") measured with a real conveyord and the test HTTP object server on
loopback (tests/integration/http_object_server.py, --latency-ms per request).

1. A dataset that fits: after one epoch over HTTP fills the cache, epochs
   from the cache against the same images read from local disk (a list
   file over the folder), side by side in one daemon, rounds rotating
   which goes first; prints images/s of each, the ratio cache/disk (target
   >= 0.95) and the network bytes of the cached epochs (GetStats
   object_cache.bytes_from_network, and the bodies the server sent). Two
   cached pipelines: one over a server whose answers declare nothing (each
   read is revalidated by a HEAD, answered by the server on this machine's
   cores), one over a second server that says Cache-Control: max-age=3600
   (a cached epoch asks nothing).
2. A cache of half the dataset: `--epochs-half` epochs with
   cache.eviction fixed and lru; the hit rate of the epochs after the
   first (GetStats hits / (hits + misses)).

    /usr/bin/python3 bench/remote_cache.py --conveyord build/server/conveyord \
        [--images 1000] [--latency-ms 10] [--rounds 3] [--threads 2]
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(SOURCE_DIR, "client", "python"))
sys.path.insert(0, os.path.join(SOURCE_DIR, "tests", "integration"))

from conveyor.daemon import DaemonProcess  # noqa: E402
from remote_fixtures import ObjectServer, labelled_images  # noqa: E402


def write_config(path, threads, pipelines, cache):
    lines = ["threads: %d" % threads, "log_level: warn",
             "cache:", "  dir: %s" % cache["dir"], "  max_bytes: %d" % cache["max_bytes"],
             "  eviction: %s" % cache.get("eviction", "fixed"), "pipelines:"]
    for name, dataset in pipelines.items():
        lines.append("  %s:" % name)
        lines.append("    dataset:")
        for k, v in dataset.items():
            lines.append("      %s: %s" % (k, v))
        lines += ["    augment: train", "    size: 224", "    layout: nchw", "    dtype: uint8",
                  "    max_batch_size: 1024"]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def epoch_rate(address, pipeline, batch_size, epoch):
    """images/s of one epoch of one stream, first batch to last."""
    import conveyor
    loader = conveyor.Loader(address, pipeline=pipeline, batch_size=batch_size, seed=1, credits=4)
    n, t0 = 0, None
    try:
        with loader.epoch(epoch) as stream:
            for batch in stream:
                if t0 is None:
                    t0 = time.monotonic()
                else:
                    n += batch.num_samples
    finally:
        loader.close()
    return n / (time.monotonic() - t0)


def cache_stats(address):
    import conveyor
    return conveyor.stats(address).object_cache


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--conveyord", default=os.path.join(SOURCE_DIR, "build", "server", "conveyord"))
    ap.add_argument("--images", type=int, default=1000)
    ap.add_argument("--latency-ms", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--epochs-half", type=int, default=4)
    ap.add_argument("--work", default=None, help="folder for data and caches (default: a temp)")
    args = ap.parse_args()

    work = args.work or tempfile.mkdtemp(prefix="conveyor-cache-bench-")
    data = os.path.join(work, "images")
    if not os.path.isdir(data):
        subprocess.run([sys.executable, os.path.join(HERE, "gen_imagenet_like.py"), "--out", data,
                        "--images", str(args.images), "--classes", "10"], check=True,
                       stdout=subprocess.DEVNULL)
    files = labelled_images(data)
    total = sum(os.path.getsize(os.path.join(data, f)) for f, _ in files)
    local_list = os.path.join(work, "local.tsv")
    with open(local_list, "w") as f:
        f.writelines("%s\t%d\n" % (p, l) for p, l in files)
    server = ObjectServer(data, "--latency-ms", str(args.latency_ms))
    fresh_server = ObjectServer(data, "--latency-ms", str(args.latency_ms), "--max-age", "3600")
    try:
        urls = os.path.join(work, "urls.tsv")
        with open(urls, "w") as f:
            f.writelines("%s/%s\t%d\n" % (server.base, p, l) for p, l in files)
        fresh_urls = os.path.join(work, "urls-fresh.tsv")
        with open(fresh_urls, "w") as f:
            f.writelines("%s/%s\t%d\n" % (fresh_server.base, p, l) for p, l in files)
        print("dataset: %d images, %.1f MiB; server latency %d ms; %d threads"
              % (len(files), total / 2**20, args.latency_ms, args.threads))

        # 1. The dataset fits: cache vs local disk.
        cache_dir = os.path.join(work, "cache-fits")
        shutil.rmtree(cache_dir, ignore_errors=True)
        wd = os.path.join(work, "daemon-fits")
        os.makedirs(wd, exist_ok=True)
        cfg = os.path.join(wd, "conveyord.yaml")
        write_config(cfg, args.threads, {"disk": {"list": local_list, "root": data},
                                         "cached": {"urls": urls}, "fresh": {"urls": fresh_urls}},
                     {"dir": cache_dir, "max_bytes": 4 * total + (64 << 20)})
        d = DaemonProcess(args.conveyord, cfg, workdir=wd, threads=args.threads)
        d.start(60)
        try:
            fill = epoch_rate(d.unix, "cached", args.batch_size, 0)
            epoch_rate(d.unix, "fresh", args.batch_size, 0)
            after_fill = cache_stats(d.unix)
            served_fill = sum(server.stats()["served"].values())
            fresh_requests0 = fresh_server.stats()["requests"]
            rates = {"disk": [], "cached": [], "fresh": []}
            server_cpu = 0.0  # the object server's CPU during the cached epochs (HEADs)
            names = ("disk", "cached", "fresh")
            for r in range(args.rounds):
                for name in names[r % 3:] + names[:r % 3]:
                    cpu0 = server.stats()["cpu_s"]
                    rate = epoch_rate(d.unix, name, args.batch_size, r + 1)
                    if name == "cached":
                        server_cpu += server.stats()["cpu_s"] - cpu0
                    rates[name].append(rate)
            end = cache_stats(d.unix)
            served_bodies = sum(server.stats()["served"].values()) - served_fill
            fresh_requests = fresh_server.stats()["requests"] - fresh_requests0
            disk, cached, fresh = rates["disk"], rates["cached"], rates["fresh"]
        finally:
            d.stop()
        ratios = [c / k for c, k in zip(cached, disk)]
        fresh_ratios = [c / k for c, k in zip(fresh, disk)]
        print()
        print("| epoch | images/s (median of %d, min-max) |" % args.rounds)
        print("|---|---|")
        print("| epoch 1 over HTTP, filling the cache | %.0f |" % fill)
        print("| later epochs from local disk (list file) | %.0f (%.0f-%.0f) |"
              % (statistics.median(disk), min(disk), max(disk)))
        print("| later epochs from the cache, a HEAD per read | %.0f (%.0f-%.0f) |"
              % (statistics.median(cached), min(cached), max(cached)))
        print("| later epochs from the cache, objects declared fresh | %.0f (%.0f-%.0f) |"
              % (statistics.median(fresh), min(fresh), max(fresh)))
        print()
        print("ratio cache / disk, a HEAD per read: median %.3f (per round: %s); target >= 0.95"
              % (statistics.median(ratios), ", ".join("%.3f" % x for x in ratios)))
        print("ratio cache / disk, declared fresh: median %.3f (per round: %s); target >= 0.95"
              % (statistics.median(fresh_ratios), ", ".join("%.3f" % x for x in fresh_ratios)))
        print("requests to the max-age server in the cached epochs: %d" % fresh_requests)
        print("network bytes of the cached epochs: %d (GetStats), bodies sent by the server: %d; "
              "hits %d, misses %d"
              % (end.bytes_from_network - after_fill.bytes_from_network, served_bodies,
                 end.hits - after_fill.hits, end.misses - after_fill.misses))
        heads = sum(server.stats()["heads"].values())
        print("the object server (on this machine, sharing its cores) answered %d HEADs in all, "
              "using %.2f CPU-s per cached epoch" % (heads, server_cpu / args.rounds))

        # 2. A cache of half the dataset: fixed vs lru.
        print()
        print("| eviction | cache / dataset | hit rate, epochs 2-%d | evictions |"
              % args.epochs_half)
        print("|---|---|---|---|")
        for policy in ("fixed", "lru"):
            cache_dir = os.path.join(work, "cache-half-" + policy)
            shutil.rmtree(cache_dir, ignore_errors=True)
            wd = os.path.join(work, "daemon-half-" + policy)
            os.makedirs(wd, exist_ok=True)
            cfg = os.path.join(wd, "conveyord.yaml")
            write_config(cfg, args.threads, {"cached": {"urls": urls}},
                         {"dir": cache_dir, "max_bytes": max(total // 2, 1 << 20),
                          "eviction": policy})
            d = DaemonProcess(args.conveyord, cfg, workdir=wd, threads=args.threads)
            d.start(60)
            try:
                epoch_rate(d.unix, "cached", args.batch_size, 0)
                first = cache_stats(d.unix)
                for e in range(1, args.epochs_half):
                    epoch_rate(d.unix, "cached", args.batch_size, e)
                last = cache_stats(d.unix)
            finally:
                d.stop()
            hits = last.hits - first.hits
            reads = hits + last.misses - first.misses
            print("| %s | %.2f | %.3f | %d |" % (policy, (total // 2) / total, hits / reads,
                                                 last.evictions))
    finally:
        server.stop()
        fresh_server.stop()
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
