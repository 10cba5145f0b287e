#!/usr/bin/python3
"""conveyord reading the same images over HTTP with 10 ms and 50 ms of
latency per request, as single files (a dataset.urls list) and as WebDataset
tar shards (dataset.shards URLs: one ranged read per run of up to 16 members,
as a one-rank stream reads them), against its own
local-disk figures (the ImageFolder, and the shards on disk) and against a
PyTorch DataLoader whose workers fetch the URLs with urllib in __getitem__
(as users write it) with 2 and 8 workers. Same images, same transform
(RandomResizedCrop(size) + flip, uint8); rounds alternate the contenders'
order so that a busy shared machine hurts them alike.

    /usr/bin/python3 bench/remote_http.py --conveyord build/server/conveyord \
        [--images 2000] [--epochs 2] [--rounds 3] [--threads 2] \
        [--latencies 10,50] [--workers 2,8] [--dataloader-batches 8] \
        [--server nginx|python]

The HTTP server (one per latency and layout, on loopback) is nginx by
default (bench/nginx_object_server.py: static files with Range support, the
latency a Lua timer; Debian 12: nginx-light libnginx-mod-http-lua, which
scripts/install-deps.sh --bench installs); --server python runs the test
suite's tests/integration/http_object_server.py instead. The server shares
the machine's cores with the daemon, and nginx costs a fraction of the
Python server's CPU per request (a real object store's CPU is not on the
training node). Each conveyord contender reads one stream of
--epochs epochs per round (so epochs after the first show whether the next
epoch starts warm), timed from its first batch to its last. A DataLoader is
bound by latency x workers, so it is timed over --dataloader-batches batches
after its first. The first round is a warm-up (not counted). A contender's
figure is its median over the counted rounds, with their min-max; its ratio
is the median over rounds of that round's images/s over the same round's
local-disk figure of the same layout (files: the folder; tar: the shards on
disk). The server's own CPU per request (user + system of its process over
the requests it answered) is shown for the HTTP rows: it shares the machine
with decode. Prints a Markdown table
(and --json FILE writes the runs).
Target: at 50 ms, conveyord over HTTP >= 90% of its local-disk images/s.

--netns compares the two HTTP clients of the remote reader instead
(remote.direct_http true: the direct HTTP/1.1 client; false: libcurl
alone) in one run, with the object server on another host as far as the
network goes: two network namespaces made for the run, joined by a veth
pair (the server at 10.231.0.1/30, the daemons at 10.231.0.2/30; no other
address is used, and both namespaces are deleted at the end, also on
failure). Two daemons, one per client, read the same streams in turn (the
order alternating by round); the figure is the CPU of the reader's I/O
thread ("remote-io", /proc/PID/task/*/stat) per image, median of the
counted rounds, with the ratio direct / libcurl, and the TCP connections
each stream opened (TcpActiveOpens of the client namespace). The server is
the test suite's Python server (--server is not used). Needs root (ip netns).

    /usr/bin/python3 bench/remote_http.py --netns --images 2000 --epochs 2 --rounds 3 \
        --latencies 50
"""

import argparse
import io
import json
import os
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
sys.path.insert(0, HERE)
from nginx_object_server import NginxObjectServer  # noqa: E402
from tar_vs_folder import write_shards  # noqa: E402  (the same WebDataset layout)


def conveyor_run(address, pipeline, batch_size, first_epoch, epochs):
    """images/s of one stream of `epochs` epochs, first batch to last."""
    import conveyor
    loader = conveyor.Loader(address, pipeline=pipeline, batch_size=batch_size, seed=1, credits=4)
    n = 0
    t0 = None
    try:
        with loader.stream(num_epochs=epochs, first_epoch=first_epoch) as stream:
            for batch in stream:
                if t0 is None:
                    t0 = time.monotonic()
                else:
                    n += batch.num_samples
    finally:
        loader.close()
    return n / (time.monotonic() - t0)


class UrlDataset:
    """What users write: fetch the URL in __getitem__, decode, transform."""

    def __init__(self, urls, size):
        from torchvision import transforms
        self.urls = urls
        self.tf = transforms.Compose([transforms.RandomResizedCrop(size),
                                      transforms.RandomHorizontalFlip(),
                                      transforms.PILToTensor()])

    def __len__(self):
        return len(self.urls)

    def __getitem__(self, i):
        import urllib.request
        from PIL import Image
        url, label = self.urls[i]
        with urllib.request.urlopen(url, timeout=60) as r:
            data = r.read()
        img = Image.open(io.BytesIO(data)).convert("RGB")
        return self.tf(img), label


