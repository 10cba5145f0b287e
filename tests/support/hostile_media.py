"""Hostile (and one valid) media files for the decoders' memory bounds, made
with Debian's `ffmpeg` CLI and byte patches. Kept apart from
hostile_corpus.py (the tar and image cases).

make(folder) writes every case into `folder` and returns {name: expected
reason substring, or None for a file that must decode}:

- lying_sps.mp4: H.264 whose SPS says CODED x CODED (8192 x 8192) while the
  MP4 container (avc1 sample entry, track header) says 320 x 240; B-frames
  make the codec hold several frames before it outputs one. Decoding it at
  the SPS's size takes 96 MiB a frame; it must be refused against
  max_decode_memory before the codec allocates its frames.
- many_channels_1hz.wav: 64 KiB of PCM, 64 channels at 1 Hz; resampled to
  16 kHz it once held about 0.5-0.9 GiB in one worker.
- steep_downsample.wav: 2 channels at 8 MHz; resampling to 16 kHz needs a
  filter of about 270 000 taps (GiBs of filter bank).
- mpeg4_part2.mp4 (valid): MPEG-4 Part 2 in MP4, whose demuxer gives no
  frame size before a frame is decoded.
"""
import struct
import subprocess

CODED = 8192


def _run(cmd, timeout=300):
    p = subprocess.run(cmd, capture_output=True, timeout=timeout)
    if p.returncode != 0:
        raise AssertionError("%s failed: %s" % (" ".join(cmd), p.stderr.decode(errors="replace")))


def lie_about_size(data, width=320, height=240):
    """An MP4's bytes with its first video sample entry (avc1) and track
    header claiming width x height; the bitstream is untouched."""
    b = bytearray(data)
    avc1 = b.find(b"avc1", b.find(b"stsd"))  # the sample entry, not ftyp's brand
    assert avc1 > 0 and b.find(b"stsd") > 0, "no avc1 sample entry"
    # sample entry: 6 reserved, data reference index, 16 pre-defined, width, height
    struct.pack_into(">HH", b, avc1 + 28, width, height)
    tkhd = b.find(b"tkhd")
    assert tkhd > 0, "no track header"
    end = tkhd - 4 + struct.unpack_from(">I", b, tkhd - 4)[0]
    struct.pack_into(">II", b, end - 8, width << 16, height << 16)  # 16.16, last in the box
    return bytes(b)


def lying_sps_mp4(path, coded=CODED):
    tmp = str(path) + ".tmp.mp4"
    _run(["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i",
          "color=c=gray:size=%dx%d:rate=25" % (coded, coded), "-frames:v", "4", "-c:v", "libx264",
          "-preset", "ultrafast", "-x264-params", "bframes=2:b-adapt=0", "-pix_fmt", "yuv420p",
          tmp])
    with open(tmp, "rb") as f:
        data = f.read()
    subprocess.run(["rm", "-f", tmp], check=True)
    with open(path, "wb") as f:
        f.write(lie_about_size(data))
    return path


def wav(path, rate, channels, frames, value=100):
    """A PCM s16 WAV of `frames` samples per channel, all `value`."""
    data = struct.pack("<h", value) * (frames * channels)
    head = b"RIFF" + struct.pack("<I", 36 + len(data)) + b"WAVEfmt " + struct.pack(
        "<IHHIIHH", 16, 1, channels, rate, rate * channels * 2, channels * 2, 16)
    with open(path, "wb") as f:
        f.write(head + b"data" + struct.pack("<I", len(data)) + data)
    return path


def mpeg4_part2_mp4(path, frames=20, size="96x64"):
    _run(["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", "testsrc2=size=%s:rate=25" % size,
          "-frames:v", str(frames), "-c:v", "mpeg4", "-g", "5", str(path)])
    return path


def make_video(folder):
    lying_sps_mp4(folder / "lying_sps.mp4")
    mpeg4_part2_mp4(folder / "mpeg4_part2.mp4")
    return {"lying_sps.mp4": "the codec's frames are 8192x8192",
            "mpeg4_part2.mp4": None}


def make_audio(folder):
    wav(folder / "many_channels_1hz.wav", 1, 64, 512)
    wav(folder / "steep_downsample.wav", 8000000, 2, 4000)
    return {"many_channels_1hz.wav": "a sample rate of 1 Hz is too low to resample",
            "steep_downsample.wav": "more than max_decode_memory"}


def make(folder):
    out = make_video(folder)
    out.update(make_audio(folder))
    return out
