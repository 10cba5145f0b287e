#!/usr/bin/python3
"""Hostile soak: normal clients' throughput with and without hostile
clients, data and servers beside them, and the daemon's memory against its
documented worst case.

    /usr/bin/python3 bench/hostile_soak.py --build build [--seconds 60]
        [--clients 4] [--data DIR | --images 200] [--threads 2]
        [--idle-connections 300] [--min-ratio 0.8] [--json-out FILE] [--smoke]

One conveyord (through conveyor.daemon, the project's launcher) on a unix
socket and TCP 127.0.0.1 (with its data socket) serves four pipelines:

  normal       an ImageNet-like folder (gen_imagenet_like.py, or --data)
  hostile      the hostile corpus of the tests (tests/support/hostile_corpus.py:
               truncated, corrupt, huge-header, 12-bit, FIFO, escaping
               link, unreadable ... beside valid images), error_policy: skip
  remote_fail  URLs of the normal images on the test object server
               (tests/integration/http_object_server.py) answering 503 to a
               share of requests and dropping or cutting others
  remote_slow  the same on a second server, misbehaving as --slow-mode says:
               `trickle` sends each body a byte every 2 s (the server's
               --trickle-body-ms), `stall` stops answering after 16
               answers and holds the connections (--stall-after), `latency`
               answers everything 300 ms late (smoke: 50 ms; the smoke's
               remote_fail is milder too); `auto` (the default) is
               trickle where the server has that flag, else stall (smoke:
               else latency, so that the smoke passes on a daemon whose
               workers still wait on the network)

Phase 1, "solo": --clients normal client processes read `normal` for
--seconds after a warm-up (each an endless stream, every batch's pixels
touched; the unix ones over shared memory, the others over TCP with the
data socket): their images/s, summed.
Phase 2, "mixed": the same clients again while hostile ones run:
  - a reader per hostile pipeline (hostile, remote_fail, remote_slow),
    reopening its stream whenever it ends, paced to --reader-batches-per-s;
  - vanishers: every --vanish-every s a client opens a stream (pipelines and
    transports in turn) and is killed with SIGKILL 0.5-2.5 s later;
  - bad requests: gRPC calls written by hand (tests/integration/raw_grpc.py)
    with fields no client library sends (unparseable bytes, batch_size 0 or
    huge, credits 0 or 1000, an unknown pipeline with control characters,
    rank past world_size, a Release before any open, 16 KiB of metadata,
    compressed or unknown encodings, SHARED_MEMORY over TCP), one after the
    other;
  - --idle-connections TCP connections to the gRPC port that never send a
    byte (one the daemon closes is opened again).
The hostile clients start --hostile-lead s before the normal ones and stop
with them. --without leaves parts out (e.g. --without remote_slow) to see
what each costs.

Every --interval s the daemon's VmRSS, open fds, threads, health (every
2 s) and GetStats (streams open) are sampled from /proc and its services.
Printed: a table of normal images/s solo and mixed and their ratio (target
>= --min-ratio), the daemon's peak RSS (the largest sample and VmHWM)
against the worst case of config/README.md ("Memory: the worst case")
computed from the config it was started with (each term printed; `fixed` is
taken as --fixed-mib, and remote.read_ahead_bytes, which that formula does
not list, is added as a term of its own), fds, what each hostile client
saw, and how the daemon exited on SIGTERM. Exit status 0 when the ratio is
>= --min-ratio, the peak RSS <= the bound, no normal client hit an error
or was stuck in a read at the end of its phase, and the daemon exited 0;
1 otherwise.

--smoke: a few seconds per phase on a few images and 40 idle connections,
no ratio verdict: it passes when both phases delivered normal batches (in
the whole life of their clients, warm-up included), the
hostile clients ran, the peak RSS is within the bound, and the daemon
survived them and exited 0 (CTest runs it:
tests/python/test_hostile_soak_smoke.py). A client stuck in a read past
the end of its phase prints what it has and exits, marked stuck.

The client processes run this file with --role (an internal mode).
Run with Debian's /usr/bin/python3 (grpcio, numpy, PIL; jpegtran for the
hostile corpus).
"""

