"""Video pipelines (kind: video) through the real daemon, on files made here
with the ffmpeg CLI: every frame a distinct colour, several codecs and
containers (MPEG-4 Part 2 in MP4 among them), a variable-frame-rate file, files with rotation metadata (90, 180
and 270 degrees), an odd size. Each clip is compared byte for byte with
ffmpeg's own decode (autorotated, as ffmpeg does by default; with
`autorotate: false`, ffmpeg -noautorotate) through the same filter chain
(core/decode/video_clip_decoder.h), at the frame indices the documented rule gives
from ffprobe's packet timestamps. Then determinism and exact resume,
and hostile files (truncated, broken index, too large, too long, too many
frames to decode, not a video) as per-sample failures naming the reason."""

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import conveyor
from conveyor_integration import daemon_config, scaled

pytestmark = pytest.mark.skipif(shutil.which("ffmpeg") is None or shutil.which("ffprobe") is None,
                                reason="needs the ffmpeg and ffprobe CLI")

OUT = 32  # output side


def _frames(n, w, h):
    """n distinct RGB frames: a colour per frame over a horizontal ramp."""
    x = np.linspace(0, 60, w, dtype=np.float32)[None, :, None]
    out = []
    for i in range(n):
        base = np.array([(i * 37) % 180, (i * 91) % 180, (i * 13 + 40) % 180], np.float32)
        out.append(np.broadcast_to(base + x, (h, w, 3)).astype(np.uint8))
    return np.stack(out)


def _encode(path, n=40, w=96, h=64, rate=25, args=(), vf=None):
    """Encodes _frames(n, w, h) at `rate` fps with extra output `args`."""
    cmd = ["ffmpeg", "-v", "error", "-y", "-f", "rawvideo", "-pix_fmt", "rgb24", "-s",
           "%dx%d" % (w, h), "-r", str(rate), "-i", "-"]
    if vf:
        cmd += ["-vf", vf]
    cmd += list(args) + [str(path)]
    subprocess.run(cmd, input=_frames(n, w, h).tobytes(), check=True, timeout=scaled(120))
    return path


def _pts(path):
    """Video packet timestamps (pts, else dts), sorted, and the time base."""
    out = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries",
                          "stream=time_base:packet=pts,dts", "-of", "json", str(path)],
                         check=True, capture_output=True, timeout=scaled(60)).stdout
    info = json.loads(out)
    num, den = info["streams"][0]["time_base"].split("/")
    ts = sorted(int(p["pts"]) if "pts" in p else int(p["dts"]) for p in info["packets"])
    return ts, int(num) / int(den)


def _probe_size(path):
    """(stored width, stored height, rotation of the display matrix or 0)."""
    out = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries",
                          "stream=width,height:stream_side_data=rotation", "-of", "json",
                          str(path)], check=True, capture_output=True, timeout=scaled(60)).stdout
    s = json.loads(out)["streams"][0]
    rotation = 0
    for sd in s.get("side_data_list", []):
        rotation = int(sd.get("rotation", rotation))
    return int(s["width"]), int(s["height"]), rotation


def _size(path, autorotate=True):
    """The frame size as displayed (a quarter turn of rotation metadata swaps
    it) or, without autorotate, as stored."""
    w, h, rotation = _probe_size(path)
    if autorotate and rotation % 180 != 0:
        w, h = h, w
    return w, h


def _eval_chain(w, h, resize):
    """core/decode/crop_box.h EvalCenterWindow as an ffmpeg filter chain."""
    if w <= h:
        rw, rh = resize, int(resize * h / w)
    else:
        rw, rh = int(resize * w / h), resize
    top, left = round((rh - OUT) / 2), round((rw - OUT) / 2)
    return "scale=%d:%d:flags=bilinear,crop=%d:%d:%d:%d" % (rw, rh, OUT, OUT, left, top)


