#!/usr/bin/python3
"""Soak: several clients read a real conveyord for many epochs; the daemon's
RSS and open fds must be flat after warm-up.

    /usr/bin/python3 bench/soak.py --build build [--rounds 3] [--seconds 60]
        [--clients 6] [--data DIR | --images 200] [--threads 2] [--json-out FILE]

Starts conveyord (through conveyor.daemon, the project's launcher) on a unix
socket and TCP 127.0.0.1 (with its data socket) over an ImageNet-like
dataset (generated with gen_imagenet_like.py unless --data is given), then
runs --clients client processes for --seconds, --rounds times, letting the
daemon go idle between rounds. The clients use the three
transports in turn (shared memory on the unix socket, inline over TCP, the
data socket over TCP); each opens stream after stream with a random batch
size, credits and number of epochs, reads every batch (touching its pixels),
and closes about a third of its streams early. Every --kill-every seconds
one client is killed with SIGKILL in the middle of whatever it reads, and a
new one takes its place.

Every --interval seconds the daemon's VmRSS and open fds are sampled from
/proc (proc_sampler.py) and its own accounting (GetStats: streams open, slot
bytes in use). The figures: rss, rss_less_slots (VmRSS less the slot bytes
the open streams reserve: what the daemon holds beyond its bounded slots,
the figure a leak grows; RSS itself swings with the mix of stream sizes)
and fds. Printed: a table with, per figure, the level at
the end of warm-up (median of the first quarter of the samples after
--warmup seconds), the level at the end (median of the last quarter), the
largest sample, the least-squares slope per minute after warm-up, and the
verdict: flat when both the end-minus-warm-up growth and the slope times the
post-warm-up minutes stay within the threshold (printed with it: RSS
--rss-tolerance-mib plus 5% of the warm-up level; fds --fd-tolerance); the
samples are taken while the clients run, never during a round's wind-down.
Then the idle levels before the clients came and after each round: the idle
verdict is flat when the daemon is idle after every round with no more
fds than it had before (given up to 5 s to close the connections clients have
just let go of), and its RSS within the RSS threshold of its level after
round 1 (the allocator keeps some memory after a first busy round: that is
retention; growth round after round would be a leak). Exit status 0 when
every verdict is flat, no client hit an unexpected error and the daemon
exited cleanly on SIGTERM; 1 otherwise.

The clients run this file with --client (an internal mode).
Run with Debian's /usr/bin/python3 (grpcio, numpy, PIL).
"""

import argparse
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
if BENCH_DIR not in sys.path:
    sys.path.insert(0, BENCH_DIR)

import daemon_proc  # noqa: E402  (also puts the client package on sys.path)
import proc_sampler  # noqa: E402

TRANSPORTS = ("shared_memory", "inline", "data_socket")
PIPELINE = "bench"
MiB = 1 << 20


# --------------------------------------------------------------- client mode

def run_client(args):
    """One client process: streams until --client-seconds pass; prints one
    JSON line of what it did (a killed client prints nothing)."""
    import conveyor

    rng = random.Random(args.client_seed)
    deadline = time.monotonic() + args.client_seconds
    tally = {"transport": args.transport, "streams": 0, "batches": 0, "images": 0,
             "early_closes": 0, "epochs_done": 0, "errors": [], "touched": 0}
    address = args.unix if args.transport == "shared_memory" else args.tcp
    while time.monotonic() < deadline:
        batch_size = rng.choice((8, 16, 32))
        stop_after = rng.randrange(1, 12) if rng.random() < 0.33 else None
        try:
            with conveyor.open_stream(address, PIPELINE, batch_size,
                                      seed=rng.randrange(1 << 30), num_epochs=rng.choice((1, 2, 3)),
                                      credits=rng.choice((1, 2, 4)),
                                      transport=args.transport) as stream:
                tally["streams"] += 1
                for i, batch in enumerate(stream):
                    # Touch the pixels: one byte of every image.
                    tally["touched"] += int(batch.images[:, 0, 0, 0].sum())
                    tally["batches"] += 1
                    tally["images"] += batch.num_samples
                    if stop_after is not None and i + 1 >= stop_after:
                        tally["early_closes"] += 1
                        break
                    if time.monotonic() >= deadline:
                        break
                if stream.end is not None:
                    tally["epochs_done"] += len(stream.epoch_ends)
        except conveyor.ConveyorError as e:
            tally["errors"].append(str(e)[:300])
    print(json.dumps(tally), flush=True)
    return 0


# --------------------------------------------------------------- driver