import argparse
import json
import os
import random
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.path.dirname(BENCH_DIR)
for _p in (BENCH_DIR, os.path.join(SOURCE_DIR, "tests", "support"),
           os.path.join(SOURCE_DIR, "tests", "integration")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import daemon_proc  # noqa: E402,F401  (puts the client package on sys.path)
import proc_sampler  # noqa: E402
from remote_fixtures import ObjectServer  # noqa: E402

OBJECT_SERVER = os.path.join(SOURCE_DIR, "tests", "integration", "http_object_server.py")
MiB = 1 << 20
NORMAL, HOSTILE, REMOTE_FAIL, REMOTE_SLOW = "normal", "hostile", "remote_fail", "remote_slow"
HOSTILE_PIPELINES = (HOSTILE, REMOTE_FAIL, REMOTE_SLOW)
STREAM_BATCHES = "/conveyor.v1.Conveyor/StreamBatches"
HOSTILE_PARTS = HOSTILE_PIPELINES + ("vanishers", "bad-requests", "idle-tcp")


def now():
    return time.monotonic()  # CLOCK_MONOTONIC: one clock for every process here


# ============================================================== client roles

class Report:
    """A client role's tally, printed once as one JSON line: by the role when
    it is done, or by a watchdog GRACE s after --until when the role is stuck
    (a read that never returns: the tally then says "stuck": true) and the
    process exits at once, so that a stalled daemon cannot stall the driver."""

    GRACE = 3.0

    def __init__(self, until, tally):
        self.tally = tally
        self._lock = threading.Lock()
        self._printed = False
        if until is not None:
            t = threading.Timer(max(0.0, until - now()) + self.GRACE, self._stuck)
            t.daemon = True
            t.start()

    def _stuck(self):
        self.tally["stuck"] = True
        self.emit()
        os._exit(0)

    def emit(self):
        with self._lock:
            if self._printed:
                return
            self._printed = True
            for _ in range(3):  # the role may be changing the dict meanwhile
                try:
                    text = json.dumps(self.tally)
                    break
                except RuntimeError:
                    time.sleep(0.01)
            else:
                text = json.dumps({"stuck": True, "error": "tally changing"})
            sys.stdout.write(text + "\n")
            sys.stdout.flush()


def role_normal(args):
    """A normal client: one endless stream after another until --until;
    counts the images of the batches that arrive within [--measure-from,
    --until]. Prints one JSON line."""
    import conveyor

    rng = random.Random(args.client_seed)
    tally = {"images": 0, "batches": 0, "images_total": 0, "first_batch_at": None,
             "errors": [], "touched": 0, "streams": 0, "stuck": False}
    report = Report(args.until, tally)
    while now() < args.until:
        try:
            with conveyor.open_stream(args.address, NORMAL, args.batch_size,
                                      seed=rng.randrange(1 << 30), num_epochs=0,
                                      credits=args.credits, transport=args.transport) as stream:
                tally["streams"] += 1
                for batch in stream:
                    t = now()
                    tally["touched"] += int(batch.images[:, 0, 0, 0].sum())
                    tally["images_total"] += batch.num_samples
                    if tally["first_batch_at"] is None:
                        tally["first_batch_at"] = t
                    if args.measure_from <= t <= args.until:
                        tally["images"] += batch.num_samples
                        tally["batches"] += 1
                    if t >= args.until:
                        break
        except conveyor.ConveyorError as e:
            tally["errors"].append("%s: %s" % (type(e).__name__, str(e)[:300]))
            time.sleep(0.2)
    report.emit()
    return 0


def role_reader(args):
    """A client of a hostile pipeline: reads, paced to --rate batches/s,
    reopening its stream whenever it ends (end of data, DATA_LOSS, a failed
    host), until --until. Prints one JSON line."""
    import conveyor

    rng = random.Random(args.client_seed)
    tally = {"pipeline": args.pipeline, "streams": 0, "batches": 0, "samples": 0,
             "failures": 0, "reasons": {}, "ended": {}, "stuck": False}
    report = Report(args.until, tally)
    gap = 1.0 / args.rate if args.rate > 0 else 0.0
    while now() < args.until:
        try:
            with conveyor.open_stream(args.address, args.pipeline, args.batch_size,
                                      seed=rng.randrange(1 << 30), num_epochs=0, credits=2,
                                      transport=args.transport) as stream:
                tally["streams"] += 1
                next_at = now()
                for batch in stream:
                    tally["batches"] += 1
                    tally["samples"] += batch.num_samples
                    for f in batch.failures:
                        tally["failures"] += 1
                        key = re.sub(r"[0-9]+", "N", f.reason)[:60]
                        tally["reasons"][key] = tally["reasons"].get(key, 0) + 1
                    if now() >= args.until:
                        break
                    next_at += gap
                    pause = next_at - now()
                    if pause > 0:
                        time.sleep(min(pause, max(0.0, args.until - now())))
                tally["ended"]["end or deadline"] = tally["ended"].get("end or deadline", 0) + 1
        except conveyor.ConveyorError as e:
            key = type(e).__name__
            tally["ended"][key] = tally["ended"].get(key, 0) + 1
            tally.setdefault("last_error", {})[key] = str(e)[:200]
            time.sleep(0.5)
    report.emit()
    return 0


def role_vanisher(args):
    """Opens a stream and reads it until killed (SIGKILL by the driver)."""
    import conveyor

    try:
        with conveyor.open_stream(args.address, args.pipeline, args.batch_size, seed=1,
                                  num_epochs=0, credits=2, transport=args.transport) as stream:
            for i, _ in enumerate(stream):
                if i == 0:
                    print("BATCH", flush=True)
    except conveyor.ConveyorError:
        pass
    time.sleep(3600)  # killed before this ends
    return 0


def bad_requests():
    """(name, body, extra headers, grpc-encoding) of each hostile call."""
    import gzip

    from conveyor._stubs import pb
    from raw_grpc import grpc_frame

    def open_msg(**kw):
        fields = dict(pipeline=NORMAL, batch_size=8, credits=2, num_epochs=1)
        fields.update(kw)
        return grpc_frame(pb.ClientMessage(open=pb.OpenStream(**fields)).SerializeToString())

    return [
        ("unparseable", grpc_frame(b"\xff" * 10), (), None),
        ("empty ClientMessage", grpc_frame(b""), (), None),
        ("batch_size 0", open_msg(batch_size=0), (), None),
        ("batch_size 2^31", open_msg(batch_size=1 << 31), (), None),
        ("credits 0", open_msg(credits=0), (), None),
        ("credits 1000", open_msg(credits=1000), (), None),
        ("unknown pipeline with control characters", open_msg(pipeline="evil\n\x1b[31m\x00x"),
         (), None),
        ("rank past world_size", open_msg(rank=5, world_size=2), (), None),
        ("release before open",
         grpc_frame(pb.ClientMessage(release=pb.Release(slots=[3], sequences=[9]))
                    .SerializeToString()), (), None),
        ("16 KiB of metadata", open_msg(), [("x-padding", "a" * 16 * 1024)], None),
        ("gzip-compressed", grpc_frame(gzip.compress(b"\x0a\x00" * 64), compressed=True), (),
         "gzip"),
        ("unknown encoding", grpc_frame(b"\x01\x02\x03", compressed=True), (), "x-unknown"),
        ("SHARED_MEMORY over TCP", open_msg(transport=pb.SHARED_MEMORY), (), None),
    ]


def role_bad_requests(args):
    """Sends the bad calls one after the other (--rate calls/s at most)
    until --until; counts the answers' gRPC status per call. Prints one
    JSON line."""
    import grpc
    from raw_grpc import raw_call

    names = {c.value[0]: c.name for c in grpc.StatusCode}
    host, port = args.address.rsplit(":", 1)
    calls = bad_requests()
    tally = {"calls": 0, "by_call": {}, "stuck": False}
    report = Report(args.until + 10.0, tally)  # a call may take its 10 s timeout
    gap = 1.0 / args.rate if args.rate > 0 else 0.0
    i = 0
    while now() < args.until:
        name, body, headers, encoding = calls[i % len(calls)]
        i += 1
        t = now()
        try:
            reply = raw_call(host, int(port), STREAM_BATCHES, body, headers=headers,
                             encoding=encoding, timeout=10.0, stop_after=1)
            status = reply.grpc_status
            outcome = (names.get(status, str(status)) if status is not None else
                       ("a message, no status" if reply.messages else
                        "rst %s" % reply.rst if reply.rst is not None else "closed"))
        except (TimeoutError, OSError) as e:
            outcome = "client side: %s" % type(e).__name__
        tally["calls"] += 1
        per = tally["by_call"].setdefault(name, {})
        per[outcome] = per.get(outcome, 0) + 1
        pause = t + gap - now()
        if pause > 0:
            time.sleep(pause)
    report.emit()
    return 0


def role_idle_tcp(args):
    """Holds --count TCP connections to --address that never send a byte;
    one the daemon closes (or that failed to open) is opened again once a
    second. Prints one JSON line at --until."""
    host, port = args.address.rsplit(":", 1)
    port = int(port)
    tally = {"wanted": args.count, "opened": 0, "closed_by_daemon": 0, "connect_errors": 0,
             "connect_error_kinds": {}, "held_min": None, "held_max": 0, "stuck": False}
    report = Report(args.until + 10.0, tally)
    socks = []

    def fill():
        while len(socks) < args.count and now() < args.until:
            try:
                s = socket.create_connection((host, port), timeout=2.0)
            except OSError as e:
                tally["connect_errors"] += 1
                k = type(e).__name__
                tally["connect_error_kinds"][k] = tally["connect_error_kinds"].get(k, 0) + 1
                return
            s.setblocking(False)
            socks.append(s)
            tally["opened"] += 1

    fill()
    while now() < args.until:
        time.sleep(min(1.0, max(0.0, args.until - now())))
        # A readable socket is one the daemon wrote to (it never should) or
        # closed: recv tells which; either way it is dropped and replaced.
        if socks:
            readable, _, _ = select.select(socks, [], [], 0) if len(socks) < 1000 else (
                [s for s in socks if select.select([s], [], [], 0)[0]], None, None)
            for s in readable:
                try:
                    data = s.recv(65536)
                except OSError:
                    data = b""
                if not data:
                    tally["closed_by_daemon"] += 1
                    socks.remove(s)
                    s.close()
        held = len(socks)
        tally["held_max"] = max(tally["held_max"], held)
        tally["held_min"] = held if tally["held_min"] is None else min(tally["held_min"], held)
        fill()
    for s in socks:
        s.close()
    report.emit()
    return 0


ROLES = {"normal": role_normal, "reader": role_reader, "vanisher": role_vanisher,
         "bad-requests": role_bad_requests, "idle-tcp": role_idle_tcp}


# ============================================================== driver

class Proc:
    """A client process of this script and the JSON line it printed."""

    def __init__(self, role, env, **kw):
        cmd = [sys.executable, os.path.abspath(__file__), "--role", role]
        for k, v in kw.items():
            cmd += ["--" + k.replace("_", "-"), str(v)]
        self.role, self.kw = role, kw
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=env)
        self.report, self.stderr, self.killed = None, "", False

    def kill(self):
        self.killed = True
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)

    def finish(self, timeout):
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
            err += "\n(killed: did not finish in time)"
        self.stderr = err
        lines = [line for line in out.splitlines() if line.startswith("{")]
        self.report = json.loads(lines[-1]) if lines else None
        self.saw_batch = "BATCH" in out
        return self.report


