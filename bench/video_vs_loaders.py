#!/usr/bin/env python3
"""Video clips/s and CPU-ms per clip: conveyord against a PyTorch DataLoader
whose workers decode with PyAV, and against SPDL, on the same files and the
same clip spec, in alternating rounds of one run.

    python3 bench/video_vs_loaders.py [--videos 24] [--clips 192] [--rounds 3]
        [--workers 2] [--build build] [--quick]

Data: --videos H.264 MP4 files (320x240, 30 fps, 4 s, keyframe every 30,
B-frames, noise so that decoding costs what camera footage costs), made once
with the ffmpeg CLI under --data (default /tmp/conveyor-video-bench).
Clip spec for every contender: 8 frames at stride 2 from a random start,
one random crop box (about 60-100 % of the area) scaled to 112x112 RGB uint8,
batches of 8, --workers decode threads or processes each:
  conveyord  kind: video pipeline, `threads: --workers`, Python Loader
             (inline transport), the daemon's and the client's CPU counted.
  pyav-dl    torch DataLoader(num_workers=--workers); each item opens the
             file with PyAV (Debian's python3-av), seeks to the keyframe
             before the clip, decodes with one codec thread, converts to
             rgb24, crops in numpy and resizes with torch (bilinear).
  spdl       spdl.io (venv `spdl`, scripts/venvs/spdl.txt) in a thread pool
             of --workers: demux_video over the clip's time window, decode
             with one codec thread and an FFmpeg filter (crop, scale,
             rgb24), every 2nd frame kept. Skipped when its venv is missing.
Each contender runs in its own process (started fresh per round); CPU is
user+system of the whole process tree (children and the daemon included).
Prints one JSON line per run and a table of medians over rounds.
"""

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(SOURCE_DIR, "client", "python"))

T, STRIDE, OUT, FPS, BATCH = 8, 2, 112, 30, 8


def make_videos(data, n):
    folder = os.path.join(data, "clips", "a")
    os.makedirs(folder, exist_ok=True)
    for i in range(n):
        path = os.path.join(folder, "v%03d.mp4" % i)
        if not os.path.exists(path):
            subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i",
                            "testsrc2=size=320x240:rate=%d:duration=4" % FPS, "-vf",
                            "noise=alls=%d:allf=t,hue=H=%d*t" % (10 + i % 20, i % 7),
                            "-c:v", "libx264", "-g", "30", "-bf", "2", "-pix_fmt", "yuv420p",
                            path], check=True)
    return sorted(os.path.join(folder, f) for f in os.listdir(folder))