class Client:
    """A client process and what it reported."""

    def __init__(self, number, transport, daemon, seconds, seed):
        self.number, self.transport = number, transport
        cmd = [sys.executable, os.path.abspath(__file__), "--client", "--transport", transport,
               "--unix", daemon.unix, "--tcp", daemon.tcp, "--client-seconds", "%.3f" % seconds,
               "--client-seed", str(seed)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        self.killed = False
        self.report = None
        self.stderr = ""

    def kill(self):
        self.killed = True
        self.proc.send_signal(signal.SIGKILL)

    def finish(self, timeout):
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
            err += "\n(killed: did not finish in time)"
        self.stderr = err
        if not self.killed:
            lines = [line for line in out.splitlines() if line.startswith("{")]
            self.report = json.loads(lines[-1]) if lines else None


def fd_count(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def least_squares_slope(points):
    """Slope of y over x (per unit of x) for [(x, y)]; 0 for < 2 points."""
    if len(points) < 2:
        return 0.0
    mx = statistics.fmean(x for x, _ in points)
    my = statistics.fmean(y for _, y in points)
    den = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / den if den else 0.0


def judge(samples, key, warmup_s, tolerance_of):
    """The figures of one sampled quantity after warm-up: warm-up level,
    end level, max, slope per minute, threshold and verdict."""
    after = [(t, s[key]) for t, s in samples if t >= warmup_s]
    if len(after) < 8:
        return {"samples": len(after), "verdict": "too few samples"}
    q = max(1, len(after) // 4)
    warm = statistics.median(v for _, v in after[:q])
    end = statistics.median(v for _, v in after[-q:])
    slope = least_squares_slope([(t / 60.0, v) for t, v in after])
    minutes = (after[-1][0] - after[0][0]) / 60.0
    threshold = tolerance_of(warm)
    flat = end - warm <= threshold and slope * minutes <= threshold
    return {"samples": len(after), "warm": warm, "end": end, "max": max(v for _, v in after),
            "growth": end - warm, "slope_per_min": slope, "minutes": minutes,
            "threshold": threshold, "verdict": "flat" if flat else "NOT FLAT"}


def idle(address):
    import conveyor

    st = conveyor.stats(address)
    return st.streams_open == 0 and st.slot_bytes_in_use == 0


def wait_idle(address, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if idle(address):
            return True
        time.sleep(0.1)
    return idle(address)


def print_table(result):
    rows = [("figure", "warm-up", "end", "max", "slope/min", "threshold", "verdict")]
    for name, unit, scale in (("rss", "MiB", MiB), ("rss_less_slots", "MiB", MiB),
                              ("fds", "", 1)):
        j = result[name]
        if "warm" not in j:
            rows.append((name, "-", "-", "-", "-", "-", j["verdict"]))
            continue
        f = (lambda v: "%.1f %s" % (v / scale, unit)) if unit else (lambda v: "%.1f" % v)
        rows.append((name, f(j["warm"]), f(j["end"]), f(j["max"]), f(j["slope_per_min"]),
                     f(j["threshold"]), j["verdict"]))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                        for i, (c, w) in enumerate(zip(r, widths))).rstrip())
    b = result["idle_before"]
    print("idle before the clients: RSS %.1f MiB, %d fds, %d threads"
          % (b["rss"] / MiB, b["fds"], b["threads"]))
    for i, a in enumerate(result["idle_rounds"]):
        print("idle after round %d: RSS %.1f MiB, %d fds, %d threads (daemon idle: %s)"
              % (i + 1, a["rss"] / MiB, a["fds"], a["threads"], a["idle"]))
    print("idle verdict: %s (every round idle with no more fds than before, RSS within %.1f MiB of "
          "round 1's)" % (result["idle_verdict"], result["idle_rss_threshold"] / MiB))
    t = result["traffic"]
    print("%.0f s, %d clients at a time (%s): %d streams (%d closed early), %d batches, "
          "%d images (%.0f images/s), %d clients killed mid-stream, %d unexpected errors"
          % (result["seconds"], result["clients"], ", ".join(TRANSPORTS), t["streams"],
             t["early_closes"], t["batches"], t["images"], t["images"] / result["seconds"],
             t["killed"], len(t["errors"])))
    for e in t["errors"][:5]:
        print("  error:", e)


def generate(out, images):
    gen = os.path.join(BENCH_DIR, "gen_imagenet_like.py")
    subprocess.run([sys.executable, gen, "--out", out, "--images", str(images), "--classes",
                    str(min(10, images)), "--seed", "3", "--workers", "2"], check=True,
                   stdout=subprocess.DEVNULL)


def idle_level(d, settle_to=None, settle_s=5.0):
    """The daemon's idle figures. With `settle_to` (the fd count before the
    clients), waits up to `settle_s` for the fd count to come down to it:
    the connection of the last stats call (and of a client just gone) is
    closed by the daemon a moment after the client lets go of it, so one
    look right after going idle can catch it still open. A leaked fd stays
    and still counts."""
    busy = idle(d.unix)
    deadline = time.monotonic() + settle_s
    fds = fd_count(d.pid)
    while settle_to is not None and fds > settle_to and time.monotonic() < deadline:
        time.sleep(0.1)
        fds = fd_count(d.pid)
    return {"rss": proc_sampler.proc_status_bytes(d.pid, "VmRSS"), "fds": fds,
            "threads": threads_of(d.pid), "idle": busy}


def threads_of(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    return 0


def load_round(args, d, rng, t0, samples, done):
    """One round: --clients clients for --seconds (killing one every
    --kill-every s), sampling the daemon meanwhile into `samples` (times
    from t0); finished clients go to `done`."""
    import conveyor

    start = time.monotonic()
    end = start + args.seconds
    clients = [Client(i, TRANSPORTS[i % len(TRANSPORTS)], d, args.seconds, rng.randrange(1 << 30))
               for i in range(args.clients)]
    next_kill = start + args.kill_every
    next_sample = start
    number = len(clients)
    while True:
        now = time.monotonic()
        if now >= next_sample and now <= end:
            st = conveyor.stats(d.unix)
            samples.append((now - t0, {
                "rss": proc_sampler.proc_status_bytes(d.pid, "VmRSS"), "fds": fd_count(d.pid),
                "threads": threads_of(d.pid), "streams": st.streams_open,
                "slot_bytes": st.slot_bytes_in_use}))
            next_sample += args.interval
        if now >= next_kill and now < end - 2.0:
            live = [c for c in clients if c.proc.poll() is None]
            if live:
                victim = rng.choice(live)
                victim.kill()
                victim.finish(timeout=30)
                clients.remove(victim)
                done.append(victim)
                clients.append(Client(number, victim.transport, d, end - now,
                                      rng.randrange(1 << 30)))
                number += 1
            next_kill += args.kill_every
        if now >= end and all(c.proc.poll() is not None for c in clients):
            break
        if now >= end + 120:
            break  # finish() below kills what still runs
        if d.proc.poll() is not None:
            raise RuntimeError("conveyord exited (status %s):\n%s"
                               % (d.proc.returncode, d.log_tail()))
        time.sleep(0.05)
    for c in clients:
        c.finish(timeout=30)
    done.extend(clients)


def run(args):
    conveyord = os.path.join(args.build, "server", "conveyord")
    if not os.access(conveyord, os.X_OK):
        print("conveyord not built at %s" % conveyord, file=sys.stderr)
        return 2
    from conveyor.daemon import DaemonProcess

    work = tempfile.mkdtemp(prefix="conveyor-soak-", dir="/tmp")
    data = args.data
    if data is None:
        data = os.path.join(work, "data")
        generate(data, args.images)
    cfg = os.path.join(work, "conveyord.yaml")
    daemon_proc.write_config(cfg, args.threads, {"root": os.path.abspath(data)}, size=args.size,
                             name=PIPELINE)
    d = DaemonProcess(conveyord, cfg, workdir=work, tcp="127.0.0.1:0", threads=args.threads)
    d.start()
    rng = random.Random(args.seed)
    result = {"seconds": args.seconds * args.rounds, "rounds": args.rounds,
              "clients": args.clients, "warmup_s": args.warmup, "threads": args.threads,
              "size": args.size}
    try:
        result["idle_before"] = idle_level(d)
        t0 = time.monotonic()
        done, samples, idle_after = [], [], []
        for _ in range(args.rounds):
            load_round(args, d, rng, t0, samples, done)
            wait_idle(d.unix, 30)
            idle_after.append(idle_level(d, settle_to=result["idle_before"]["fds"]))
        result["idle_rounds"] = idle_after
        result["idle_after"] = idle_after[-1]
        traffic = {"streams": 0, "early_closes": 0, "batches": 0, "images": 0, "epochs_done": 0,
                   "errors": [], "killed": sum(c.killed for c in done), "by_transport": {}}
        for c in done:
            if c.killed:
                continue
            if c.report is None:
                traffic["errors"].append("client %d (%s) reported nothing: %s"
                                         % (c.number, c.transport, c.stderr[-500:]))
                continue
            for k in ("streams", "early_closes", "batches", "images", "epochs_done"):
                traffic[k] += c.report[k]
            traffic["errors"].extend(c.report["errors"])
            bt = traffic["by_transport"].setdefault(c.transport, {"streams": 0, "batches": 0})
            bt["streams"] += c.report["streams"]
            bt["batches"] += c.report["batches"]
        result["traffic"] = traffic
        result["samples"] = [dict(t=t, **s) for t, s in samples]
        result["rss"] = judge(samples, "rss", args.warmup,
                              lambda warm: args.rss_tolerance_mib * MiB + 0.05 * warm)
        # RSS less the slot memory the open streams reserve: what the
        # daemon holds beyond its bounded slots (most of the swing of RSS is
        # the random mix of stream sizes), the figure a leak would grow.
        for _, smp in samples:
            smp["rss_less_slots"] = smp["rss"] - smp["slot_bytes"]
        result["rss_less_slots"] = judge(samples, "rss_less_slots", args.warmup,
                                         lambda warm: args.rss_tolerance_mib * MiB + 0.05 * warm)
        result["fds"] = judge(samples, "fds", args.warmup, lambda warm: float(args.fd_tolerance))
        # Idle again after each round: no stream, no slot memory, no more fds
        # than it had before the clients came (fewer is fine: the look before
        # them may have caught a health check's connection not yet closed), and (from round 2 on) the RSS of round
        # 1's end within the RSS threshold (what the allocator keeps after
        # the first round is retention, what grows round after round a leak).
        first = idle_after[0]["rss"]
        result["idle_rss_threshold"] = args.rss_tolerance_mib * MiB + 0.05 * first
        idle_flat = all(a["idle"] and a["fds"] <= result["idle_before"]["fds"] and
                        a["rss"] - first <= result["idle_rss_threshold"] for a in idle_after)
        result["idle_verdict"] = "flat" if idle_flat else "NOT FLAT"
    finally:
        status = d.stop(timeout=30)
        shutil.rmtree(work, ignore_errors=True)
    result["daemon_exit_status"] = status
    print_table(result)
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(result, f, indent=1)
    ok = (all(result[k]["verdict"] == "flat" for k in ("rss", "rss_less_slots", "fds"))
          and result["idle_verdict"] == "flat" and not result["traffic"]["errors"]
          and status == 0)
    print("soak: %s" % ("PASS" if ok else "FAIL"))
    return 0 if ok else 1


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default=os.path.join(os.path.dirname(BENCH_DIR), "build"),
                   help="build folder holding server/conveyord (default: ./build)")
    p.add_argument("--seconds", type=float, default=60.0,
                   help="how long the clients run in each round (default: %(default)s)")
    p.add_argument("--rounds", type=int, default=3,
                   help="rounds of --seconds each, the daemon let go idle between them and its "
                        "idle levels sampled after each (default: %(default)s)")
    p.add_argument("--warmup", type=float, default=None,
                   help="seconds of warm-up left out of the verdict (default: 20%% of --seconds)")
    p.add_argument("--clients", type=int, default=6, help="client processes (default: %(default)s)")
    p.add_argument("--kill-every", type=float, default=15.0,
                   help="SIGKILL one client every this many seconds (default: %(default)s)")
    p.add_argument("--interval", type=float, default=1.0,
                   help="seconds between samples (default: %(default)s)")
    p.add_argument("--data", help="an ImageFolder dataset (default: generate --images of them)")
    p.add_argument("--images", type=int, default=200, help="images to generate (default: 200)")
    p.add_argument("--threads", type=int, default=2, help="daemon threads (default: 2)")
    p.add_argument("--size", type=int, default=128, help="output side in pixels (default: 128)")
    p.add_argument("--rss-tolerance-mib", type=float, default=8.0,
                   help="RSS growth allowed after warm-up, plus 5%% of the warm-up level "
                        "(default: %(default)s MiB)")
    p.add_argument("--fd-tolerance", type=int, default=4,
                   help="growth in open fds allowed after warm-up (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json-out", help="write the figures and samples as JSON here")
    # internal: the client processes
    p.add_argument("--client", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--transport", help=argparse.SUPPRESS)
    p.add_argument("--unix", help=argparse.SUPPRESS)
    p.add_argument("--tcp", help=argparse.SUPPRESS)
    p.add_argument("--client-seconds", type=float, help=argparse.SUPPRESS)
    p.add_argument("--client-seed", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.client:
        return run_client(args)
    if args.warmup is None:
        args.warmup = 0.2 * args.seconds * args.rounds
    if args.seconds <= 0 or args.clients < 1 or args.interval <= 0 or args.rounds < 1:
        p.error("--seconds and --interval must be > 0, --clients and --rounds >= 1")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