def server_stats(server):
    """The object server's /__stats, or what kept it from answering."""
    try:
        return server.stats()
    except OSError as e:
        return {"error": str(e)}


def server_flags():
    """The flags the object server has now (other fixes add modes)."""
    out = subprocess.run([sys.executable, OBJECT_SERVER, "--help"], capture_output=True,
                         text=True, timeout=30).stdout
    return set(re.findall(r"--[a-z][a-z-]+", out))


def slow_mode(mode, flags, smoke):
    """(name, the slow server's flags) for --slow-mode: `trickle` (a body
    trickled a byte at a time, where the server has --trickle-body-ms),
    `stall` (no answer at all after a few answers, connections held open),
    `latency` (every answer 300 ms late, smoke 50 ms); `auto`: trickle where the server
    has it, else stall (smoke: else latency)."""
    if mode == "auto":
        mode = "trickle" if "--trickle-body-ms" in flags else "latency" if smoke else "stall"
    if mode == "trickle":
        if "--trickle-body-ms" not in flags:
            raise SystemExit("the object server has no --trickle-body-ms: use --slow-mode stall")
        return mode, ["--trickle-body-ms", "2000"]
    if mode == "stall":
        return mode, ["--latency-ms", "50", "--stall-after", "4" if smoke else "16"]
    return mode, ["--latency-ms", "50" if smoke else "300"]


# --- the config and its worst case ------------------------------------------

