"""Audio test media made with Debian's `ffmpeg` CLI, and `ffmpeg`'s own
decode + resample as the reference the audio decoder is compared with.

make_sine(path, codec, rate, channels, seconds): sines at known frequencies
(440 Hz left / mono, 1000 Hz right) in the container and codec of CODECS.
reference(path, rate, channels): float32 [C, N], what
`ffmpeg -i path -af aformat=flt,pan=... -ar rate -f f32le` writes, with
conveyor's channel rules spelled as pan filters (mean to mono, mono copied
to stereo); same channel count: no pan. Both go through libswresample with
FFmpeg's defaults, so the samples agree to float rounding (measured: 0 for
same channel counts, < 1e-7 when mixing).
"""
import subprocess

import numpy as np

# name -> (file suffix, ffmpeg output options)
CODECS = {
    "wav_s16": (".wav", ["-c:a", "pcm_s16le"]),
    "wav_s24": (".wav", ["-c:a", "pcm_s24le"]),
    "wav_f32": (".wav", ["-c:a", "pcm_f32le"]),
    "flac": (".flac", ["-c:a", "flac"]),
    "mp3": (".mp3", ["-c:a", "libmp3lame", "-b:a", "96k"]),
    "opus": (".opus", ["-c:a", "libopus", "-b:a", "64k"]),
    "vorbis": (".ogg", ["-c:a", "libvorbis"]),
    "aac_m4a": (".m4a", ["-c:a", "aac", "-b:a", "96k"]),
    "aac_adts": (".aac", ["-c:a", "aac", "-b:a", "96k", "-f", "adts"]),
}


def _run(cmd):
    p = subprocess.run(cmd, capture_output=True, timeout=120)
    if p.returncode != 0:
        raise AssertionError("%s failed: %s" % (" ".join(cmd), p.stderr.decode(errors="replace")))
    return p.stdout


def make_sine(path, codec, rate, channels, seconds, freqs=(440, 1000)):
    """Writes a sine file; returns its path (with the codec's suffix)."""
    suffix, opts = CODECS[codec]
    path = str(path) + suffix
    inputs = []
    for c in range(channels):
        inputs += ["-f", "lavfi", "-i",
                   "sine=frequency=%d:sample_rate=%d:duration=%s" % (freqs[c], rate, seconds)]
    graph = ["-filter_complex", "amerge=inputs=%d" % channels] if channels > 1 else []
    _run(["ffmpeg", "-v", "error", "-y", *inputs, *graph, *opts, path])
    return path


def reference(path, rate, channels):
    """ffmpeg's decode of `path` at `rate` Hz and `channels` channels: [C, N]."""
    probe = _run(["ffprobe", "-v", "error", "-select_streams", "a:0", "-show_entries",
                  "stream=channels", "-of", "csv=p=0", str(path)])
    in_channels = int(probe.decode().strip().split(",")[0])
    filters = ["aformat=sample_fmts=flt"]
    if channels == 1 and in_channels > 1:
        w = 1.0 / in_channels
        filters.append("pan=mono|c0=" + "+".join("%r*c%d" % (w, i) for i in range(in_channels)))
    elif channels == 2 and in_channels == 1:
        filters.append("pan=stereo|c0=c0|c1=c0")
    elif channels != in_channels:
        filters.append("aformat=channel_layouts=stereo")
    out = _run(["ffmpeg", "-v", "error", "-i", str(path), "-af", ",".join(filters),
                "-ar", str(rate), "-f", "f32le", "-"])
    return np.frombuffer(out, np.float32).reshape(-1, channels).T.copy()
