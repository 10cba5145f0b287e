#!/usr/bin/python3
"""The same tar-over-HTTP epoch with the daemon's default remote settings
(remote.adaptive_connections: true, max_connections_per_host: 64 as its
cap) from two servers, against the same shards on local disk:

  - nginx (bench/nginx_object_server.py: static files with Range support,
    the latency a Lua timer before each answer);
  - Python's own http.server (tests/integration/stdlib_http_server.py:
    ThreadingHTTPServer, HTTP/1.0 so a connection per request, listen
    backlog 5 as the stdlib's), the latency a sleep in the handler thread
    before each answer (not tc netem: the connect itself is not delayed),
    with single Range requests answered 206 (the stdlib handler answers
    200 with the whole shard).

Both with --latency-ms (default 30) added. One daemon with the defaults
serves the three pipelines; with --fixed, a second daemon with
remote.adaptive_connections: false (64 connections fixed, the old default)
reads the same from Python's server, for the figure before. Rounds alternate
the contenders' order; the first is a warm-up. Each contender reads one
stream of --epochs epochs per round, timed from its first batch to its last;
its figure is the median over the counted rounds and its ratio the median
of per-round ratios to the same round's local-disk figure. Afterwards each
daemon's GetStats figures of each host are printed (its adaptive limit,
how often it dropped, slow connects).

    /usr/bin/python3 bench/remote_defaults.py --conveyord build/server/conveyord \
        [--images 2000] [--per-shard 100] [--epochs 1] [--rounds 3] [--threads 2] \
        [--latency-ms 30] [--fixed]

Target: both servers >= 0.8x the local-disk rate with the default settings.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(SOURCE_DIR, "client", "python"))
sys.path.insert(0, os.path.join(SOURCE_DIR, "tests", "integration"))
sys.path.insert(0, HERE)

import conveyor  # noqa: E402
from conveyor.daemon import DaemonProcess  # noqa: E402
from nginx_object_server import NginxObjectServer  # noqa: E402
from remote_fixtures import STDLIB_SERVER, ObjectServer, labelled_images  # noqa: E402
from remote_http import conveyor_run, span  # noqa: E402
from tar_vs_folder import write_shards  # noqa: E402

COMMON = ("    augment: train\n    size: %d\n    layout: nchw\n    dtype: uint8\n"
          "    max_batch_size: 1024\n")


def write_config(path, threads, size, pipelines, remote=None):
    with open(path, "w") as f:
        f.write("threads: %d\nlog_level: warn\n" % threads)
        if remote:
            f.write("remote: %s\n" % json.dumps(remote))
        f.write("pipelines:\n")
        for name, shards in pipelines.items():
            f.write("  %s:\n    dataset: {shards: %s}\n%s" % (name, json.dumps(shards),
                                                               COMMON % size))


def host_line(h):
    codes = " ".join("%s:%d" % ("none" if c.status == 0 else c.status, c.count)
                     for c in h.attempts)
    n = sum(h.latency_counts)
    return ("%s  limit %d of %d (%s, lowered %d times)  requests %s  retries %d  slow connects %d"
            "  connect failures %d  mean %.1f ms" % (
                h.host, h.connection_limit, h.max_connections,
                "adaptive" if h.adaptive else "fixed", h.limit_decreases, codes, h.retries,
                h.slow_connects, h.connect_failures, h.latency_sum_ns / 1e6 / max(n, 1)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--conveyord", default=os.path.join(SOURCE_DIR, "build", "server", "conveyord"))
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--per-shard", type=int, default=100)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--latency-ms", type=float, default=30)
    ap.add_argument("--fixed", action="store_true",
                    help="also a daemon with 64 connections fixed (the old default)")
    ap.add_argument("--json")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="rd-", dir="/tmp")
    data = os.path.join(work, "data")
    subprocess.run([sys.executable, os.path.join(HERE, "gen_imagenet_like.py"), "--out", data,
                    "--images", str(args.images), "--classes", "8"], check=True,
                   stdout=subprocess.DEVNULL)
    files = labelled_images(data)
    shards_dir = os.path.join(work, "shards")
    shards = [os.path.basename(p) for p in write_shards(
        [(os.path.join(data, path), label) for path, label in files], shards_dir, args.per_shard)]
    ms = args.latency_ms
    servers = {}
    daemons = {}
    try:
        servers["nginx"] = NginxObjectServer(shards_dir, ms)
        servers["python"] = ObjectServer(shards_dir, "--delay-ms", str(ms), "--ranges",
                                         script=STDLIB_SERVER)
        urls = {k: ["%s/%s" % (s.base, n) for n in shards] for k, s in servers.items()}
        pipelines = {"local": [os.path.join(shards_dir, n) for n in shards],
                     "nginx": urls["nginx"], "python": urls["python"]}
        cfg = os.path.join(work, "defaults.yaml")
        write_config(cfg, args.threads, args.size, pipelines)
        daemons["defaults"] = DaemonProcess(args.conveyord, cfg, workdir=work,
                                            threads=args.threads)
        # (label, daemon, pipeline)
        contenders = [("local disk", "defaults", "local"),
                      ("nginx +%g ms, defaults" % ms, "defaults", "nginx"),
                      ("http.server +%g ms, defaults" % ms, "defaults", "python")]
        if args.fixed:
            fixed_dir = os.path.join(work, "fixed")
            os.makedirs(fixed_dir)
            cfg = os.path.join(fixed_dir, "fixed.yaml")
            write_config(cfg, args.threads, args.size, {"python": urls["python"]},
                         remote={"adaptive_connections": False, "max_connections_per_host": 64})
            daemons["fixed"] = DaemonProcess(args.conveyord, cfg, workdir=fixed_dir,
                                             threads=args.threads)
            contenders.append(("http.server +%g ms, 64 fixed" % ms, "fixed", "python"))
        for d in daemons.values():
            d.start(timeout=300)  # HTTP shards are indexed at start
        runs = {c[0]: [] for c in contenders}
        for rnd in range(args.rounds):
            order = contenders[:] if rnd % 2 == 0 else contenders[::-1]
            for label, dname, pipe in order:
                ips = conveyor_run(daemons[dname].address, pipe, args.batch_size,
                                   rnd * args.epochs, args.epochs)
                print("round %d  %-32s %8.1f images/s" % (rnd, label, ips), file=sys.stderr,
                      flush=True)
                if rnd > 0 or args.rounds == 1:
                    runs[label].append(ips)
        host_lines = []
        for dname, d in daemons.items():
            for h in conveyor.stats(d.address).remote_hosts:
                name = [k for k, s in servers.items() if h.host.endswith(":%d" % s.port)]
                host_lines.append("%s daemon, %s: %s" % (dname, name[0] if name else "?",
                                                         host_line(h)))
    finally:
        for d in daemons.values():
            d.stop()
        for s in servers.values():
            s.stop()
    local = runs["local disk"]
    counted = len(local)
    print("| tar shards from | images/s median (min-max of %d rounds) | "
          "vs local disk: median (min-max) of per-round ratios |" % counted)
    print("|---|---:|---:|")
    for label, _, _ in contenders:
        v = runs[label]
        ratios = [a / b for a, b in zip(v, local)]
        print("| %s | %.0f (%s) | %.2f (%s) |" % (label, statistics.median(v), span(v),
                                                 statistics.median(ratios),
                                                 span(ratios, "%.2f")))
    print()
    for line in host_lines:
        print("- " + line)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"images_per_s": runs, "hosts": host_lines, "args": vars(args)}, f,
                      indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