def make_config(args, roots, url_lists):
    """The daemon's config as a dict (every figure of the worst-case formula
    set explicitly) and as YAML text (JSON is YAML)."""
    common = {"augment": "train", "size": args.size, "layout": "nchw", "dtype": "uint8",
              "max_batch_size": 256, "max_file_bytes": "%dMiB" % args.max_file_mib,
              "max_decode_memory": "%dMiB" % args.max_decode_mib}
    pipelines = {NORMAL: dict(common, dataset={"root": roots[NORMAL]}),
                 HOSTILE: dict(common, dataset={"root": roots[HOSTILE]}, error_policy="skip")}
    for name, path in url_lists.items():
        pipelines[name] = dict(common, dataset={"urls": path}, error_policy="skip",
                               max_failure_rate=1.0)
    cfg = {
        "threads": args.threads,
        "log_level": "info",
        "memory_budget": "%dMiB" % args.memory_budget_mib,
        "max_streams": args.max_streams,
        "engine": {"fetch_queue_bytes": "%dMiB" % args.fetch_queue_mib, "fetch_concurrency": 4,
                   "autotune": True, "autotune_max_fetch_concurrency": 16},
        "remote": {"read_ahead_bytes": "%dMiB" % args.read_ahead_mib},
        "pipelines": pipelines,
    }
    return cfg, json.dumps(cfg, indent=1) + "\n"


def worst_case(cfg, samples, index_bytes, fixed_bytes):
    """config/README.md "Memory: the worst case", term by term, for `cfg`
    (make_config's dict; sizes there are "<n>MiB"). `samples`: the largest
    dataset's size; `index_bytes`: what the start log's "index X MiB" lines
    add up to."""
    def size(v):
        m = re.fullmatch(r"([0-9.]+)MiB", v)
        return int(float(m.group(1)) * MiB)

    threads = cfg["threads"]
    eng = cfg["engine"]
    fetch_queue_capacity = eng.get("fetch_queue_capacity", 0) or max(4, 2 * threads)
    decode_concurrency = eng.get("decode_concurrency", 0) or threads
    pls = cfg["pipelines"].values()
    max_file = max(size(p["max_file_bytes"]) for p in pls)
    max_decode = max(size(p["max_decode_memory"]) for p in pls)
    streams = cfg["max_streams"]
    has_urls = any("urls" in p["dataset"] for p in pls)
    network_reads = eng["fetch_concurrency"]
    if eng.get("autotune", True):
        network_reads = max(network_reads, eng.get("autotune_max_fetch_concurrency", 64))
    terms = [
        ("memory_budget", size(cfg["memory_budget"])),
        ("max_streams x max(fetch_queue_bytes, max_file_bytes)",
         streams * max(size(eng["fetch_queue_bytes"]), max_file)),
        ("threads x max_file_bytes (local reads running)", threads * max_file),
        ("max_streams x fetch_concurrency (the tuner's ceiling) x max_file_bytes (URL lists)",
         streams * network_reads * max_file if has_urls else 0),
        ("max_streams x (fetch_queue_capacity + decode_concurrency) x 1 MiB",
         streams * (fetch_queue_capacity + decode_concurrency) * MiB),
        ("threads x max_decode_memory", threads * max_decode),
        ("max_streams x 2 x 4 B x samples", streams * 2 * 4 * samples),
        ("threads x 4 B x samples", threads * 4 * samples),
        ("threads x audio.max_samples x audio.channels x 4 B (no audio pipeline)", 0),
        ("index (start log)", index_bytes),
        ("fixed (--fixed-mib)", fixed_bytes),
        ("remote.read_ahead_bytes (not in the README's formula)",
         size(cfg["remote"]["read_ahead_bytes"])),
    ]
    return terms, sum(v for _, v in terms)


def index_bytes_from_log(log):
    return int(sum(float(m) for m in re.findall(r"index ([0-9.]+) MiB", log)) * MiB)


# --- sampling -----------------------------------------------------------------

def fd_count(pid):
    try:
        return len(os.listdir("/proc/%d/fd" % pid))
    except OSError:
        return 0


