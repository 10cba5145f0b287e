#!/usr/bin/python3
"""conveyord reading single files over HTTP with 10 ms and 50 ms of latency
per request, against its own local-disk figure and against a PyTorch
DataLoader whose workers fetch the URLs with urllib in __getitem__ (as
users write it) with 2 and 8 workers. Same images, same transform
(RandomResizedCrop(size) + flip, uint8); rounds alternate the contenders so
that a busy shared machine hurts them alike.

    /usr/bin/python3 bench/remote_http.py --conveyord build/server/conveyord \
        [--images 384] [--rounds 3] [--threads 2] [--latencies 10,50] [--workers 2,8]

The HTTP server is tests/integration/http_object_server.py (one per latency,
on loopback). The first round is a warm-up (not counted); the figure of a
contender is its median over the other rounds of images/s from its first
batch to its last. Prints a Markdown table (and --json FILE writes the runs).
Target: at 50 ms, conveyord over HTTP >= 90% of its local-disk images/s.
"""

import argparse
import io
import json
import os
import random
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
from remote_fixtures import ObjectServer  # noqa: E402


def image_list(root):
    classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    out = []
    for label, c in enumerate(classes):
        for f in sorted(os.listdir(os.path.join(root, c))):
            out.append(("%s/%s" % (c, f), label))
    return out


def conveyor_epoch(address, pipeline, batch_size, epoch):
    import conveyor
    loader = conveyor.Loader(address, pipeline=pipeline, batch_size=batch_size, seed=1, credits=4)
    n = 0
    t0 = None
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


def dataloader_epoch(urls, workers, batch_size, size):
    import torch
    from torch.utils.data import DataLoader
    torch.set_num_threads(1)
    dl = DataLoader(UrlDataset(urls, size), batch_size=batch_size, shuffle=True,
                    num_workers=workers)
    n = 0
    t0 = None
    for imgs, _ in dl:
        if t0 is None:
            t0 = time.monotonic()
        else:
            n += imgs.shape[0]
    return n / (time.monotonic() - t0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--conveyord", default=os.path.join(SOURCE_DIR, "build", "server", "conveyord"))
    ap.add_argument("--data", help="an ImageFolder tree (default: generated, --images)")
    ap.add_argument("--images", type=int, default=384)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--latencies", default="10,50")
    ap.add_argument("--workers", default="2,8")
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
    files = image_list(data)
    latencies = [int(x) for x in args.latencies.split(",")]
    workers = [int(x) for x in args.workers.split(",")]
    servers = {ms: ObjectServer(data, "--latency-ms", str(ms)) for ms in latencies}
    cfg = os.path.join(work, "conveyord.yaml")
    with open(cfg, "w") as f:
        f.write("threads: %d\nlog_level: warn\nremote: {max_connections_per_host: 128}\n"
                "pipelines:\n" % args.threads)
        common = ("    augment: train\n    size: %d\n    layout: nchw\n    dtype: uint8\n"
                  "    max_batch_size: 1024\n" % args.size)
        f.write("  local:\n    dataset: {root: %s}\n%s" % (json.dumps(data), common))
        for ms, srv in servers.items():
            lst = os.path.join(work, "urls%d.tsv" % ms)
            with open(lst, "w") as u:
                for path, label in files:
                    u.write("%s/%s\t%d\n" % (srv.base, path, label))
            f.write("  http%d:\n    dataset: {urls: %s}\n%s" % (ms, json.dumps(lst), common))
    daemon = DaemonProcess(args.conveyord, cfg, workdir=work, threads=args.threads)
    contenders = [("conveyord", "local disk", None, None)]
    for ms in latencies:
        contenders.append(("conveyord", "HTTP %d ms" % ms, ms, None))
        for w in workers:
            contenders.append(("DataLoader %d workers (urllib)" % w, "HTTP %d ms" % ms, ms, w))
    runs = {(c[0], c[1]): [] for c in contenders}
    try:
        daemon.start(timeout=60)
        for rnd in range(args.rounds):
            order = contenders[:] if rnd % 2 == 0 else contenders[::-1]
            for who, where, ms, w in order:
                if w is None:
                    pipe = "local" if ms is None else "http%d" % ms
                    ips = conveyor_epoch(daemon.address, pipe, args.batch_size, rnd)
                else:
                    urls = [("%s/%s" % (servers[ms].base, p), l) for p, l in files]
                    ips = dataloader_epoch(urls, w, args.batch_size, args.size)
                print("round %d  %-32s %-12s %8.1f images/s" % (rnd, who, where, ips),
                      file=sys.stderr, flush=True)
                if rnd > 0 or args.rounds == 1:
                    runs[(who, where)].append(ips)
    finally:
        daemon.stop()
        for s in servers.values():
            s.stop()
    local = statistics.median(runs[("conveyord", "local disk")])
    print("| loader | data | images/s (median) | vs conveyord local disk |")
    print("|---|---|---:|---:|")
    for who, where, _, _ in contenders:
        m = statistics.median(runs[(who, where)])
        print("| %s | %s | %.1f | %.0f%% |" % (who, where, m, 100 * m / local))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"%s / %s" % k: v for k, v in runs.items()}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
