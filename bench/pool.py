#!/usr/bin/python3
"""A trainer fed by its node's daemon and a remote one (Loader(servers=...))
against each daemon alone.

The "GPU node" is this machine's first CPU: its conveyord is held to it
(`taskset -c 0`, threads 1). The "remote host" is a network namespace of its
own joined by a veth pair (root and iproute2; without them, loopback TCP and
the output says so), whose conveyord is held to the second CPU (`taskset
-c 1`, threads 1) and serves TCP (plaintext on the lab link: TLS would add
its cost to both ends; the data socket carries the bytes). The trainer is
this process, held to CPU 0 as well (it runs on the GPU node, not on the
remote host): it reads one endless stream as fast as it can (batch
--batch-size, the train transform on generated ImageNet-like JPEGs), in
three configurations, in alternating rounds:

  local   Loader(local unix socket)                      the node alone
  remote  Loader(remote host:port)                       the remote alone
  pool    Loader(servers=[local, remote]) (local_first)  both

Each is measured as steady-state images/s (--warmup seconds not counted,
then --seconds), with the CPU time of the trainer process and of the local
daemon over the same window: CPU-ms per image on the trainer's host. The
ratios printed are pool / (local + remote) (target >= 0.9) and pool /
local (target >= 1.8), from the medians over the rounds.

    sudo /usr/bin/python3 bench/pool.py --conveyord build/server/conveyord \\
        [--images 400] [--seconds 8] [--rounds 3] [--out /tmp/pool.json] \\
        [--chart-out pool.png] [--smoke]
    /usr/bin/python3 bench/pool.py --replot pool.json --chart-out pool.png

--smoke: under a minute, checks that the benchmark works, not the figures.
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
sys.path.insert(0, os.path.join(SOURCE_DIR, "client", "python"))
sys.path.insert(0, os.path.join(SOURCE_DIR, "tests", "integration"))
sys.path.insert(0, HERE)

from conveyor.daemon import DaemonProcess  # noqa: E402
from daemon_proc import StreamReader, write_config  # noqa: E402
import netns_hosts  # noqa: E402

PIPELINE = "bench"
# What a round measures: each daemon alone (one plain stream), the pool of
# both, and the pool of each daemon alone (the cost of reading by ranges).
KINDS = ("local", "remote", "pool", "pool_local", "pool_remote")
PORT = 7272


class PinnedDaemon(DaemonProcess):
    """A conveyord run under `prefix` (taskset, ip netns exec)."""

    def __init__(self, prefix, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._prefix = prefix

    def command(self):
        return self._prefix + super().command()


def cpu_seconds(pid):
    """User + system CPU seconds of a process (all its threads)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(args, loader, local_pid, remote_pid):
    r = StreamReader(loader)
    r.start()
    time.sleep(args.warmup)
    n0, t0 = r.count(), time.monotonic()
    me0, local0, remote0 = time.process_time(), cpu_seconds(local_pid), cpu_seconds(remote_pid)
    time.sleep(args.seconds)
    n1, t1 = r.count(), time.monotonic()
    me1, local1, remote1 = time.process_time(), cpu_seconds(local_pid), cpu_seconds(remote_pid)
    r.stop()
    if r.error:
        raise RuntimeError("stream failed: %s" % r.error)
    images = n1 - n0
    return {"images": images, "seconds": t1 - t0, "images_per_s": images / (t1 - t0),
            "trainer_cpu_ms_per_image": 1000 * (me1 - me0) / max(images, 1),
            "local_daemon_cpu_ms_per_image": 1000 * (local1 - local0) / max(images, 1),
            # Busy fractions of the daemons' CPUs over the window.
            "local_daemon_cpus": (local1 - local0) / (t1 - t0),
            "remote_daemon_cpus": (remote1 - remote0) / (t1 - t0),
            "pool": r.stats}


LABELS = (("local", "node's daemon\n(CPU 0)"), ("remote", "remote daemon\n(CPU 1)"),
          ("pool", "servers=\n[node, remote]"), ("pool_local", "servers=[node]\n(ranges)"),
          ("pool_remote", "servers=[remote]\n(ranges)"))