def threads_of(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("Threads:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def fd_limit(pid):
    try:
        with open("/proc/%d/limits" % pid) as f:
            for line in f:
                if line.startswith("Max open files"):
                    return int(line.split()[3])
    except (OSError, ValueError, IndexError):
        pass
    return None


class Sampler(threading.Thread):
    """The daemon's VmRSS, fds, threads (every `interval` s), GetStats'
    streams_open and the health check (every 2 s), each sample tagged with
    the phase it was taken in."""

    def __init__(self, d, interval):
        super().__init__(daemon=True)
        self.d, self.interval = d, interval
        self.samples = []
        self.phase = "setup"
        self._halt = threading.Event()

    def run(self):
        import conveyor
        from conveyor.daemon import is_serving

        last_slow, streams, serving = -1e9, None, None
        while not self._halt.is_set():
            t = now()
            if t - last_slow >= 2.0:
                last_slow = t
                try:
                    streams = conveyor.stats(self.d.unix, timeout=5).streams_open
                except conveyor.ConveyorError:
                    streams = None
                serving = is_serving(self.d.unix, timeout=5.0)
            rss = proc_sampler.proc_status_bytes(self.d.pid, "VmRSS")
            if rss is not None:
                self.samples.append({"t": t, "phase": self.phase, "rss": rss,
                                     "fds": fd_count(self.d.pid),
                                     "threads": threads_of(self.d.pid),
                                     "streams": streams, "serving": serving})
            self._halt.wait(self.interval)

    def stop(self):
        self._halt.set()
        self.join()


def wait_idle(address, timeout):
    import conveyor
    deadline = now() + timeout
    while now() < deadline:
        try:
            st = conveyor.stats(address, timeout=5)
            if st.streams_open == 0 and st.slot_bytes_in_use == 0:
                return True
        except conveyor.ConveyorError:
            pass
        time.sleep(0.2)
    return False


# --- phases -------------------------------------------------------------------

def normal_clients(args, d, env, warmup, seconds):
    """Starts --clients normal clients measuring [start + warmup, + seconds]."""
    start = now()
    frm, until = start + warmup, start + warmup + seconds
    clients = []
    for i in range(args.clients):
        unix = i % 2 == 0
        clients.append(Proc("normal", env, address=d.unix if unix else d.tcp,
                            transport="shared_memory" if unix else "data_socket",
                            batch_size=args.batch_size, credits=4, client_seed=args.seed + i,
                            measure_from="%.6f" % frm, until="%.6f" % until))
    return clients, frm, until


def collect_normal(clients, frm, until, cpu):
    reports = [c.finish(timeout=max(30.0, until - now() + 30.0)) for c in clients]
    cpu.join(timeout=30)
    out = {"clients": [], "images": 0, "errors": [], "seconds": until - frm,
           "cpu": cpu.figures}
    for c, r in zip(clients, reports):
        if r is None:
            out["errors"].append("a %s client reported nothing: %s"
                                 % (c.kw["transport"], c.stderr[-400:]))
            continue
        out["clients"].append(dict(r, transport=c.kw["transport"],
                                   images_per_s=r["images"] / (until - frm)))
        out["images"] += r["images"]
        out["errors"].extend(r["errors"])
    out["images_per_s"] = out["images"] / (until - frm)
    out["stuck"] = sum(1 for c in out["clients"] if c.get("stuck"))
    return out


def mixed_load(args, d, env, end, smoke):
    """Starts the hostile clients, to run until `end`; returns them and the
    vanisher thread's state."""
    procs = {}
    if "idle-tcp" not in args.without:
        procs["idle-tcp"] = Proc("idle-tcp", env, address=d.tcp, count=args.idle_connections,
                                 until="%.6f" % end)
    if "bad-requests" not in args.without:
        procs["bad-requests"] = Proc("bad-requests", env, address=d.tcp,
                                     rate=args.bad_request_rate, until="%.6f" % end)
    for i, p in enumerate(HOSTILE_PIPELINES):
        if p in args.without:
            continue
        unix = i % 2 == 0
        procs["reader " + p] = Proc("reader", env, address=d.unix if unix else d.tcp,
                                    transport="shared_memory" if unix else "inline",
                                    pipeline=p, batch_size=16, rate=args.reader_batches_per_s,
                                    client_seed=100 + i, until="%.6f" % end)
    vanish = {"spawned": 0, "killed": 0, "saw_a_batch": 0, "by_pipeline": {}, "thread": None,
              "stop": threading.Event()}

    def vanishers():
        rng = random.Random(args.seed + 7)
        choices = [(NORMAL, "shared_memory"), (HOSTILE, "data_socket"), (NORMAL, "inline"),
                   (REMOTE_SLOW, "shared_memory"), (REMOTE_FAIL, "data_socket")]
        choices = [c for c in choices if c[0] not in args.without]
        n = 0
        while ("vanishers" not in args.without and not vanish["stop"].is_set() and
               now() < end - 1.0):
            pipeline, transport = choices[n % len(choices)]
            n += 1
            v = Proc("vanisher", env, address=d.unix if transport == "shared_memory" else d.tcp,
                     transport=transport, pipeline=pipeline, batch_size=8)
            vanish["spawned"] += 1
            vanish["by_pipeline"][pipeline] = vanish["by_pipeline"].get(pipeline, 0) + 1
            vanish["stop"].wait(rng.uniform(0.5, 2.5))
            v.kill()
            v.finish(timeout=10)
            vanish["killed"] += 1
            vanish["saw_a_batch"] += int(v.saw_batch)
            vanish["stop"].wait(max(0.0, args.vanish_every - 1.5))

    vanish["thread"] = threading.Thread(target=vanishers, daemon=True)
    vanish["thread"].start()
    return procs, vanish


# --- report -------------------------------------------------------------------

def fmt_mib(v):
    return "%.1f MiB" % (v / MiB)


def print_report(r):
    solo, mixed = r["solo"], r["mixed"]
    rows = [("normal clients", "solo", "mixed", "mixed / solo")]
    rows.append(("images/s (%d clients)" % r["clients"], "%.1f" % solo["images_per_s"],
                 "%.1f" % mixed["images_per_s"], "%.3f" % r["ratio"]))
    for i, (a, b) in enumerate(zip(solo["clients"], mixed["clients"])):
        rows.append(("  client %d (%s)" % (i, a["transport"]), "%.1f" % a["images_per_s"],
                     "%.1f" % b["images_per_s"],
                     "%.3f" % (b["images_per_s"] / a["images_per_s"]) if a["images_per_s"]
                     else "-"))
    rows.append(("errors", str(len(solo["errors"])), str(len(mixed["errors"])), ""))
    rows.append(("clients stuck at the deadline", str(solo["stuck"]), str(mixed["stuck"]), ""))
    for key, label in (("daemon_cores", "daemon CPU (cores)"),
                       ("machine_busy_cores", "machine CPU busy (cores of %d)"
                        % (solo["cpu"] or {}).get("machine_cpus", 0))):
        rows.append((label, "%.2f" % (solo["cpu"] or {}).get(key, float("nan")),
                     "%.2f" % (mixed["cpu"] or {}).get(key, float("nan")), ""))
    for ph in ("solo", "mixed"):
        f = r["daemon"][ph]
        rows.append(("daemon RSS max, %s" % ph, fmt_mib(f["rss_max"]), "", "") if ph == "solo"
                    else ("daemon RSS max, mixed", "", fmt_mib(f["rss_max"]), ""))
    rows.append(("daemon fds max", str(r["daemon"]["solo"]["fds_max"]),
                 str(r["daemon"]["mixed"]["fds_max"]), "limit %s" % r["daemon"]["fd_limit"]))
    rows.append(("health not SERVING (samples)", str(r["daemon"]["solo"]["not_serving"]),
                 str(r["daemon"]["mixed"]["not_serving"]), ""))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                        for i, (c, w) in enumerate(zip(row, widths))).rstrip())
    print("peak RSS: %s sampled, VmHWM %s; worst case from the config %s:"
          % (fmt_mib(r["rss_peak_sampled"]), fmt_mib(r["vmhwm"]), fmt_mib(r["bound"])))
    for name, v in r["bound_terms"]:
        print("  %10s  %s" % (fmt_mib(v), name))
    h = r["hostile"]
    print("hostile clients in the mixed phase:")
    for name, rep in sorted(h["procs"].items()):
        if rep is None:
            print("  %s: reported nothing" % name)
        elif name.startswith("reader"):
            print("  %s: %d streams, %d batches, %d samples, %d failures reported, ended by %s%s"
                  % (name, rep["streams"], rep["batches"], rep["samples"], rep["failures"],
                     json.dumps(rep["ended"], sort_keys=True),
                     "; stuck in a read at the deadline" if rep.get("stuck") else ""))
        elif name == "idle-tcp":
            print("  idle TCP connections: %d wanted, %d opened, held %s-%d, %d closed by the "
                  "daemon, %d failed to connect %s"
                  % (rep["wanted"], rep["opened"], rep["held_min"], rep["held_max"],
                     rep["closed_by_daemon"], rep["connect_errors"],
                     json.dumps(rep["connect_error_kinds"]) if rep["connect_errors"] else ""))
        elif name == "bad-requests":
            print("  bad requests: %d calls" % rep["calls"])
            for call, outcomes in sorted(rep["by_call"].items()):
                print("    %-42s %s" % (call, ", ".join("%s x%d" % kv for kv in
                                                       sorted(outcomes.items()))))
    v = h["vanishers"]
    print("  vanishers: %d opened a stream and were killed with SIGKILL (%d after a first "
          "batch), by pipeline %s" % (v["killed"], v["saw_a_batch"],
                                      json.dumps(v["by_pipeline"], sort_keys=True)))
    for key, name in (("fail", "remote_fail's"), ("slow", "remote_slow's (%s)" % h["slow_mode"])):
        st = h["servers"].get(key) or {}
        print("  %s server: %s requests, %s answered 503, %s dropped or cut, %d objects served"
              % (name, st.get("requests", "?"), st.get("failed", "?"), st.get("dropped", "?"),
                 sum((st.get("served") or {}).values())))
    for e in (solo["errors"] + mixed["errors"])[:5]:
        print("  normal client error: %s" % e)
    print("daemon exit status on SIGTERM: %s (%.1f s)" % (r["daemon_exit_status"], r["stop_s"]))


