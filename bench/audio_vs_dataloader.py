#!/usr/bin/python3
"""Audio clips: conveyord against a PyTorch DataLoader whose workers decode with PyAV.

    /usr/bin/python3 bench/audio_vs_dataloader.py [--data DIR] [--files 96] [--seconds 10]
        [--formats mp3,flac] [--rounds 3] [--epochs 2] [--batch-size 32] [--threads 2]
        [--workers 2] [--build DIR] [--json-out FILE]

The same work for both, per format: files of --seconds of 44.1 kHz stereo
sines (made with the ffmpeg CLI into --data, kept between runs), each
sample decoded, resampled to 16 kHz mono and cropped to a random one-second
window, float32 batches [B, 1, 16000] of --batch-size, shuffled.

Contenders:
  conveyord      conveyord (--threads) with a `kind: audio` pipeline and the
                 Python client (conveyor.Loader, unix socket, shared memory).
                 WAV/FLAC are seeked (only the window is decoded); lossy
                 formats are decoded whole, like PyAV below.
  dataloader     torch DataLoader(num_workers=--workers, persistent workers)
                 over a Dataset whose __getitem__ opens the file with PyAV
                 (Debian's python3-av), decodes every frame, resamples with
                 av.AudioResampler(fltp, mono, 16000) and crops a random
                 window with numpy (padded with zeros when short).
Rounds alternate the contenders (conveyord, dataloader, conveyord, ...), each
started fresh; per round one warm-up epoch, then --epochs timed epochs.
clips/s = clips / wall time from asking for the epoch to holding its last
batch (the batch is dropped untouched). Reported: the median over rounds of
each, and their ratio. The machine may be shared: compare ratios, not
absolute figures.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(SOURCE_DIR, "client", "python"))

import conveyor  # noqa: E402
from conveyor.daemon import DaemonProcess  # noqa: E402

RATE = 16000
CLIP = 16000
CODEC_OPTS = {"mp3": ["-c:a", "libmp3lame", "-b:a", "128k"], "flac": ["-c:a", "flac"],
              "wav": ["-c:a", "pcm_s16le"], "opus": ["-c:a", "libopus", "-b:a", "96k"],
              "m4a": ["-c:a", "aac", "-b:a", "128k"]}


def make_files(folder, fmt, count, seconds):
    os.makedirs(folder, exist_ok=True)
    paths = []
    for i in range(count):
        path = os.path.join(folder, "clip%04d.%s" % (i, fmt))
        if not os.path.exists(path):
            f1, f2 = 200 + 7 * i, 300 + 11 * i
            tmp = path + ".partial." + fmt
            subprocess.run(["ffmpeg", "-v", "error", "-y",
                             "-f", "lavfi", "-i", "sine=frequency=%d:sample_rate=44100:duration=%s"
                             % (f1, seconds),
                             "-f", "lavfi", "-i", "sine=frequency=%d:sample_rate=44100:duration=%s"
                             % (f2, seconds),
                             "-filter_complex", "amerge=inputs=2", *CODEC_OPTS[fmt], tmp],
                            check=True)
            os.replace(tmp, path)
        paths.append(path)
    with open(os.path.join(folder, "list.txt"), "w") as f:
        for i, p in enumerate(paths):
            f.write("%s\t%d\n" % (os.path.basename(p), i % 10))
    return paths


# --- PyAV + DataLoader -------------------------------------------------------
class PyAVClips:
    """A map-style Dataset: decode + resample (PyAV) + random crop (numpy)."""

    def __init__(self, paths):
        self.paths = paths
        self.epoch = 0

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        import av
        with av.open(self.paths[i]) as c:
            stream = c.streams.audio[0]
            stream.thread_type = "SLICE"
            stream.codec_context.thread_count = 1
            resampler = av.AudioResampler(format="fltp", layout="mono", rate=RATE)
            parts = []
            for frame in c.decode(stream):
                for out in resampler.resample(frame):
                    parts.append(out.to_ndarray())
            for out in resampler.resample(None):
                parts.append(out.to_ndarray())
        x = np.concatenate(parts, axis=1) if parts else np.zeros((1, 0), np.float32)
        rng = np.random.default_rng((self.epoch, i))
        n = x.shape[1]
        clip = np.zeros((1, CLIP), np.float32)
        if n >= CLIP:
            s = int(rng.integers(0, n - CLIP + 1))
            clip[:] = x[:, s:s + CLIP]
        else:
            clip[:, :n] = x
        return clip, i % 10


def run_dataloader(paths, args):
    import torch
    import torch.utils.data as tud
    ds = PyAVClips(paths)
    g = torch.Generator()
    g.manual_seed(0)
    dl = tud.DataLoader(ds, batch_size=args.batch_size, shuffle=True, generator=g,
                        num_workers=args.workers, persistent_workers=True)
    rates = []
    for epoch in range(args.epochs + 1):
        t0 = time.monotonic()
        n = 0
        for x, _ in dl:
            assert x.shape[1:] == (1, CLIP)
            n += x.shape[0]
        dt = time.monotonic() - t0
        if epoch > 0:  # the first epoch starts the workers: warm-up
            rates.append(n / dt)
    del dl
    return rates


# --- conveyord ---------------------------------------------------------------
def run_conveyord(folder, args, workdir):
    cfg = os.path.join(workdir, "conveyord.yaml")
    with open(cfg, "w") as f:
        f.write("threads: %d\nlog_level: warn\npipelines:\n  audio:\n" % args.threads)
        f.write("    kind: audio\n    dataset: {list: %s}\n" % json.dumps(
            os.path.join(folder, "list.txt")))
        f.write("    augment: train\n    max_batch_size: %d\n" % args.batch_size)
        f.write("    audio: {sample_rate: %d, channels: 1, clip_samples: %d}\n" % (RATE, CLIP))
    conveyord = os.path.join(args.build, "server", "conveyord")
    d = DaemonProcess(conveyord, cfg, workdir=workdir, threads=args.threads)
    d.start()
    try:
        loader = conveyor.Loader(d.unix, pipeline="audio", batch_size=args.batch_size, seed=0)
        rates = []
        for epoch in range(args.epochs + 1):
            t0 = time.monotonic()
            n = 0
            with loader.epoch(epoch) as stream:
                for b in stream:
                    assert b.images.shape[1:] == (1, CLIP) and not b.failures
                    n += b.num_samples
            dt = time.monotonic() - t0
            if epoch > 0:
                rates.append(n / dt)
        loader.close()
        return rates
    finally:
        d.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=os.path.join(tempfile.gettempdir(), "conveyor_audio_bench"))
    ap.add_argument("--files", type=int, default=96)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--formats", default="mp3,flac")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--build", default=os.path.join(SOURCE_DIR, "build"))
    ap.add_argument("--json-out")
    args = ap.parse_args()
    results = {}
    for fmt in args.formats.split(","):
        folder = os.path.join(args.data, "%s_%d_%gs" % (fmt, args.files, args.seconds))
        paths = make_files(folder, fmt, args.files, args.seconds)
        per = {"conveyord": [], "dataloader": []}
        for r in range(args.rounds):
            with tempfile.TemporaryDirectory(prefix="conveyor_audio_bench_") as wd:
                per["conveyord"] += run_conveyord(folder, args, wd)
            per["dataloader"] += run_dataloader(paths, args)
            print("%s round %d: conveyord %.1f clips/s, dataloader %.1f clips/s"
                  % (fmt, r + 1, statistics.median(per["conveyord"][-args.epochs:]),
                     statistics.median(per["dataloader"][-args.epochs:])), flush=True)
        med = {k: statistics.median(v) for k, v in per.items()}
        results[fmt] = {"clips_per_s": per, "median": med,
                        "ratio": med["conveyord"] / med["dataloader"]}
    print("\n| format | conveyord clips/s | DataLoader(w=%d)+PyAV clips/s | ratio |" % args.workers)
    print("|---|---|---|---|")
    for fmt, r in results.items():
        print("| %s | %.1f (%.1f–%.1f) | %.1f (%.1f–%.1f) | %.2f× |" % (
            fmt, r["median"]["conveyord"], min(r["clips_per_s"]["conveyord"]),
            max(r["clips_per_s"]["conveyord"]), r["median"]["dataloader"],
            min(r["clips_per_s"]["dataloader"]), max(r["clips_per_s"]["dataloader"]), r["ratio"]))
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"args": vars(args), "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
