#!/usr/bin/python3
"""Writes the seed corpus of the fuzz targets in tests/fuzz (committed; run
again only to change it): tiny JPEGs of every kind the decoder meets for
jpeg_fuzz, tiny PNG/GIF/WebP/BMP/TIFF files (and damaged ones) for
image_fuzz, short audio files for audio_fuzz, configs for config_fuzz, call
scripts for request_fuzz and handshakes for handshake_fuzz. Each file is a
few hundred bytes (a FLAC's padding block makes it 8 KB); the whole corpus
stays in the tens of KB. Needs Pillow, cjpeg/jpegtran (libjpeg-turbo), the
`ffmpeg` CLI and the generated conveyor protobuf module (client/python after a build).

Usage: tests/fuzz/make_seeds.py
"""
import io
import os
import pathlib
import shutil
import struct
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT / "client" / "python"))


def _write(target, name, data):
    folder = HERE / target / "seeds"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(data)


def _pattern(mode, w, h):
    from PIL import Image
    img = Image.new("RGB", (w, h))
    img.putdata([((x * 37) % 256, (y * 53) % 256, ((x + y) * 19) % 256)
                 for y in range(h) for x in range(w)])
    return img.convert(mode)


def _write_corrupt_intervals(restart_jpg):
    """A marker after every MCU makes a file one the re-laid copies' entropy
    decoder reads (core/decode/relaid_entropy_decoder.h): copies of it with
    bytes of its intervals overwritten, and with a restart marker dropped."""
    scan = restart_jpg.index(b"\xff\xda")
    data = scan + 2 + struct.unpack(">H", restart_jpg[scan + 2:scan + 4])[0]
    end = len(restart_jpg) - 2
    for i, step in enumerate([7, 13, 29]):
        bad = bytearray(restart_jpg)
        for at in range(data + step, end, step * 5):
            if bad[at] != 0xFF and bad[at - 1] != 0xFF:
                bad[at] ^= 0x5A
        _write("jpeg_fuzz", f"restart_corrupt_{i}.jpg", bytes(bad))
    marker = restart_jpg.index(b"\xff\xd3", data)
    _write("jpeg_fuzz", "restart_marker_dropped.jpg",
           restart_jpg[:marker] + restart_jpg[marker + 2:])