def dataloader_run(urls, workers, batch_size, size, batches):
    """images/s over `batches` batches after the first."""
    import torch
    from torch.utils.data import DataLoader
    torch.set_num_threads(1)
    dl = DataLoader(UrlDataset(urls, size), batch_size=batch_size, shuffle=True,
                    num_workers=workers)
    n = 0
    t0 = None
    for k, (imgs, _) in enumerate(dl):
        if t0 is None:
            t0 = time.monotonic()
        else:
            n += imgs.shape[0]
        if k >= batches:
            break
    return n / (time.monotonic() - t0)


def cpu_seconds(pid):
    """User + system CPU seconds of a process, all threads (/proc/PID/stat)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def thread_cpu_seconds(pid, name):
    """User + system CPU seconds of the threads of `pid` called `name`."""
    total = 0.0
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/comm" % (pid, tid)) as f:
                if f.read().strip() != name:
                    continue
            with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue  # the thread ended
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


NETNS_SERVER_ADDR = "10.231.0.1"
NETNS_CLIENT_ADDR = "10.231.0.2"


class NetnsPair:
    """Two network namespaces of our own joined by a veth pair: the server's
    end 10.231.0.1/30, the client's 10.231.0.2/30. delete() removes both
    (the veth pair goes with them)."""

    def __init__(self):
        tag = "%d" % os.getpid()
        self.server, self.client = "cvb-srv-" + tag, "cvb-cli-" + tag
        self.made = []
        try:
            for ns in (self.server, self.client):
                subprocess.run(["ip", "netns", "add", ns], check=True)
                self.made.append(ns)
            veth_s, veth_c = "cvbs" + tag, "cvbc" + tag
            subprocess.run(["ip", "link", "add", veth_s, "netns", self.server, "type", "veth",
                            "peer", "name", veth_c, "netns", self.client], check=True)
            for ns, dev, addr in ((self.server, veth_s, NETNS_SERVER_ADDR),
                                  (self.client, veth_c, NETNS_CLIENT_ADDR)):
                self.run_in(ns, ["ip", "addr", "add", addr + "/30", "dev", dev])
                self.run_in(ns, ["ip", "link", "set", dev, "up"])
                self.run_in(ns, ["ip", "link", "set", "lo", "up"])
        except BaseException:
            self.delete()
            raise

    @staticmethod
    def prefix(ns):
        return ["ip", "netns", "exec", ns]

    def run_in(self, ns, cmd):
        subprocess.run(self.prefix(ns) + cmd, check=True)

    def delete(self):
        for ns in reversed(self.made):
            subprocess.run(["ip", "netns", "delete", ns], check=False)
        self.made = []


def tcp_active_opens(ns):
    """TCP connections opened from namespace `ns` so far (/proc/net/snmp there)."""
    out = subprocess.run(NetnsPair.prefix(ns) + ["cat", "/proc/net/snmp"], check=True,
                         capture_output=True, text=True).stdout
    rows = [l.split() for l in out.splitlines() if l.startswith("Tcp:")]
    return int(rows[1][rows[0].index("ActiveOpens")])


class NetnsDaemon(DaemonProcess):
    """conveyord run in a network namespace (ip netns exec execs it: the pid
    is the daemon's). Its unix socket is a path, reachable from here."""

    def __init__(self, ns, *a, **kw):
        super().__init__(*a, **kw)
        self.ns = ns

    def command(self):
        return NetnsPair.prefix(self.ns) + super().command()


def netns_main(args, work, data, files, shards_dir, shards):
    """The direct client against libcurl: I/O-thread CPU-ms per image."""
    ms = ([int(x) for x in args.latencies.split(",") if x] or [50])[-1]
    pair = NetnsPair()
    server = None
    daemons = {}
    try:
        # One server for both layouts: the work folder holds data/ and shards/.
        server = subprocess.Popen(
            NetnsPair.prefix(pair.server) +
            [sys.executable, os.path.join(SOURCE_DIR, "tests", "integration", "http_object_server.py"),
             "--root", work, "--host", NETNS_SERVER_ADDR, "--latency-ms", str(ms)],
            stdout=subprocess.PIPE, text=True)
        line = server.stdout.readline()
        if not line.startswith("PORT "):
            raise RuntimeError("object server did not start: %r" % line)
        base = "http://%s:%d" % (NETNS_SERVER_ADDR, int(line.split()[1]))
        lst = os.path.join(work, "urls.tsv")
        with open(lst, "w") as u:
            for path, label in files:
                u.write("%s/data/%s\t%d\n" % (base, path, label))
        layouts = [("files", "{urls: %s}" % json.dumps(lst))]
        if shards:
            urls = ["%s/shards/%s" % (base, n) for n in shards]
            layouts.append(("tar", "{shards: %s}" % json.dumps(urls)))
        clients = [("direct", "true"), ("libcurl", "false")]
        for name, flag in clients:
            cfg = os.path.join(work, "conveyord-%s.yaml" % name)
            with open(cfg, "w") as f:
                f.write("threads: %d\nlog_level: warn\n"
                        "remote: {max_connections_per_host: 128, direct_http: %s}\npipelines:\n"
                        % (args.threads, flag))
                for layout, dataset in layouts:
                    f.write("  %s:\n    dataset: %s\n    augment: train\n    size: %d\n"
                            "    layout: nchw\n    dtype: uint8\n    max_batch_size: 1024\n"
                            % (layout, dataset, args.size))
            d = NetnsDaemon(pair.client, args.conveyord, cfg,
                            workdir=os.path.join(work, "d-" + name), threads=args.threads)
            daemons[name] = d
            d.start(timeout=120)
        io = {(c, l): [] for c, _ in clients for l, _ in layouts}
        total = {(c, l): [] for c, _ in clients for l, _ in layouts}
        ips = {(c, l): [] for c, _ in clients for l, _ in layouts}
        conns = {(c, l): [] for c, _ in clients for l, _ in layouts}
        images = len(files) * args.epochs
        for rnd in range(args.rounds):
            order = clients if rnd % 2 == 0 else clients[::-1]
            for layout, _ in layouts:
                for c, _ in order:
                    d = daemons[c]
                    opens = tcp_active_opens(pair.client)
                    t0, c0 = thread_cpu_seconds(d.pid, "remote-io"), cpu_seconds(d.pid)
                    rate = conveyor_run(d.address, layout, args.batch_size, rnd * args.epochs,
                                        args.epochs)
                    io_ms = 1000 * (thread_cpu_seconds(d.pid, "remote-io") - t0) / images
                    all_ms = 1000 * (cpu_seconds(d.pid) - c0) / images
                    opened = tcp_active_opens(pair.client) - opens
                    print("round %d  %-7s %-5s %7.1f images/s  I/O thread %.4f CPU-ms/image  "
                          "daemon %.3f CPU-ms/image  %d connections opened"
                          % (rnd, c, layout, rate, io_ms, all_ms, opened),
                          file=sys.stderr, flush=True)
                    if rnd > 0 or args.rounds == 1:
                        io[(c, layout)].append(io_ms)
                        total[(c, layout)].append(all_ms)
                        ips[(c, layout)].append(rate)
                        conns[(c, layout)].append(opened)
    finally:
        for d in daemons.values():
            d.stop()
        if server is not None:
            server.terminate()
            server.wait(timeout=10)
        pair.delete()
    med = statistics.median
    print("| data | client | I/O thread CPU-ms/image median (min-max) | daemon CPU-ms/image | "
          "images/s | connections opened per stream | I/O CPU direct / libcurl |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for layout, _ in layouts:
        ratio = med(io[("direct", layout)]) / med(io[("libcurl", layout)])
        for c, _ in clients:
            v = io[(c, layout)]
            print("| %s | %s | %.4f (%s) | %.3f | %.0f | %.0f | %s |" % (
                "single files" if layout == "files" else "tar shards", c, med(v),
                span(v, "%.4f"), med(total[(c, layout)]), med(ips[(c, layout)]),
                med(conns[(c, layout)]),
                "%.0f%%" % (100 * ratio) if c == "direct" else ""))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"io_thread_cpu_ms_per_image": {"%s/%s" % k: v for k, v in io.items()},
                       "daemon_cpu_ms_per_image": {"%s/%s" % k: v for k, v in total.items()},
                       "images_per_s": {"%s/%s" % k: v for k, v in ips.items()},
                       "connections_opened": {"%s/%s" % k: v for k, v in conns.items()},
                       "latency_ms": ms, "args": vars(args)}, f, indent=1)
    return 0


