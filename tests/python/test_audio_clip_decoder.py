"""The audio clip decoder (core/decode/audio_clip_decoder.h, through
tests/tools/audio_clip_tool) against `ffmpeg`'s own decode + resample.

Media: sines made by the `ffmpeg` CLI in every codec/container of
audio_media.CODECS, at 8, 44.1 and 48 kHz, mono and stereo. Lengths (N at
the pipeline's rate) must equal ffmpeg's exactly, and every clip must be
the window [start, start + L) of ffmpeg's output within 1e-6 (float
rounding of the channel mix; same channel counts agree exactly). The WAV
and FLAC clips come from the seek path (checked through the trace), so the
seek is held to the whole decode too.
"""
import json
import os
import pathlib
import subprocess
import sys
import tempfile

import numpy as np
import pytest

SOURCE_DIR = pathlib.Path(os.environ.get("CONVEYOR_SOURCE_DIR",
                                         pathlib.Path(__file__).resolve().parents[2]))
BUILD_DIR = pathlib.Path(os.environ.get("CONVEYOR_BUILD_DIR", SOURCE_DIR / "build"))
sys.path.insert(0, str(SOURCE_DIR / "tests" / "support"))
import audio_media as am  # noqa: E402

TOOL = BUILD_DIR / "tests" / "audio_clip_tool"
TOL = 1e-6


@pytest.fixture(scope="module")
def tmp():
    if not TOOL.exists():
        if "CONVEYOR_BUILD_DIR" in os.environ:
            pytest.fail("missing %s" % TOOL)
        pytest.skip("audio_clip_tool not built")
    with tempfile.TemporaryDirectory(prefix="conveyor_audio_") as d:
        yield pathlib.Path(d)


def run(inputs, out, **opts):
    """Runs the tool; returns (trace dicts, clips [len(inputs), C, L])."""
    args = [str(TOOL), *map(str, inputs), "--out", str(out)]
    # A generous decode budget (CPU time): a sanitized run must not fail good
    # files; the tests of the budget pass their own.
    opts = dict({"max_decode_seconds": 120}, **opts)
    for k, v in opts.items():
        args += ["--" + k.replace("_", "-"), str(v)]
    p = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    traces = [json.loads(line) for line in p.stdout.splitlines()]
    c, l = int(opts.get("channels", 1)), int(opts.get("clip", 16000))
    return traces, np.fromfile(out, np.float32).reshape(len(inputs), c, l)


def check_window(trace, clip, ref, clip_len, padding="end"):
    assert trace["ok"], trace
    assert trace["total"] == ref.shape[1], "length differs from ffmpeg's"
    s = trace["start"]
    valid = min(clip_len, ref.shape[1] - s)
    assert trace["valid"] == valid
    before = (clip_len - valid) // 2 if padding == "both" else 0
    got = clip[:, before:before + valid]
    np.testing.assert_allclose(got, ref[:, s:s + valid], rtol=0, atol=TOL)
    assert not clip[:, :before].any() and not clip[:, before + valid:].any(), "padding not zero"


CASES = [  # (codec, file rate, file channels, seconds, out rate, out channels)
    ("wav_s16", 44100, 2, 6, 16000, 1),
    ("wav_s16", 8000, 1, 6, 16000, 2),
    ("wav_s24", 48000, 2, 6, 16000, 2),
    ("wav_f32", 44100, 1, 6, 48000, 1),
    ("flac", 44100, 2, 6, 16000, 1),
    ("flac", 48000, 1, 6, 8000, 1),
    ("mp3", 44100, 2, 4, 16000, 1),
    ("mp3", 8000, 1, 4, 16000, 1),
    ("opus", 48000, 2, 4, 16000, 2),
    ("vorbis", 44100, 1, 4, 22050, 1),
    ("aac_m4a", 44100, 2, 4, 16000, 2),
    ("aac_adts", 48000, 1, 4, 16000, 1),
]


@pytest.mark.parametrize("codec,rate,channels,seconds,out_rate,out_channels", CASES)
def test_clips_are_windows_of_ffmpegs_decode(tmp, codec, rate, channels, seconds, out_rate,
                                             out_channels):
    f = am.make_sine(tmp / ("%s_%d_%d" % (codec, rate, channels)), codec, rate, channels, seconds)
    ref = am.reference(f, out_rate, out_channels)
    clip_len = out_rate // 2
    inputs = [f] * 4
    traces, clips = run(inputs, tmp / "out.f32", rate=out_rate, channels=out_channels,
                        clip=clip_len, seed=7, mode="train")
    starts = set()
    for t, c in zip(traces, clips):
        assert (t["input_rate"], t["input_channels"]) == (
            48000 if codec == "opus" else rate, channels)
        check_window(t, c, ref, clip_len)
        starts.add(t["start"])
        if codec.startswith("wav") or codec == "flac":
            assert t["seeked"] == (t["start"] > 2048), t  # seeks unless the window is near 0
    assert len(starts) > 1, "train crops should differ between samples"
    # eval: the centre window
    traces, clips = run([f], tmp / "out.f32", rate=out_rate, channels=out_channels,
                        clip=clip_len, mode="eval")
    assert traces[0]["start"] == (ref.shape[1] - clip_len) // 2
    check_window(traces[0], clips[0], ref, clip_len)


def test_seek_path_equals_whole_decode_far_into_a_long_file(tmp):
    for codec in ("wav_s16", "flac"):
        f = am.make_sine(tmp / "long", codec, 44100, 2, 40)
        ref = am.reference(f, 16000, 2)
        traces, clips = run([f] * 6, tmp / "out.f32", rate=16000, channels=2, clip=4000,
                            seed=11, index=100)
        for t, c in zip(traces, clips):
            assert t["ok"], t
            assert t["seeked"], t
            check_window(t, c, ref, 4000)