# --- run ----------------------------------------------------------------------

def generate(out, images):
    subprocess.run([sys.executable, os.path.join(BENCH_DIR, "gen_imagenet_like.py"), "--out", out,
                    "--images", str(images), "--classes", str(min(10, images)), "--seed", "3",
                    "--workers", "2"], check=True, stdout=subprocess.DEVNULL)


def image_files(root):
    out = []
    for cls in sorted(os.listdir(root)):
        d = os.path.join(root, cls)
        if os.path.isdir(d):
            out += [cls + "/" + n for n in sorted(os.listdir(d)) if not n.startswith(".")]
    return out


def machine_busy_ticks():
    """(busy, total) clock ticks of every CPU of the machine (/proc/stat)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + (v[4] if len(v) > 4 else 0)  # idle + iowait
    return sum(v) - idle, sum(v)


class CpuWindow(threading.Thread):
    """The daemon's CPU (all its threads) and the whole machine's busy CPUs
    over [frm, until]: cores in use on average, so that a drop of the normal
    images/s can be told apart: the daemon's workers idle (waiting) or the
    machine's cores all busy (other processes, the hostile clients among
    them)."""

    def __init__(self, pid, frm, until):
        super().__init__(daemon=True)
        self.pid, self.frm, self.until = pid, frm, until
        self.figures = None
        self.start()

    def run(self):
        time.sleep(max(0.0, self.frm - now()))
        t0, d0, m0 = now(), proc_sampler.proc_cpu_seconds(self.pid), machine_busy_ticks()
        time.sleep(max(0.0, self.until - now()))
        t1, d1, m1 = now(), proc_sampler.proc_cpu_seconds(self.pid), machine_busy_ticks()
        cpus = os.cpu_count() or 1
        self.figures = {"daemon_cores": (d1 - d0) / (t1 - t0),
                        "machine_busy_cores": cpus * (m1[0] - m0[0]) / max(1, m1[1] - m0[1]),
                        "machine_cpus": cpus, "loadavg": os.getloadavg()[0]}


def phase_figures(samples, phase):
    s = [x for x in samples if x["phase"] == phase]
    return {"samples": len(s), "rss_max": max((x["rss"] for x in s), default=0),
            "fds_max": max((x["fds"] for x in s), default=0),
            "threads_max": max((x["threads"] for x in s), default=0),
            "streams_max": max((x["streams"] or 0 for x in s), default=0),
            "not_serving": sum(1 for x in s if x["serving"] is False)}


def run(args):
    conveyord = os.path.join(args.build, "server", "conveyord")
    if not os.access(conveyord, os.X_OK):
        print("conveyord not built at %s" % conveyord, file=sys.stderr)
        return 2
    from conveyor.daemon import DaemonProcess
    import hostile_corpus

    work = tempfile.mkdtemp(prefix="conveyor-hsoak-", dir="/tmp")
    env = dict(os.environ, CONVEYOR_BUILD_DIR=os.path.abspath(args.build),
               PYTHONDONTWRITEBYTECODE="1")
    servers, d, sampler = {}, None, None
    result = {"seconds": args.seconds, "warmup_s": args.warmup, "clients": args.clients,
              "threads": args.threads, "size": args.size, "smoke": args.smoke,
              "min_ratio": args.min_ratio}
    try:
        data = os.path.abspath(args.data) if args.data else os.path.join(work, "normal")
        if not args.data:
            generate(data, args.images)
        hostile_root = os.path.join(work, "hostile", "root")
        entries = hostile_corpus.build(hostile_root)
        result["hostile_corpus"] = {"entries": len(entries),
                                    "skipped": sum(e.outcome == hostile_corpus.SKIPPED
                                                   for e in entries)}
        files = image_files(data)[:args.remote_objects]
        flags = server_flags()
        result["slow_mode"], slow_flags = slow_mode(args.slow_mode, flags, args.smoke)
        # Smoke: milder, so that a daemon whose workers still wait on the
        # network (issue 26, item 1) keeps its normal clients served.
        servers["fail"] = ObjectServer(data, "--latency-ms", "5" if args.smoke else "20",
                                       "--fail-fraction", "0.1" if args.smoke else "0.25",
                                       "--drop-fraction", "0.05" if args.smoke else "0.15",
                                       "--seed", "1")
        servers["slow"] = ObjectServer(data, *slow_flags)
        url_lists = {}
        for name, key in ((REMOTE_FAIL, "fail"), (REMOTE_SLOW, "slow")):
            path = os.path.join(work, name + ".tsv")
            with open(path, "w") as f:
                for i, rel in enumerate(files):
                    f.write("%s/%s\t%d\n" % (servers[key].base, rel, i % 10))
            url_lists[name] = path
        cfg, text = make_config(args, {NORMAL: data, HOSTILE: hostile_root}, url_lists)
        cfg_path = os.path.join(work, "conveyord.yaml")
        with open(cfg_path, "w") as f:
            f.write(text)
        result["config"] = cfg
        d = DaemonProcess(conveyord, cfg_path, workdir=os.path.join(work, "daemon"),
                          tcp="127.0.0.1:0")
        d.start(timeout=120)
        samples = max(len(image_files(data)), len(files), len(entries))
        terms, bound = worst_case(cfg, samples, index_bytes_from_log(d.log()),
                                  args.fixed_mib * MiB)
        result["bound_terms"], result["bound"] = terms, bound
        sampler = Sampler(d, args.interval)
        sampler.start()

        # Phase 1: the normal clients alone.
        sampler.phase = "solo"
        clients, frm, until = normal_clients(args, d, env, args.warmup, args.seconds)
        result["solo"] = collect_normal(clients, frm, until, CpuWindow(d.pid, frm, until))
        sampler.phase = "between"
        wait_idle(d.unix, 30)

        # Phase 2: the same with the hostile clients.
        sampler.phase = "mixed"
        lead = args.hostile_lead
        end = now() + lead + args.warmup + args.seconds
        procs, vanish = mixed_load(args, d, env, end, args.smoke)
        time.sleep(lead)
        clients, frm, until = normal_clients(args, d, env, args.warmup, args.seconds)
        result["mixed"] = collect_normal(clients, frm, until, CpuWindow(d.pid, frm, until))
        vanish["stop"].set()
        vanish["thread"].join(timeout=30)
        reports = {name: p.finish(timeout=max(30.0, end - now() + 30.0))
                   for name, p in procs.items()}
        sampler.phase = "after"
        result["hostile"] = {
            "procs": reports,
            "stderr": {n: p.stderr[-600:] for n, p in procs.items() if p.report is None},
            "vanishers": {k: v for k, v in vanish.items() if k not in ("thread", "stop")},
            "servers": {k: server_stats(s) for k, s in servers.items()},
            "slow_mode": result["slow_mode"]}
        result["idle_after"] = wait_idle(d.unix, 30)
        result["vmhwm"] = proc_sampler.proc_status_bytes(d.pid, "VmHWM") or 0
        result["daemon"] = {ph: phase_figures(sampler.samples, ph) for ph in ("solo", "mixed")}
        result["daemon"]["fd_limit"] = fd_limit(d.pid)
    finally:
        if sampler is not None:
            sampler.stop()
        t = now()
        status = d.stop(timeout=60) if d is not None and d.proc is not None else None
        result["stop_s"] = now() - t
        if d is not None and d.proc is not None:
            log = d.log()
            result["daemon_log_tail"] = log[-3000:]
            result["daemon_log_lines"] = log.count("\n")
        for s in servers.values():
            s.stop()
        shutil.rmtree(work, ignore_errors=True)
    result["daemon_exit_status"] = status
    result["samples"] = sampler.samples
    result["rss_peak_sampled"] = max((x["rss"] for x in sampler.samples), default=0)
    solo, mixed = result["solo"]["images_per_s"], result["mixed"]["images_per_s"]
    result["ratio"] = mixed / solo if solo else 0.0
    peak = max(result["rss_peak_sampled"], result["vmhwm"])
    normal_errors = result["solo"]["errors"] + result["mixed"]["errors"]
    checks = {
        "ratio": None if args.smoke else result["ratio"] >= args.min_ratio,
        "rss within the worst case": peak <= result["bound"],
        "no normal client error or stall": not normal_errors and not (
            result["solo"]["stuck"] or result["mixed"]["stuck"]),
        "clean exit on SIGTERM": status == 0,
    }
    if args.smoke:
        h = result["hostile"]["procs"]
        checks["both phases delivered"] = all(
            sum(c["images_total"] for c in result[ph]["clients"]) > 0 for ph in ("solo", "mixed"))
        w = args.without
        checks["hostile clients ran"] = (
            ("idle-tcp" in w or (h.get("idle-tcp") or {}).get("opened", 0) > 0) and
            ("bad-requests" in w or (h.get("bad-requests") or {}).get("calls", 0) > 0) and
            all(p in w or (h.get("reader " + p) or {}).get("streams", 0) > 0
                for p in HOSTILE_PIPELINES) and
            ("vanishers" in w or result["hostile"]["vanishers"]["killed"] > 0))
    result["checks"] = checks
    print_report(result)
    print("checks: " + ", ".join("%s %s" % (k, "n/a (smoke)" if v is None else
                                            "PASS" if v else "FAIL")
                                 for k, v in checks.items()))
    ok = all(v is not False for v in checks.values())
    result["verdict"] = "PASS" if ok else "FAIL"
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(result, f, indent=1)
    print("hostile soak%s: %s" % (" (smoke)" if args.smoke else "", result["verdict"]))
    return 0 if ok else 1


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default=os.path.join(SOURCE_DIR, "build"),
                   help="build folder holding server/conveyord (default: ./build)")
    p.add_argument("--seconds", type=float, default=60.0,
                   help="measured seconds of each phase (default: %(default)s)")
    p.add_argument("--warmup", type=float, default=None,
                   help="seconds of each phase before the clock starts (default: 5, smoke 1)")
    p.add_argument("--hostile-lead", type=float, default=None,
                   help="seconds the hostile clients run before the normal ones start in the "
                        "mixed phase (default: 3, smoke 1)")
    p.add_argument("--clients", type=int, default=4,
                   help="normal client processes, half on the unix socket (shared memory), "
                        "half on TCP (data socket) (default: %(default)s)")
    p.add_argument("--batch-size", type=int, default=32, help="normal batch size (default: 32)")
    p.add_argument("--data", help="an ImageFolder dataset (default: generate --images of them)")
    p.add_argument("--images", type=int, default=None,
                   help="images to generate (default: 200, smoke 24)")
    p.add_argument("--threads", type=int, default=2, help="daemon threads (default: 2)")
    p.add_argument("--size", type=int, default=128, help="output side in pixels (default: 128)")
    p.add_argument("--idle-connections", type=int, default=None,
                   help="TCP connections that never send a byte (default: 300, smoke 40)")
    p.add_argument("--reader-batches-per-s", type=float, default=5.0,
                   help="pace of each hostile pipeline's reader (default: %(default)s)")
    p.add_argument("--vanish-every", type=float, default=2.0,
                   help="seconds between vanishing clients (default: %(default)s)")
    p.add_argument("--bad-request-rate", type=float, default=10.0,
                   help="bad calls per second at most (default: %(default)s)")
    p.add_argument("--without", default="",
                   help="comma-separated hostile parts to leave out of the mixed phase, to see "
                        "what each costs: %s" % ",".join(HOSTILE_PARTS))
    p.add_argument("--slow-mode", choices=("auto", "trickle", "stall", "latency"), default="auto",
                   help="how the remote_slow server misbehaves: auto is trickle where the object "
                        "server has --trickle-body-ms, else stall (smoke: else latency) "
                        "(default: %(default)s)")
    p.add_argument("--remote-objects", type=int, default=64,
                   help="normal images served by each object server (default: %(default)s)")
    p.add_argument("--memory-budget-mib", type=int, default=128)
    p.add_argument("--max-streams", type=int, default=24)
    p.add_argument("--fetch-queue-mib", type=int, default=8)
    p.add_argument("--max-file-mib", type=int, default=2)
    p.add_argument("--max-decode-mib", type=int, default=64)
    p.add_argument("--read-ahead-mib", type=int, default=32)
    p.add_argument("--fixed-mib", type=float, default=64.0,
                   help="the worst case's `fixed` term (\"tens of MiB\") (default: %(default)s)")
    p.add_argument("--min-ratio", type=float, default=0.8,
                   help="mixed / solo normal images/s needed (default: %(default)s)")
    p.add_argument("--interval", type=float, default=0.5,
                   help="seconds between samples of the daemon (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--smoke", action="store_true",
                   help="a few seconds per phase; no ratio verdict (the CTest smoke test)")
    p.add_argument("--json-out", help="write the figures and samples as JSON here")
    # internal: the client processes
    p.add_argument("--role", choices=sorted(ROLES), help=argparse.SUPPRESS)
    for name in ("address", "transport", "pipeline"):
        p.add_argument("--" + name, help=argparse.SUPPRESS)
    for name in ("measure-from", "until", "rate"):
        p.add_argument("--" + name, type=float, help=argparse.SUPPRESS)
    for name in ("credits", "client-seed", "count"):
        p.add_argument("--" + name, type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.without = set(x for x in args.without.split(",") if x)
    if args.without - set(HOSTILE_PARTS):
        p.error("--without: unknown %s (known: %s)" % (",".join(sorted(args.without -
                                                                         set(HOSTILE_PARTS))),
                                                        ",".join(HOSTILE_PARTS)))
    if args.role:
        return ROLES[args.role](args)
    if args.smoke:
        args.seconds = min(args.seconds, 4.0) if "--seconds" not in (argv or sys.argv) else \
            args.seconds
    for name, full, smoke in (("warmup", 5.0, 1.0), ("hostile_lead", 3.0, 1.0),
                              ("images", 200, 24), ("idle_connections", 300, 40)):
        if getattr(args, name) is None:
            setattr(args, name, smoke if args.smoke else full)
    if args.seconds <= 0 or args.clients < 1 or args.interval <= 0:
        p.error("--seconds and --interval must be > 0, --clients >= 1")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