def span(values, fmt="%.0f"):
    if not values:
        return "-"
    return (fmt + "-" + fmt) % (min(values), max(values))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--conveyord", default=os.path.join(SOURCE_DIR, "build", "server", "conveyord"))
    ap.add_argument("--data", help="an ImageFolder tree (default: generated, --images)")
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--epochs", type=int, default=2, help="epochs per conveyord stream")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--latencies", default="10,50")
    ap.add_argument("--workers", default="2,8")
    ap.add_argument("--dataloader-batches", type=int, default=8)
    ap.add_argument("--per-shard", type=int, default=250, help="images per tar shard")
    ap.add_argument("--no-tar", action="store_true", help="single files only")
    ap.add_argument("--server", choices=["nginx", "python"], default="nginx",
                    help="the object server: nginx (default; nginx-light and "
                    "libnginx-mod-http-lua, scripts/install-deps.sh --bench) or the test "
                    "suite's Python asyncio server")
    ap.add_argument("--netns", action="store_true",
                    help="the direct HTTP client against libcurl, the server in a network "
                    "namespace of its own (root; the test suite's Python server at the last "
                    "of --latencies)")
    ap.add_argument("--json")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="rh-", dir="/tmp")
    data = args.data
    if data is None:
        data = os.path.join(work, "data")
        subprocess.run([sys.executable, os.path.join(HERE, "gen_imagenet_like.py"), "--out", data,
                        "--images", str(args.images), "--classes", "8"], check=True,
                       stdout=subprocess.DEVNULL)
    data = os.path.abspath(data)
    files = labelled_images(data)
    shards_dir = os.path.join(work, "shards")
    shards = [] if args.no_tar else [
        os.path.basename(p) for p in write_shards(
            [(os.path.join(data, path), label) for path, label in files], shards_dir, args.per_shard)]
    if args.netns:
        if args.data is not None:
            ap.error("--netns serves generated images (--images), not --data")
        return netns_main(args, work, data, files, shards_dir, shards)
    latencies = [int(x) for x in args.latencies.split(",") if x]
    workers = [int(x) for x in args.workers.split(",") if x]

    def object_server(root, ms):
        if args.server == "nginx":
            return NginxObjectServer(root, ms)
        return ObjectServer(root, "--latency-ms", str(ms))

    servers = {}
    try:
        for ms in latencies:
            servers[("files", ms)] = object_server(data, ms)
            if shards:
                servers[("tar", ms)] = object_server(shards_dir, ms)
    except BaseException:
        for s in servers.values():
            s.stop()
        raise
    cfg = os.path.join(work, "conveyord.yaml")
    with open(cfg, "w") as f:
        f.write("threads: %d\nlog_level: warn\nremote: {max_connections_per_host: 128}\n"
                "pipelines:\n" % args.threads)
        common = ("    augment: train\n    size: %d\n    layout: nchw\n    dtype: uint8\n"
                  "    max_batch_size: 1024\n" % args.size)
        f.write("  local:\n    dataset: {root: %s}\n%s" % (json.dumps(data), common))
        if shards:
            local = [os.path.join(shards_dir, n) for n in shards]
            f.write("  tarlocal:\n    dataset: {shards: %s}\n%s" % (json.dumps(local), common))
        for ms in latencies:
            srv = servers[("files", ms)]
            lst = os.path.join(work, "urls%d.tsv" % ms)
            with open(lst, "w") as u:
                for path, label in files:
                    u.write("%s/%s\t%d\n" % (srv.base, path, label))
            f.write("  http%d:\n    dataset: {urls: %s}\n%s" % (ms, json.dumps(lst), common))
            if shards:
                urls = ["%s/%s" % (servers[("tar", ms)].base, n) for n in shards]
                f.write("  tar%d:\n    dataset: {shards: %s}\n%s" % (ms, json.dumps(urls), common))
    daemon = DaemonProcess(args.conveyord, cfg, workdir=work, threads=args.threads)
    # (who, layout, where, pipeline or None, server key or None, workers or None)
    contenders = [("conveyord", "files", "local disk", "local", None, None)]
    if shards:
        contenders.append(("conveyord", "tar", "local disk", "tarlocal", None, None))
    for ms in latencies:
        contenders.append(("conveyord", "files", "HTTP %d ms" % ms, "http%d" % ms, ("files", ms), None))
        if shards:
            contenders.append(("conveyord", "tar", "HTTP %d ms" % ms, "tar%d" % ms, ("tar", ms), None))
        for w in workers:
            contenders.append(("DataLoader %d workers (urllib)" % w, "files", "HTTP %d ms" % ms,
                               None, ("files", ms), w))
    key = lambda c: "%s / %s / %s" % (c[0], c[1], c[2])  # noqa: E731
    runs = {key(c): [] for c in contenders}
    cpu_ms = {key(c): [] for c in contenders}
    daemon_ms = {key(c): [] for c in contenders}
    try:
        daemon.start(timeout=120)  # HTTP shards are indexed at start
        for rnd in range(args.rounds):
            order = contenders[:] if rnd % 2 == 0 else contenders[::-1]
            for c in order:
                who, layout, where, pipe, srv_key, w = c
                srv = servers.get(srv_key)
                before = srv.stats() if srv else None
                if w is None:
                    d0 = cpu_seconds(daemon.pid)
                    ips = conveyor_run(daemon.address, pipe, args.batch_size, rnd * args.epochs,
                                       args.epochs)
                    # The daemon's CPU per image of the stream (all its threads: decode,
                    # the I/O thread, gRPC), start-up included.
                    d_ms = 1000 * (cpu_seconds(daemon.pid) - d0) / (len(files) * args.epochs)
                    if rnd > 0 or args.rounds == 1:
                        daemon_ms[key(c)].append(d_ms)
                else:
                    urls = [("%s/%s" % (srv.base, p), l) for p, l in files]
                    ips = dataloader_run(urls, w, args.batch_size, args.size,
                                         args.dataloader_batches)
                extra = "  conveyord %.2f CPU-ms/image" % d_ms if w is None else ""
                if srv:
                    after = srv.stats()
                    reqs = after["requests"] - before["requests"]  # stats requests not counted
                    if reqs > 0:
                        ms_per = 1000 * (after["cpu_s"] - before["cpu_s"]) / reqs
                        extra += "  server %.2f CPU-ms/request (%d requests)" % (ms_per, reqs)
                        if rnd > 0 or args.rounds == 1:
                            cpu_ms[key(c)].append(ms_per)
                print("round %d  %-32s %-5s %-12s %8.1f images/s%s" % (rnd, who, layout, where,
                                                                      ips, extra),
                      file=sys.stderr, flush=True)
                if rnd > 0 or args.rounds == 1:
                    runs[key(c)].append(ips)
    finally:
        daemon.stop()
        for s in servers.values():
            s.stop()
    counted = len(runs[key(contenders[0])])
    local_of = {"files": runs["conveyord / files / local disk"],
                "tar": runs.get("conveyord / tar / local disk", [])}
    print("| loader | data | where | images/s median (min-max of %d rounds) | "
          "vs local disk, same layout: median (min-max) of per-round ratios | "
          "conveyord CPU-ms/image | server CPU-ms/request |" % counted)
    print("|---|---|---|---:|---:|---:|---:|")
    for c in contenders:
        who, layout, where = c[0], c[1], c[2]
        v = runs[key(c)]
        local = local_of[layout]
        ratios = [100 * a / b for a, b in zip(v, local)]
        cpu = cpu_ms[key(c)]
        dcpu = daemon_ms[key(c)]
        print("| %s | %s | %s | %.0f (%s) | %.0f%% (%s) | %s | %s |" % (
            who, "single files" if layout == "files" else "tar shards", where,
            statistics.median(v), span(v), statistics.median(ratios), span(ratios, "%.0f%%"),
            "%.2f" % statistics.median(dcpu) if dcpu else "-",
            "%.2f" % statistics.median(cpu) if cpu else "-"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"images_per_s": runs, "server": args.server,
                       "server_cpu_ms_per_request": cpu_ms,
                       "conveyord_cpu_ms_per_image": daemon_ms,
                       "args": vars(args)}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