@pytest.mark.parametrize("padding", ["end", "both"])
def test_short_files_are_padded_with_zeros(tmp, padding):
    f = am.make_sine(tmp / "short", "wav_s16", 44100, 1, 0.1)
    ref = am.reference(f, 16000, 1)
    assert ref.shape[1] == 1600
    traces, clips = run([f], tmp / "out.f32", clip=5001, padding=padding, mode="train")
    assert traces[0]["start"] == 0
    check_window(traces[0], clips[0], ref, 5001, padding)
    if padding == "both":
        assert not clips[0, :, :1700].any() and clips[0, :, 1700:3300].any()


def test_crops_are_deterministic_per_seed_and_index(tmp):
    f = am.make_sine(tmp / "det", "mp3", 44100, 1, 3)
    a = run([f] * 3, tmp / "a.f32", seed=5, clip=8000)
    b = run([f] * 3, tmp / "b.f32", seed=5, clip=8000)
    c = run([f] * 3, tmp / "c.f32", seed=6, clip=8000)
    assert [t["start"] for t in a[0]] == [t["start"] for t in b[0]]
    assert a[1].tobytes() == b[1].tobytes()
    assert [t["start"] for t in a[0]] != [t["start"] for t in c[0]]


def test_a_reused_decoder_gives_what_a_fresh_one_gives(tmp):
    """One decoder (as a worker keeps it) across files of other rates,
    formats and layouts: the resampler it keeps leaks nothing between them."""
    files = [am.make_sine(tmp / "r1", "wav_s16", 44100, 2, 2),
             am.make_sine(tmp / "r2", "mp3", 8000, 1, 2),
             am.make_sine(tmp / "r3", "flac", 44100, 2, 2)]
    inputs = [files[0], files[0], files[1], files[2], files[0]]
    traces, clips = run(inputs, tmp / "mix.f32", seed=1, clip=7000)
    for k, f in enumerate(inputs):
        t, c = run([f], tmp / "one.f32", seed=1, index=k, clip=7000)
        assert t[0]["start"] == traces[k]["start"]
        assert c[0].tobytes() == clips[k].tobytes(), inputs[k]


def test_truncated_files(tmp):
    """A truncated MP3 decodes to what ffmpeg decodes of it; a WAV cut
    mid-sample and a FLAC cut mid-frame are errors of the sample."""
    mp3 = pathlib.Path(am.make_sine(tmp / "t", "mp3", 44100, 2, 3))
    cut = tmp / "cut.mp3"
    cut.write_bytes(mp3.read_bytes()[:mp3.stat().st_size // 2])
    ref = am.reference(cut, 16000, 1)
    traces, clips = run([cut], tmp / "out.f32", clip=4000, mode="eval")
    check_window(traces[0], clips[0], ref, 4000)
    for codec in ("wav_s16", "flac"):
        full = pathlib.Path(am.make_sine(tmp / ("t" + codec), codec, 44100, 2, 3))
        cut = tmp / ("cut" + full.suffix)
        cut.write_bytes(full.read_bytes()[:full.stat().st_size // 2 + 1])
        traces, _ = run([cut], tmp / "out.f32", clip=4000)
        assert not traces[0]["ok"]
        assert "INVALID_ARGUMENT: audio: decoding" in traces[0]["error"], traces[0]


def test_hostile_headers_are_clear_errors(tmp):
    wav = pathlib.Path(am.make_sine(tmp / "h", "wav_s16", 8000, 1, 1))
    data = wav.read_bytes()
    header = data.index(b"data") + 8
    cases = {
        "noise.bin": (bytes(range(256)) * 40, "audio: not a recognised media file"),
        "empty.wav": (b"", "audio: not a recognised media file"),
        "header_only.wav": (data[:header], "audio: the file decodes to no samples"),
        "zero_channels.wav": (data[:22] + b"\0\0" + data[24:], "audio:"),
        "huge_rate.wav": (data[:24] + (2**31 - 1).to_bytes(4, "little") + data[28:], "audio:"),
    }
    for name, (blob, expected) in cases.items():
        (tmp / name).write_bytes(blob)
    traces, _ = run([tmp / n for n in cases], tmp / "out.f32", clip=100)
    for (name, (_, expected)), t in zip(cases.items(), traces):
        assert not t["ok"], name
        assert expected in t["error"], (name, t)


def test_limits_stop_long_files(tmp):
    f = am.make_sine(tmp / "limit", "mp3", 44100, 1, 20)
    w = am.make_sine(tmp / "limitw", "wav_s16", 44100, 1, 20)
    t, _ = run([f, w], tmp / "out.f32", max_samples=100000)
    assert "RESOURCE_EXHAUSTED: audio: decoded more than max_samples (100000)" in t[0]["error"]
    assert "RESOURCE_EXHAUSTED: audio: the file declares 882000 samples per channel, more " \
           "than max_samples (100000)" in t[1]["error"]
    t, _ = run([f, w], tmp / "out.f32", max_duration=5)
    for x in t:
        assert "RESOURCE_EXHAUSTED: audio: the file declares 20" in x["error"], x
        assert "more than max_duration_seconds (5 s)" in x["error"], x
    # Upsampling: the resampled side of max_samples.
    t, _ = run([w], tmp / "out.f32", rate=96000, max_samples=1000000)
    assert "more than max_samples (1000000)" in t[0]["error"], t
    t, _ = run([f], tmp / "out.f32", max_decode_seconds=0.001)
    assert "DEADLINE_EXCEEDED: audio" in t[0]["error"], t