def draw_chart(path, out):
    """Images/s of each configuration (median, and each round's), with the
    sum of the two daemons alone and 0.9 x it."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    med = out["median_images_per_s"]
    kinds = [k for k, _ in LABELS if k in med]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    colors = {"local": "#4c72b0", "remote": "#55a868", "pool": "#c44e52",
              "pool_local": "#8da0cb", "pool_remote": "#a6d854"}
    ax.bar(range(len(kinds)), [med[k] for k in kinds], color=[colors[k] for k in kinds])
    for i, k in enumerate(kinds):
        ys = [r[k]["images_per_s"] for r in out["rounds"]]
        ax.plot([i] * len(ys), ys, "k.", markersize=5)
        ax.text(i + 0.3, med[k] + 20, "%.0f" % med[k], ha="center", fontsize=9)
    total = med["local"] + med["remote"]
    ax.axhline(total, color="gray", linestyle="--", linewidth=1)
    ax.text(len(kinds) - 0.5, total + 15, "node + remote alone", ha="right", fontsize=8,
            color="gray")
    ax.axhline(0.9 * total, color="gray", linestyle=":", linewidth=1)
    ax.text(len(kinds) - 0.5, 0.9 * total - 50, "0.9 x that (target)", ha="right", fontsize=8,
            color="gray")
    ax.set_xticks(range(len(kinds)))
    ax.set_xticklabels([dict(LABELS)[k] for k in kinds], fontsize=8)
    ax.set_ylabel("images/s (median; dots: rounds)")
    meta = out["meta"]
    ax.set_title("A trainer fed by its node's daemon and a remote one (%d rounds, batch %d): "
                 "%.2fx the sum, %.2fx the node alone" % (meta["rounds"], meta["batch_size"],
                                                          out["pool_vs_sum"],
                                                          out["pool_vs_local"]), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--conveyord", default=os.path.join(SOURCE_DIR, "build", "server", "conveyord"))
    ap.add_argument("--images", type=int, default=None, help="default 400 (smoke: 64)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=None, help="default 8 (smoke 1.5)")
    ap.add_argument("--warmup", type=float, default=None, help="default 3 (smoke 1)")
    ap.add_argument("--rounds", type=int, default=None, help="default 3 (smoke 1)")
    ap.add_argument("--work", default=None, help="folder for the data (default: a temp, removed)")
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    ap.add_argument("--policy", default="local_first", help="the pool's policy (default: %(default)s)")
    ap.add_argument("--range-batches", type=int, default=None,
                    help="the pool's batches per range (default: the client's choice)")
    ap.add_argument("--streams-per-daemon", type=int, default=2,
                    help="the pool's streams per daemon (default: %(default)s)")
    ap.add_argument("--chart-out", default=None, help="draw the figures as a PNG here")
    ap.add_argument("--replot", default=None, metavar="JSON",
                    help="only draw --chart-out from the results of an earlier --out")
    ap.add_argument("--smoke", action="store_true", help="a run of under a minute")
    args = ap.parse_args()
    if args.replot:
        with open(args.replot) as f:
            draw_chart(args.chart_out or "pool.png", json.load(f))
        return
    for k, full, smoke in (("images", 400, 64), ("seconds", 8.0, 1.5), ("warmup", 3.0, 1.0),
                           ("rounds", 3, 1)):
        if getattr(args, k) is None:
            setattr(args, k, smoke if args.smoke else full)
    if (os.cpu_count() or 1) < 2:
        sys.exit("bench/pool.py needs 2 CPUs (one per daemon)")
    # The trainer runs on the GPU node: on CPU 0 with the node's daemon
    # (threads made later, gRPC's among them, inherit it), never on the
    # remote host's CPU.
    os.sched_setaffinity(0, {0})

    import conveyor
    work = args.work or tempfile.mkdtemp(prefix="conveyor-pool-bench-")
    data = os.path.join(work, "images")
    t_begin = time.monotonic()
    why_not = netns_hosts.available()
    net = None
    daemons = []
    try:
        if not os.path.isdir(data):
            subprocess.run([sys.executable, os.path.join(HERE, "gen_imagenet_like.py"), "--out",
                            data, "--images", str(args.images), "--classes", "10", "--seed", "1",
                            "--workers", "2"], check=True, stdout=subprocess.DEVNULL)
        remote_prefix = ["taskset", "-c", "1"]
        remote_host = "127.0.0.1"
        if why_not is None:
            net = netns_hosts.Hosts("bnch")
            ns = net.add("remote")
            _, remote_host = net.link(None, ns)
            remote_prefix = net.prefix(ns) + remote_prefix
        for name, prefix, tcp in (("local", ["taskset", "-c", "0"], None),
                                  ("remote", remote_prefix, "%s:%d" % (remote_host, PORT))):
            folder = os.path.join(work, name)
            os.makedirs(folder, exist_ok=True)
            cfg = os.path.join(folder, "conveyord.yaml")
            write_config(cfg, 1, {"root": data})
            if tcp is not None:
                with open(cfg, "a") as f:  # the lab link: no TLS, no token
                    f.write("listen:\n  allow_insecure_tcp: true\n")
            d = PinnedDaemon(prefix, args.conveyord, cfg, workdir=folder, tcp=tcp, threads=1)
            d.start(60)
            daemons.append(d)
        local, remote = daemons
        where = ("a network namespace over a veth pair" if net is not None
                 else "loopback TCP (%s)" % why_not)
        print("dataset: %d images; batch %d; local daemon on CPU 0, remote on CPU 1 in %s"
              % (args.images, args.batch_size, where), flush=True)

        def make(kind):
            common = dict(pipeline=PIPELINE, batch_size=args.batch_size, seed=1, credits=4)
            if kind == "local":
                return conveyor.Loader(local.unix, **common)
            if kind == "remote":
                return conveyor.Loader(remote.tcp, **common)
            servers = {"pool": [local.unix, remote.tcp], "pool_local": [local.unix],
                       "pool_remote": [remote.tcp]}[kind]
            return conveyor.Loader(servers=servers, pool=conveyor.PoolOptions(
                policy=args.policy, range_batches=args.range_batches,
                streams_per_daemon=args.streams_per_daemon), **common)

        rounds = []
        for i in range(args.rounds):
            row = {}
            for kind in KINDS:
                row[kind] = measure(args, make(kind), local.pid, remote.pid)
            rounds.append(row)
            print("round %d: local %.1f, remote %.1f, pool %.1f images/s (pool: local daemon "
                  "%.2f CPUs, remote %.2f)"
                  % (i + 1, row["local"]["images_per_s"], row["remote"]["images_per_s"],
                     row["pool"]["images_per_s"], row["pool"]["local_daemon_cpus"],
                     row["pool"]["remote_daemon_cpus"]), flush=True)
    finally:
        for d in daemons:
            d.stop()
        if net is not None:
            net.close()
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)

    med = {k: statistics.median(r[k]["images_per_s"] for r in rounds) for k in KINDS}
    cpu = {k: {"trainer": statistics.median(r[k]["trainer_cpu_ms_per_image"] for r in rounds),
               "local_daemon": statistics.median(r[k]["local_daemon_cpu_ms_per_image"]
                                                 for r in rounds),
               "local_daemon_cpus": statistics.median(r[k]["local_daemon_cpus"] for r in rounds),
               "remote_daemon_cpus": statistics.median(r[k]["remote_daemon_cpus"]
                                                       for r in rounds)}
           for k in KINDS}
    vs_sum = med["pool"] / (med["local"] + med["remote"])
    vs_local = med["pool"] / med["local"]
    print("\n| reads from | images/s | trainer CPU-ms/image | local daemon CPU-ms/image | "
          "CPUs busy: local, remote daemon |")
    print("|---|---|---|---|---|")
    for k, label in (("local", "the node's daemon (CPU 0), one stream"),
                     ("remote", "the remote daemon (CPU 1), one stream"),
                     ("pool", "both: servers=[local, remote]"),
                     ("pool_local", "servers=[local] (ranges, one daemon)"),
                     ("pool_remote", "servers=[remote] (ranges, one daemon)")):
        print("| %s | %.0f | %.2f | %.2f | %.2f, %.2f |"
              % (label, med[k], cpu[k]["trainer"], cpu[k]["local_daemon"],
                 cpu[k]["local_daemon_cpus"], cpu[k]["remote_daemon_cpus"]))
    print("\nreading by ranges from one daemon: %.2fx a plain stream on the node's daemon, "
          "%.2fx on the remote" % (med["pool_local"] / med["local"],
                                   med["pool_remote"] / med["remote"]))
    print("\npool / (local + remote) = %.2f (target >= 0.9) -> %s"
          % (vs_sum, "PASS" if vs_sum >= 0.9 else "FAIL"))
    print("pool / local = %.2f (target >= 1.8) -> %s" % (vs_local, "PASS" if vs_local >= 1.8
                                                           else "FAIL"))
    out = {"meta": {"images": args.images, "batch_size": args.batch_size,
                    "seconds": args.seconds, "warmup": args.warmup, "rounds": args.rounds,
                    "smoke": args.smoke, "remote_in_namespace": net is not None,
                    "policy": args.policy, "range_batches": args.range_batches,
                    "streams_per_daemon": args.streams_per_daemon,
                    "why_not_namespace": why_not, "wall_s": time.monotonic() - t_begin},
           "rounds": rounds, "median_images_per_s": med, "median_cpu_ms_per_image": cpu,
           "pool_vs_sum": vs_sum, "pool_vs_local": vs_local}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)
    if args.chart_out:
        draw_chart(args.chart_out, out)
        print("wrote %s" % args.chart_out)
    print("wall time %.0f s" % out["meta"]["wall_s"])


if __name__ == "__main__":
    main()