def jpeg_seeds():
    from PIL import Image  # noqa: F401  (fails early without Pillow)
    def pil(mode, w, h, **kw):
        out = io.BytesIO()
        _pattern(mode, w, h).save(out, "JPEG", **kw)
        return out.getvalue()

    _write("jpeg_fuzz", "rgb_420.jpg", pil("RGB", 24, 16, quality=50))
    _write("jpeg_fuzz", "rgb_444.jpg", pil("RGB", 17, 9, quality=50, subsampling=0))
    _write("jpeg_fuzz", "gray.jpg", pil("L", 16, 24, quality=50))
    _write("jpeg_fuzz", "cmyk.jpg", pil("CMYK", 16, 16, quality=50))
    _write("jpeg_fuzz", "progressive.jpg", pil("RGB", 32, 8, quality=50, progressive=True))
    with tempfile.TemporaryDirectory() as tmp:
        ppm = pathlib.Path(tmp) / "in.ppm"
        _pattern("RGB", 40, 24).save(ppm)
        for name, args in [("arithmetic.jpg", ["-arithmetic"]),
                           ("restart.jpg", ["-restart", "1B"]),
                           ("optimized_smooth.jpg", ["-optimize", "-smooth", "10"])]:
            out = subprocess.run(["cjpeg", "-quality", "40", "-baseline", *args, str(ppm)],
                                 check=True, capture_output=True).stdout
            _write("jpeg_fuzz", name, out)
            if name == "restart.jpg":
                _write_corrupt_intervals(out)
        big = subprocess.run(["cjpeg", "-quality", "20", "-baseline", str(ppm)],
                             check=True, capture_output=True).stdout
        # A header claiming 4000 × 3000 pixels: refused by max_pixels.
        sof = big.index(b"\xff\xc0")
        huge = bytearray(big)
        huge[sof + 5:sof + 9] = struct.pack(">HH", 3000, 4000)
        _write("jpeg_fuzz", "huge_header.jpg", bytes(huge))
        _write("jpeg_fuzz", "truncated.jpg", big[: len(big) // 2])
    _write("jpeg_fuzz", "png_signature.bin", b"\x89PNG\r\n\x1a\n" + b"\0" * 16)


def image_seeds():
    """image_fuzz's inputs: a first byte of 6 (no magic put in front) and a
    whole file, so the seeds are real files of each format and mode."""
    import zlib

    def save(name, img, fmt, **kw):
        out = io.BytesIO()
        img.save(out, fmt, **kw)
        _write("image_fuzz", name, b"\x06" + out.getvalue())
        return out.getvalue()

    rgb = _pattern("RGB", 12, 9)
    png = save("rgb.png", rgb, "PNG")
    save("rgba.png", _pattern("RGBA", 9, 7), "PNG")
    save("palette_trns.png", rgb.quantize(8), "PNG", transparency=2)
    save("grey16.png", _pattern("I", 8, 8), "PNG")
    save("bilevel.png", _pattern("1", 11, 5), "PNG")
    save("still.gif", rgb.quantize(16), "GIF")
    frames = [_pattern("RGB", 8, 8).quantize(4), _pattern("L", 8, 8).convert("P")]
    out = io.BytesIO()
    frames[0].save(out, "GIF", save_all=True, append_images=frames[1:], duration=10)
    _write("image_fuzz", "animated.gif", b"\x06" + out.getvalue())
    save("lossy.webp", rgb, "WEBP", quality=30)
    save("lossless_alpha.webp", _pattern("RGBA", 9, 7), "WEBP", lossless=True)
    save("rgb.bmp", rgb, "BMP")
    save("palette.bmp", rgb.quantize(8), "BMP")
    save("lzw.tif", rgb, "TIFF", compression="tiff_lzw")
    save("grey_packbits.tif", _pattern("L", 8, 8), "TIFF", compression="packbits")
    _write("image_fuzz", "truncated.png", b"\x06" + png[: len(png) * 2 // 3])

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    # 4x4 RGB whose IDAT inflates to 2 MB, far past its 52 bytes of rows:
    # refused by the bomb check.
    bomb = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 4, 4, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(bytes(2000000), 9)) + chunk(b"IEND", b""))
    _write("image_fuzz", "bomb.png", b"\x06" + bomb)


def config_seeds():
    for name in ("conveyord.yaml", "demo.yaml"):
        shutil.copy(ROOT / "config" / name, HERE / "config_fuzz" / "seeds" / name)
    _write("config_fuzz", "minimal.yaml", b"pipelines:\n  p:\n    dataset: {root: /data/train}\n")
    _write("config_fuzz", "list_and_sizes.yaml", b"""\
listen: {unix: run/c.sock, unix_mode: "0600", tcp: "127.0.0.1:0", data_tcp: none}
memory_budget: 10%
max_streams: 4
threads: 2
allowed_roots: [/data, ../shared]
log_level: warn
shutdown_timeout_seconds: 0.5
engine: {fetch_queue_capacity: 8, fetch_concurrency: 2}
pipelines:
  val:
    dataset: {list: ../shared/val.txt, root: /data/val}
    augment: eval
    size: [160, 128]
    resize_size: 192
    layout: nhwc
    dtype: float16
    mean: [0.5, 0.5, 0.5]
    std: [0.25, 0.25, 0.25]
    error_policy: fail_fast
    max_batch_size: 256
    max_file_bytes: 4MiB
""")
    _write("config_fuzz", "anchors.yaml",
           b"base: &b {root: /d}\npipelines:\n  a: {dataset: *b}\n  b: {dataset: *b, transform: {mode: train}}\n")


def request_seeds():
    from conveyor._proto.v1 import conveyor_pb2 as pb

    def script(peer_unix, *messages):
        out = bytes([1 if peer_unix else 0])
        for m in messages:
            body = m.SerializeToString()
            length = len(body)
            varint = bytearray()
            while True:
                b = length & 0x7F
                length >>= 7
                varint.append(b | (0x80 if length else 0))
                if not length:
                    break
            out += b"\x0a" + bytes(varint) + body
        return out

    def open_(**kw):
        m = pb.ClientMessage()
        m.open.CopyFrom(pb.OpenStream(**kw))
        return m

    def release(*slots):
        m = pb.ClientMessage()
        m.release.slots.extend(slots)
        return m

    base = dict(pipeline="test", batch_size=2, credits=2, num_epochs=1, shuffle=False)
    _write("request_fuzz", "open_inline.bin", script(False, open_(**base, transport=pb.INLINE)))
    _write("request_fuzz", "open_shm.bin", script(True, open_(**base, transport=pb.SHARED_MEMORY)))
    _write("request_fuzz", "open_data_socket.bin",
           script(False, open_(**base, accept_data_socket=True)))
    _write("request_fuzz", "open_release.bin",
           script(True, open_(**base), release(0, 1), release(7), open_(**base)))
    _write("request_fuzz", "release_first.bin", script(False, release(0)))
    _write("request_fuzz", "empty_message.bin", script(False, pb.ClientMessage()))
    _write("request_fuzz", "sharded_resume.bin", script(True, open_(
        pipeline="test", batch_size=3, credits=64, rank=1, world_size=2, seed=5, first_epoch=2,
        num_epochs=0, drop_last=True,
        resume=pb.ResumePosition(epoch=3, offset=4, world_size=2))))
    _write("request_fuzz", "bad_fields.bin", script(False, open_(
        pipeline="nope\xff", batch_size=100000, credits=1000, rank=5, world_size=2)))


def handshake_seeds():
    secret = bytes(range(32))
    _write("handshake_fuzz", "accepted.bin", b"\x00" + struct.pack("<Q", 7) + secret)
    _write("handshake_fuzz", "accepted_pieces_close.bin", b"\x35" + struct.pack("<Q", 7) + secret)
    _write("handshake_fuzz", "wrong_secret.bin", b"\x02" + struct.pack("<Q", 7) + secret[::-1])
    _write("handshake_fuzz", "unknown_stream_and_more.bin",
           b"\x04" + struct.pack("<Q", 1 << 63) + secret + b"trailing bytes")
    _write("handshake_fuzz", "short_open.bin", b"\x06" + struct.pack("<Q", 7) + secret[:5])
    _write("handshake_fuzz", "short_closed.bin", b"\x07" + b"\x07\x00")


def http1_seeds():
    # Byte 0 is the plan (http1_fuzz.cc): bit 0 close after sending, bit 1
    # pieces, bits 2-3 max_body (0, 100, 4096, 1 MiB), bits 4-7 piece sizes.
    def seed(name, plan, answer):
        _write("http1_fuzz", name, bytes([plan]) + answer)

    seed("ok_close.bin", 0x0D, b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\nhello world")
    seed("ok_keep_alive.bin", 0x5C, b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\nhello world")
    seed("partial_pieces.bin", 0x3E,
         b"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-19/99\r\n"
         b"Content-Length: 20\r\n\r\n" + bytes(range(20)))
    seed("chunked.bin", 0x0D,
         b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
    seed("too_large.bin", 0x05, b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + b"x" * 200)
    seed("not_found.bin", 0x9C, b"HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nnot found")
    seed("big_error_body.bin", 0x0D,
         b"HTTP/1.1 500 Oops\r\nContent-Length: 70000\r\n\r\n" + b"e" * 1000)
    seed("cut_body.bin", 0x0D, b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly this")
    seed("not_http.bin", 0x0D, b"SSH-2.0-OpenSSH_9.2\r\n")
    seed("http10.bin", 0x0C, b"HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\nabc")
    seed("bytes_after.bin", 0x0C, b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabcEXTRA")
    seed("no_content.bin", 0x0C, b"HTTP/1.1 204 No Content\r\n\r\n")


def fields_seeds():
    # Byte 0 even: a JSON text; odd: a batch of field values (see fields_fuzz.cc).
    for name, text in [("object.json", b'{"a": [1, 2.5e-3, "caf\xc3\xa9 \\u00e9"], "b": null}'),
                       ("nested.json", b"[" * 127 + b"true" + b"]" * 127),
                       ("not_json.json", b"{a: 1,}"), ("number.json", b"-0.5E+12"),
                       ("escapes.json", b'"\\ud83d\\ude00 \\n \\/"')]:
        _write("fields_fuzz", name, b"\x00" + text)
    # batch of 5, stride 8: (flags, length, bytes) per position.
    batch = bytes([5, 7]) + b"".join(bytes([flags, len(v)]) + v for flags, v in [
        (2, b"abc"), (3, b"dropped"), (0, b""), (2, b"12345678"), (2, b"z")])
    _write("fields_fuzz", "batch.bin", b"\x01" + batch)
    _write("fields_fuzz", "all_failed.bin", b"\x01" + bytes([3, 0, 1, 0, 1, 0, 1, 0]))


def tar_seeds():
    import io
    import tarfile

    def shard(fmt, members, **kw):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=fmt, **kw) as tar:
            for name, data in members:
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        return buf.getvalue().rstrip(b"\0") + b"\0" * 1024  # no record padding

    sample = [("a/000001.jpg", b"\xff\xd8jpeg"), ("a/000001.cls", b"3\n"),
              ("a/000002.png", b"png"), ("a/000002.cls", b"0")]
    _write("tar_fuzz", "gnu.tar", shard(tarfile.GNU_FORMAT, sample))
    _write("tar_fuzz", "ustar.tar", shard(tarfile.USTAR_FORMAT, sample))
    long_name = [("d" * 120 + "/k.jpg", b"x"), ("d" * 120 + "/k.cls", b"1")]
    _write("tar_fuzz", "gnu_long.tar", shard(tarfile.GNU_FORMAT, long_name))
    _write("tar_fuzz", "pax_long.tar", shard(tarfile.PAX_FORMAT, long_name))
    _write("tar_fuzz", "truncated.tar", shard(tarfile.GNU_FORMAT, sample)[:700])
    # The hostile tar cases' shapes (tests/support/hostile_corpus.py): GNU
    # sparse with an extension block, pax sparse 1.0, two archives end to
    # end, label members differing only in case.
    sys.path.insert(0, str(ROOT / "tests" / "support"))
    import hostile_corpus as hc
    end = b"\0" * 1024
    cls = hc._tar_member(b"a/000002.cls", b"1")
    _write("tar_fuzz", "gnu_sparse.tar", hc._gnu_sparse_member(b"a/000002.jpg", b"\xff\xd8" * 300) +
           cls + end)
    _write("tar_fuzz", "pax_sparse.tar", hc._pax_sparse_member(b"a/000002.jpg", b"\xff\xd8jpeg") +
           cls + end)
    _write("tar_fuzz", "concatenated.tar",
           shard(tarfile.GNU_FORMAT, sample) + shard(tarfile.GNU_FORMAT, long_name))
    _write("tar_fuzz", "case_duplicate.tar",
           shard(tarfile.GNU_FORMAT, sample + [("a/000001.CLS", b"4")]))


def audio_seeds():
    """A twentieth of a second of sine in each codec the audio decoder meets, a
    truncated one and a header with no samples (ffmpeg CLI)."""
    with tempfile.TemporaryDirectory() as tmp:
        def make(name, rate, channels, opts):
            path = os.path.join(tmp, name)
            inputs = []
            for c in range(channels):
                inputs += ["-f", "lavfi", "-i",
                           "sine=frequency=%d:sample_rate=%d:duration=0.05" % (440 * (c + 1), rate)]
            graph = ["-filter_complex", "amerge=inputs=2"] if channels == 2 else []
            subprocess.run(["ffmpeg", "-v", "error", "-y", *inputs, *graph, "-map_metadata", "-1",
                            "-fflags", "+bitexact", *opts, path], check=True)
            data = pathlib.Path(path).read_bytes()
            _write("audio_fuzz", name, data)
            return data
        wav = make("s16_mono.wav", 8000, 1, ["-c:a", "pcm_s16le"])
        make("f32_stereo.wav", 8000, 2, ["-c:a", "pcm_f32le"])
        make("mono.flac", 8000, 1, ["-c:a", "flac"])
        mp3 = make("stereo.mp3", 8000, 2, ["-c:a", "libmp3lame", "-b:a", "16k"])
        make("mono.opus", 8000, 1, ["-c:a", "libopus", "-b:a", "8k"])
        make("mono.ogg", 8000, 1, ["-c:a", "libvorbis", "-q:a", "0"])
        make("mono.aac", 8000, 1, ["-c:a", "aac", "-b:a", "16k", "-f", "adts"])
        _write("audio_fuzz", "truncated.mp3", mp3[: len(mp3) // 2])
        _write("audio_fuzz", "header_only.wav", wav[: wav.index(b"data") + 8])


def main():
    for target in ("jpeg_fuzz", "tar_fuzz", "image_fuzz", "audio_fuzz", "config_fuzz",
                   "request_fuzz", "handshake_fuzz", "http1_fuzz"):
        (HERE / target / "seeds").mkdir(parents=True, exist_ok=True)
        (HERE / target / "regressions").mkdir(parents=True, exist_ok=True)
        keep = HERE / target / "regressions" / ".gitkeep"
        keep.touch()
    jpeg_seeds()
    image_seeds()
    audio_seeds()
    config_seeds()
    request_seeds()
    handshake_seeds()
    http1_seeds()
    tar_seeds()
    fields_seeds()


if __name__ == "__main__":
    main()