def cpu_seconds_children():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def proc_cpu(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def random_box(rng, w, h):
    area = w * h * rng.uniform(0.6, 1.0)
    aspect = rng.uniform(3 / 4, 4 / 3)
    cw = min(w, int(round((area * aspect) ** 0.5)))
    ch = min(h, int(round((area / aspect) ** 0.5)))
    return rng.randint(0, h - ch) & ~1, rng.randint(0, w - cw) & ~1, ch, cw


# --- contenders (each runs in a child process: `--contender NAME`) -----------
def run_conveyor(args, files):
    import conveyor
    from conveyor.daemon import DaemonProcess
    workdir = os.path.join(args.data, "daemon")
    os.makedirs(workdir, exist_ok=True)
    cfg = os.path.join(workdir, "conveyord.yaml")
    root = os.path.dirname(os.path.dirname(files[0]))
    with open(cfg, "w") as f:
        f.write("threads: %d\nmemory_budget: 256MiB\nlog_level: warn\npipelines:\n  clips:\n"
                "    dataset: {root: %s}\n    kind: video\n    size: %d\n    clip_frames: %d\n"
                "    frame_stride: %d\n    scale: [0.6, 1.0]\n    max_batch_size: 64\n"
                % (args.workers, root, OUT, T, STRIDE))
    d = DaemonProcess(os.path.join(args.build, "server", "conveyord"), cfg, workdir=workdir,
                      threads=args.workers)
    d.start(60)
    try:
        loader = conveyor.Loader(d.unix, pipeline="clips", batch_size=BATCH, seed=1,
                                 transport="inline", credits=4)
        cpu0 = proc_cpu(d.pid) + time.process_time()
        t0 = time.monotonic()
        clips, epoch = 0, 0
        while clips < args.clips:
            with loader.epoch(epoch) as stream:
                for b in stream:
                    assert b.images.shape[1:] == (T, 3, OUT, OUT)
                    clips += len(b)
                    if clips >= args.clips:
                        break
            epoch += 1
        wall = time.monotonic() - t0
        cpu = proc_cpu(d.pid) + time.process_time() - cpu0
        loader.close()
    finally:
        d.stop() if hasattr(d, "stop") else d.terminate()
    return clips, wall, cpu


class PyAvClips:
    def __init__(self, files):
        self.files = files

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        import av
        import numpy as np
        import torch
        rng = random.Random(hash((i, time.monotonic_ns())))
        with av.open(self.files[i]) as container:
            stream = container.streams.video[0]
            stream.codec_context.thread_count = 1
            stream.thread_type = "NONE"
            n = stream.frames
            start = rng.randint(0, n - 1 - (T - 1) * STRIDE)
            want = set(range(start, start + T * STRIDE, STRIDE))
            tb = stream.time_base
            container.seek(int(start / FPS / tb), stream=stream, backward=True)
            top, left, ch, cw = random_box(rng, stream.width, stream.height)
            frames = []
            for frame in container.decode(stream):
                idx = int(round(float(frame.pts * tb) * FPS))
                if idx in want:
                    rgb = frame.to_ndarray(format="rgb24")[top:top + ch, left:left + cw]
                    frames.append(torch.from_numpy(np.ascontiguousarray(rgb)))
                if idx >= max(want) or len(frames) == T:
                    break
        x = torch.stack(frames).permute(0, 3, 1, 2).float()
        x = torch.nn.functional.interpolate(x, size=(OUT, OUT), mode="bilinear",
                                            align_corners=False)
        return x.round().clamp(0, 255).to(torch.uint8), 0


def run_pyav(args, files):
    import torch
    torch.set_num_threads(1)

    def init(_):
        torch.set_num_threads(1)
    ds = PyAvClips(files)
    t0 = time.monotonic()
    cpu0 = time.process_time() + cpu_seconds_children()
    clips = 0
    while clips < args.clips:
        dl = torch.utils.data.DataLoader(ds, batch_size=BATCH, shuffle=True,
                                         num_workers=args.workers, worker_init_fn=init,
                                         prefetch_factor=4)
        for x, _ in dl:
            assert tuple(x.shape[1:]) == (T, 3, OUT, OUT)
            clips += len(x)
            if clips >= args.clips:
                break
        del dl  # workers exit; their CPU joins RUSAGE_CHILDREN
    wall = time.monotonic() - t0
    import gc
    gc.collect()
    time.sleep(0.5)
    cpu = time.process_time() + cpu_seconds_children() - cpu0
    return clips, wall, cpu


def run_spdl(args, files):
    import concurrent.futures
    import numpy as np
    import spdl.io
    # Also loads libspdl on this thread, before the pool's threads race to
    # load it (and initialize its glog twice, which aborts); see vs_peers.py.
    config = spdl.io.decode_config(decoder_options={"threads": "1"})
    rng = random.Random(1)
    w, h, n = 320, 240, 4 * FPS

    def one(path, seed):
        r = random.Random(seed)
        start = r.randint(0, n - 1 - (T - 1) * STRIDE)
        top, left, ch, cw = random_box(r, w, h)
        t0 = start / FPS
        packets = spdl.io.demux_video(path, timestamp=(t0, t0 + (T * STRIDE - 0.5) / FPS))
        frames = spdl.io.decode_packets(
            packets, filter_desc="crop=%d:%d:%d:%d,scale=%d:%d:flags=bilinear,format=rgb24"
            % (cw, ch, left, top, OUT, OUT), decode_config=config)
        a = np.asarray(spdl.io.convert_frames(frames))[::STRIDE][:T]
        return a.transpose(0, 3, 1, 2)

    t0 = time.monotonic()
    cpu0 = time.process_time()
    clips = 0
    with concurrent.futures.ThreadPoolExecutor(args.workers) as pool:
        while clips < args.clips:
            order = list(range(len(files)))
            rng.shuffle(order)
            futures = [pool.submit(one, files[i], rng.random()) for i in order]
            for k in range(0, len(futures), BATCH):
                batch = np.stack([f.result() for f in futures[k:k + BATCH]])
                assert batch.shape[1:] == (T, 3, OUT, OUT), batch.shape
                clips += len(batch)
                if clips >= args.clips:
                    break
    wall = time.monotonic() - t0
    cpu = time.process_time() - cpu0
    return clips, wall, cpu


CONTENDERS = {"conveyord": run_conveyor, "pyav-dl": run_pyav, "spdl": run_spdl}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--videos", type=int, default=24)
    p.add_argument("--clips", type=int, default=192)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--build", default=os.path.join(SOURCE_DIR, "build"))
    p.add_argument("--data", default="/tmp/conveyor-video-bench")
    p.add_argument("--quick", action="store_true", help="one round of 32 clips")
    p.add_argument("--contender")
    args = p.parse_args()
    if args.quick:
        args.rounds, args.clips = 1, 32
    files = make_videos(args.data, args.videos)
    if args.contender:
        clips, wall, cpu = CONTENDERS[args.contender](args, files)
        print(json.dumps({"contender": args.contender, "clips": clips, "wall_s": wall,
                          "cpu_s": cpu}))
        return
    spdl_python = None
    try:
        spdl_python = subprocess.run([os.path.join(SOURCE_DIR, "scripts", "venv.sh"), "spdl"],
                                     check=True, capture_output=True, text=True).stdout.strip()
    except (subprocess.CalledProcessError, OSError) as e:
        print("spdl skipped: no venv (%s)" % e, file=sys.stderr)
    results = {c: [] for c in CONTENDERS}
    for r in range(args.rounds):
        for c in CONTENDERS:
            python = spdl_python if c == "spdl" else sys.executable
            if python is None:
                continue
            cmd = [python, os.path.abspath(__file__), "--contender", c, "--videos",
                   str(args.videos), "--clips", str(args.clips), "--workers", str(args.workers),
                   "--build", args.build, "--data", args.data]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            res = json.loads(out.strip().splitlines()[-1])
            res["round"] = r
            res["clips_per_s"] = res["clips"] / res["wall_s"]
            res["cpu_ms_per_clip"] = 1000 * res["cpu_s"] / res["clips"]
            print(json.dumps(res), flush=True)
            results[c].append(res)
    print("\n| contender | clips/s (median) | CPU-ms per clip (median) |")
    print("|---|---|---|")
    med = {}
    for c, runs in results.items():
        if runs:
            med[c] = (statistics.median(x["clips_per_s"] for x in runs),
                      statistics.median(x["cpu_ms_per_clip"] for x in runs))
            print("| %s | %.1f | %.1f |" % (c, med[c][0], med[c][1]))
    if "conveyord" in med:
        for c in ("pyav-dl", "spdl"):
            if c in med:
                print("conveyord / %s: %.2fx clips/s, %.2fx CPU per clip"
                      % (c, med["conveyord"][0] / med[c][0], med["conveyord"][1] / med[c][1]))


if __name__ == "__main__":
    main()