def _ffmpeg_frames(path, chain, pix_fmt="rgb24", autorotate=True):
    """Every frame as ffmpeg decodes it (autorotated by default) through
    `chain`, [n, OUT, OUT, 3] (rgb24) or [n, 3, OUT, OUT] in R, G, B order
    (gbrp)."""
    rotation = [] if autorotate else ["-noautorotate"]
    raw = subprocess.run(["ffmpeg", "-v", "error"] + rotation + ["-i", str(path), "-vf", chain,
                          "-fps_mode", "passthrough", "-pix_fmt", pix_fmt, "-f", "rawvideo", "-"],
                         check=True, capture_output=True, timeout=scaled(120)).stdout
    if pix_fmt == "rgb24":
        return np.frombuffer(raw, np.uint8).reshape(-1, OUT, OUT, 3)
    gbr = np.frombuffer(raw, np.uint8).reshape(-1, 3, OUT, OUT)
    return gbr[:, [2, 0, 1]]


def _indices(ts, tb, start, clip, stride=1, fps=0.0):
    """The documented frame rule (core/decode/video_clip_decoder.h) from timestamps."""
    n = len(ts)
    times = [(t - ts[0]) * tb for t in ts]
    if fps > 0:
        span = (clip - 1) / fps
        starts = max(1, sum(1 for t in times if t + span <= times[-1] + 1e-9))
    else:
        span = (clip - 1) * stride
        starts = n - span if n - 1 >= span else 1
    s = {"start": 0, "center": (starts - 1) // 2}[start]
    out, shown = [], s
    for k in range(clip):
        if fps > 0:
            t = times[s] + k / fps + 1e-9
            while shown + 1 < n and times[shown + 1] <= t:
                shown += 1
            out.append(shown)
        else:
            out.append(min(s + k * stride, n - 1))
    return out


def _folder(tmp_path):
    root = tmp_path / "videos"
    (root / "a").mkdir(parents=True)
    return root


def _entry(root, **kw):
    e = {"dataset": {"root": str(root)}, "kind": "video", "augment": "eval", "size": OUT,
         "resize_size": 40, "layout": "nhwc", "max_batch_size": 8, "error_policy": "skip",
         "clip_frames": 6}
    e.update(kw)
    return e


def _read_all(daemon, pipeline, batch_size, seed=0, epoch=0, shuffle=False):
    loader = conveyor.Loader(daemon.unix, pipeline=pipeline, batch_size=batch_size, seed=seed,
                             shuffle=shuffle, credits=2, transport="inline")
    clips, names, failures = {}, [], []
    with loader.epoch(epoch) as stream:
        for batch in stream:
            for i, clip in zip(batch.indices.tolist(), batch.images):
                clips[i] = clip.copy()
            failures.extend(batch.failures)
    loader.close()
    return clips, failures


CASES = [
    # name, encoder args, (w, h), rate, vf
    ("h264.mp4", ["-c:v", "libx264", "-pix_fmt", "yuv420p", "-g", "8", "-bf", "2"], (96, 64), 25, None),
    ("hevc.mkv", ["-c:v", "libx265", "-pix_fmt", "yuv420p", "-x265-params", "log-level=error:keyint=10"],
     (96, 64), 25, None),
    ("vp9.webm", ["-c:v", "libvpx-vp9", "-pix_fmt", "yuv420p", "-g", "12", "-deadline", "realtime",
                  "-cpu-used", "8"], (96, 64), 30, None),
    ("av1.mkv", ["-c:v", "libaom-av1", "-pix_fmt", "yuv420p", "-g", "10", "-cpu-used", "8",
                 "-usage", "realtime"], (64, 48), 25, None),
    ("odd.mkv", ["-c:v", "libx264", "-pix_fmt", "yuv444p", "-g", "9"], (75, 51), 25, None),
    ("mpeg4.avi", ["-c:v", "mpeg4", "-g", "7", "-q:v", "3"], (96, 64), 25, None),
    # MPEG-4 Part 2 in MP4: the demuxer gives no frame size before decoding
    ("mpeg4.mp4", ["-c:v", "mpeg4", "-g", "7", "-q:v", "3"], (96, 64), 25, None),
    # variable frame rate: frame N shown at N*N/400 s
    ("vfr.mkv", ["-c:v", "libx264", "-pix_fmt", "yuv420p", "-g", "10", "-fps_mode", "passthrough"],
     (96, 64), 25, "settb=1/1000,setpts=N*N/400/TB"),
    # the base of the rotated files (ROTATED)
    ("upright.mp4", ["-c:v", "libx264", "-pix_fmt", "yuv420p", "-g", "10"], (96, 64), 25, None),
    ("upright444.mp4", ["-c:v", "libx264", "-pix_fmt", "yuv444p", "-g", "10"], (75, 51), 25, None),
]

# Rotation metadata: the file is `base` remuxed with a display matrix (FFmpeg
# 5.1 writes one for `-metadata:s:v rotate=R` when the stream is copied).
ROTATED = [("rot90.mp4", "upright.mp4", 90), ("rot180.mp4", "upright.mp4", 180),
           ("rot270.mp4", "upright.mp4", 270), ("rot90_odd444.mp4", "upright444.mp4", 90)]


def _rotate(src, dst, degrees):
    subprocess.run(["ffmpeg", "-v", "error", "-y", "-i", str(src), "-c", "copy", "-metadata:s:v",
                    "rotate=%d" % degrees, str(dst)], check=True, timeout=scaled(60))
    return dst


@pytest.fixture(scope="module")
def media(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("video")
    root = _folder(tmp)
    made = {}
    for name, args, (w, h), rate, vf in CASES:
        try:
            made[name] = _encode(root / "a" / name, w=w, h=h, rate=rate, args=args, vf=vf)
        except subprocess.CalledProcessError:
            if name == "av1.mkv":  # the AV1 encoder may be missing; decoding is still tested
                continue
            raise
    for name, base, degrees in ROTATED:
        made[name] = _rotate(made[base], root / "a" / name, degrees)
        assert _probe_size(made[name])[2] != 0, name  # the file has a display matrix
    return root, made


@pytest.mark.parametrize("start", ["start", "center"])
def test_clips_equal_ffmpeg_at_the_ffprobe_frames(media, daemon_factory, start):
    root, made = media
    pipes = {"stride": _entry(root, clip_start=start, frame_stride=3),
             "fps": _entry(root, clip_start=start, fps=10, layout="nchw"),
             "stored": _entry(root, clip_start=start, frame_stride=2, autorotate=False)}
    d = daemon_factory(daemon_config(root, pipelines=pipes))
    names = sorted(p.name for p in (root / "a").iterdir())
    assert names == sorted(made), names
    for pipe, stride, fps, pix, rotate in (("stride", 3, 0.0, "rgb24", True),
                                           ("fps", 1, 10.0, "gbrp", True),
                                           ("stored", 2, 0.0, "rgb24", False)):
        clips, failures = _read_all(d, pipe, batch_size=4)
        assert not failures, failures
        assert len(clips) == len(names)
        for i, name in enumerate(names):
            path = root / "a" / name
            ts, tb = _pts(path)
            want = _indices(ts, tb, start, 6, stride=stride, fps=fps)
            w, h = _size(path, rotate)
            ref = _ffmpeg_frames(path, _eval_chain(w, h, 40), pix, autorotate=rotate)
            assert len(ref) == len(ts), (name, len(ref), len(ts))
            got = clips[i]
            for k, j in enumerate(want):
                if not np.array_equal(got[k], ref[j]):
                    diffs = [jj for jj in range(len(ref)) if np.array_equal(got[k], ref[jj])]
                    pytest.fail("%s %s: clip frame %d should be video frame %d, matches %s; "
                                "max diff %d" % (pipe, name, k, j, diffs,
                                                 np.abs(got[k].astype(int) - ref[j]).max()))


def test_train_clips_random_start_flip_and_resume(media, daemon_factory):
    """Train: full-frame box (scale 1, ratio fixed) so the clip is a stride run of
    ffmpeg's frames at some start; same seed, same bytes; another epoch draws
    other starts; a stream resumed at an offset gives the same batches."""
    root, made = media
    name = "h264.mp4"
    w, h = _size(root / "a" / name)
    pipes = {"train": _entry(root, augment="train", scale=[1.0, 1.0], ratio=[w / h, w / h],
                             flip_probability=0.5, frame_stride=2, clip_start="random")}
    d = daemon_factory(daemon_config(root, pipelines=pipes))
    names = sorted(p.name for p in (root / "a").iterdir())
    i = names.index(name)
    ref = _ffmpeg_frames(root / "a" / name, "scale=%d:%d:flags=bilinear" % (OUT, OUT))
    starts = set()
    for epoch in range(4):
        a, fa = _read_all(d, "train", 4, seed=7, epoch=epoch, shuffle=True)
        b, fb = _read_all(d, "train", 4, seed=7, epoch=epoch, shuffle=True)
        assert not fa and not fb, (fa, fb)
        for k in a:
            assert np.array_equal(a[k], b[k]), (epoch, k)
        clip = a[i]
        flipped = clip[0].tobytes() not in {f.tobytes() for f in ref}
        frames = clip[:, :, ::-1] if flipped else clip
        hits = [[j for j in range(len(ref)) if np.array_equal(f, ref[j])] for f in frames]
        assert all(len(x) == 1 for x in hits), hits
        got = [x[0] for x in hits]
        assert got == list(range(got[0], got[0] + 2 * 6, 2)), got
        starts.add(got[0])
    assert len(starts) > 1, starts

    # Exact resume: a loader restored from the state after one batch of epoch 1
    # gets exactly the rest of the uninterrupted run.
    def loader():
        return conveyor.Loader(d.unix, pipeline="train", batch_size=2, seed=7, credits=2,
                               transport="inline")
    ref = loader()
    with ref.stream(num_epochs=1, first_epoch=1) as stream:
        full = [b.copy() for b in stream]
    ref.close()
    first = loader()
    with first.stream(num_epochs=1, first_epoch=1) as stream:
        head = next(iter(stream)).copy()
    state = first.state_dict()
    first.close()
    assert state["epoch"] == 1 and state["offset"] == 2, state
    resumed = loader()
    resumed.load_state_dict(state)
    with resumed.stream(num_epochs=1) as stream:
        rest = [b.copy() for b in stream]
    resumed.close()
    assert np.array_equal(head.images, full[0].images)
    assert len(rest) == len(full) - 1
    for x, y in zip(rest, full[1:]):
        assert np.array_equal(x.indices, y.indices)
        assert np.array_equal(x.images, y.images)
    assert full[0].images.shape == (2, 6, OUT, OUT, 3)


def test_hostile_videos_fail_per_sample_with_reasons(tmp_path, daemon_factory):
    root = _folder(tmp_path)
    a = root / "a"
    good = _encode(a / "good.mp4", args=["-c:v", "libx264", "-pix_fmt", "yuv420p", "-g", "8"])
    data = good.read_bytes()
    (a / "truncated.mp4").write_bytes(data[: len(data) // 2])  # index (moov) at the end: lost
    fast = _encode(a / "fast.tmp", args=["-c:v", "libx264", "-pix_fmt", "yuv420p", "-g", "40",
                                         "-movflags", "+faststart", "-f", "mp4"])
    fb = fast.read_bytes()
    fast.unlink()
    (a / "truncated_data.mp4").write_bytes(fb[: len(fb) * 2 // 3])  # index kept, frames cut
    moov = data.find(b"moov")
    assert moov > 0
    broken = bytearray(data)
    stco = data.find(b"stco")
    broken[stco - 4: stco + 60] = b"\xff" * 64  # the chunk-offset table
    (a / "broken_index.mp4").write_bytes(bytes(broken))
    # moov at the end, then cut: no index at all
    tail = _encode(a / "tail.tmp", args=["-c:v", "libx264", "-pix_fmt", "yuv420p", "-f", "mp4"])
    tb = tail.read_bytes()
    tail.unlink()
    (a / "no_moov.mp4").write_bytes(tb[: tb.find(b"moov") - 4])
    (a / "noise.mkv").write_bytes(np.random.default_rng(0).integers(0, 256, 5000, np.uint8).tobytes())
    _encode(a / "large.mkv", w=320, h=240, n=8, args=["-c:v", "libx264", "-pix_fmt", "yuv420p"])
    _encode(a / "long.webm", n=100, rate=25, args=["-c:v", "libvpx-vp9", "-deadline", "realtime",
                                                  "-cpu-used", "8"])
    _encode(a / "long_gop.mp4", n=60, args=["-c:v", "libx264", "-pix_fmt", "yuv420p", "-g", "300"])
    pipes = {"v": _entry(root, clip_frames=4, clip_start="center", max_pixels=320 * 200,
                         max_duration_seconds=3.0, max_frames_decoded=20,
                         max_failure_rate=1.0)}
    d = daemon_factory(daemon_config(root, pipelines=pipes))
    clips, failures = _read_all(d, "v", batch_size=4)
    reasons = {f.path: f.reason for f in failures}
    assert "a/good.mp4" not in reasons
    assert "exceeds max_pixels" in reasons["a/large.mkv"], reasons
    assert "exceeds max_duration_seconds" in reasons["a/long.webm"], reasons
    assert "max_frames_decoded (20)" in reasons["a/long_gop.mp4"], reasons
    assert "not a recognised media file" in reasons["a/noise.mkv"], reasons
    assert "not a recognised media file" in reasons["a/no_moov.mp4"], reasons
    assert "not a recognised media file" in reasons["a/truncated.mp4"], reasons
    assert "the video stream has no frames" in reasons["a/broken_index.mp4"], reasons
    # A file cut inside its frames (index first) is the video its whole packets make.
    assert "a/truncated_data.mp4" not in reasons, reasons
    assert sorted(reasons) == sorted("a/" + p.name for p in a.iterdir()
                                     if p.name not in ("good.mp4", "truncated_data.mp4"))
    assert len(clips) == 2
    assert d.poll() is None
    # FFmpeg's own complaints go through the daemon's log (debug level, not
    # shown at the default info), never raw onto stderr.
    assert "moov atom not found" not in d.log(), d.log_tail()
    print(reasons)


def test_cli_and_torch_adapter_handle_clip_batches(media, daemon_factory, tmp_path):
    """`conveyor pipelines --json` describes the clip shape, `conveyor fetch`
    writes 5-D batches (npz and npy), the torch adapter yields 5-D tensors."""
    from conveyor_integration import CLI, PYTHON, client_env
    root, made = media
    d = daemon_factory(daemon_config(root, pipelines={"clips": _entry(root, layout="nchw")}))
    res = subprocess.run([PYTHON, str(CLI), "pipelines", "--server", d.unix, "--json"],
                         capture_output=True, text=True, timeout=scaled(60), env=client_env())
    assert res.returncode == 0, res.stderr
    info = json.loads(res.stdout)
    info = info["pipelines"] if isinstance(info, dict) else info
    assert [(p["name"], p["kind"], p["sample_shape"]) for p in info] == \
        [("clips", "video", [6, 3, OUT, OUT])]
    for fmt in ("npz", "npy"):
        out = tmp_path / fmt
        res = subprocess.run([PYTHON, str(CLI), "fetch", "--server", d.unix, "--pipeline",
                              "clips", "--batches", "2", "--batch-size", "3", "--out", str(out),
                              "--format", fmt],
                             capture_output=True, text=True, timeout=scaled(120), env=client_env())
        assert res.returncode == 0, res.stderr
        if fmt == "npz":
            images = np.load(out / "batch_00001.npz")["images"]
        else:
            images = np.load(out / "batch_00001_images.npy")
        assert images.shape == (3, 6, 3, OUT, OUT) and images.dtype == np.uint8
    import torch
    from conveyor.torch import TorchLoader
    loader = TorchLoader(d.unix, pipeline="clips", batch_size=4, shuffle=False)
    try:
        batches = list(loader)
    finally:
        loader.close()
    x, y = batches[0][0], batches[0][1]
    assert isinstance(x, torch.Tensor) and tuple(x.shape) == (4, 6, 3, OUT, OUT)
    assert tuple(y.shape) == (4,)
