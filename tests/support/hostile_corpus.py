"""A hostile ImageFolder dataset, generated (nothing binary is committed):
every kind of entry a real dataset can hold that a loader must survive, each
with the outcome the daemon must give it.

    entries = build(root)   # writes root/<class>/<entry>; returns [Entry]

Outcomes:
  DELIVERED  the sample is in the epoch, with its class label; `reference`
             (a file in the tree) decodes with PIL to the pixels the daemon
             must serve at full size.
  SKIPPED    the sample is indexed but left out of its batch and reported
             in Batch.failures; the reason contains `reason` (see REASONS).
  IGNORED    not a sample at all: never delivered, never reported.

Every delivered image is DELIVERED_SIZE x DELIVERED_SIZE, so a pipeline
with augment eval, size and resize_size DELIVERED_SIZE and dct_scaling off
serves it unresampled: its pixels equal a full decode.

Policies the expectations pin down (config/README.md, "Image files"):
  - the file's content decides, not its extension: a JPEG named .PNG and a
    PNG named .jpg are both delivered (each by its own decoder), random
    bytes are skipped as no supported format; extensions only select which
    names are samples at all (torchvision's list);
  - EXIF orientation is ignored: pixels are served as stored, as
    torchvision's ImageFolder (PIL, no exif_transpose) and decode_jpeg's
    default do;
  - CMYK is converted as PIL converts it; 12-bit and lossless JPEGs (which
    the 8-bit libjpeg-turbo build cannot decode) are skipped;
  - a missing Huffman table is filled with the standard ones (as
    libjpeg-turbo does for motion-JPEG frames); a missing quantization
    table is an error;
  - symbolic links below the root are never followed, FIFOs never opened,
    and a folder named like an image is not descended into.

"unreadable": a file with mode 000. Root reads it anyway (CAP_DAC_OVERRIDE);
a test running as root must start the daemon without CAP_DAC_OVERRIDE and
CAP_DAC_READ_SEARCH (setpriv, see DAEMON_PREFIX_AS_ROOT) for the file to be
unreadable to it, or expect it delivered.

The reason substrings are collected in REASONS so that a change of wording
in the daemon is one edit here. They are kept to the part that names the
cause ("not a supported image format", not the detected format after it).
"""

import io
import os
import struct
from dataclasses import dataclass

import numpy as np
from PIL import Image

DELIVERED = "delivered"
SKIPPED = "skipped"
IGNORED = "ignored"

DELIVERED_SIZE = 64

# The part of each failure reason the daemon must give (a substring).
REASONS = {
    "empty": "empty",
    # The detected format is named; unknown content is never echoed.
    "unknown": "not a supported image format (unknown format)",
    "truncated": "truncated JPEG data",
    "corrupt": "corrupt JPEG",
    "max_pixels": "exceeds max_pixels",
    "no_quant_table": "Quantization table",
    "precision": "precision 12",
    "lossless": "SOF type 0xc3",
    "fifo": "not a regular file (FIFO)",
    "link": "symbolic link refused",
    "unreadable": "Permission denied",
}

# How a test running as root starts the daemon so that mode 000 binds it.
DAEMON_PREFIX_AS_ROOT = ["setpriv", "--inh-caps=-dac_override,-dac_read_search",
                         "--bounding-set=-dac_override,-dac_read_search"]


@dataclass(frozen=True)
class Entry:
    kind: str            # what the entry is, for failure messages
    path: bytes          # relative to the root, as on disk
    label: int           # its class folder's position (IGNORED: meaningless)
    outcome: str         # DELIVERED, SKIPPED or IGNORED
    reason: str = ""     # SKIPPED: a substring of the failure reason
    reference: bytes = b""  # DELIVERED: file whose PIL decode is the expected pixels

    @property
    def shown(self):
        """The path as the daemon reports it (EscapeText: bytes that are
        not valid UTF-8 become \\xNN)."""
        return self.path.decode("utf-8", "backslashreplace")


# --- JPEG bytes ----------------------------------------------------------------
def _image(seed, mode="RGB", size=DELIVERED_SIZE):
    """A small natural-ish image: gradients, a disc and grain."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32)
    base = np.stack([xx * 3.0, yy * 3.5, (xx + yy) * 1.7], axis=-1) + rng.integers(0, 90, 3)
    disc = ((xx - size * 0.6) ** 2 + (yy - size * 0.4) ** 2) < (size * 0.25) ** 2
    base[disc] = rng.integers(0, 256, 3)
    base += rng.normal(0, 6, base.shape)
    img = Image.fromarray(np.clip(base, 0, 255).astype(np.uint8), "RGB")
    return img if mode == "RGB" else img.convert(mode)


def _jpeg(img, **kw):
    out = io.BytesIO()
    kw.setdefault("quality", 90)
    img.save(out, "JPEG", **kw)
    return out.getvalue()


def _segments(data):
    """The header segments up to SOS: [(marker byte, start, end)], end
    exclusive, start at the 0xFF."""
    assert data[:2] == b"\xff\xd8"
    pos, out = 2, []
    while pos < len(data):
        assert data[pos] == 0xFF, "not at a marker"
        marker = data[pos + 1]
        length = struct.unpack(">H", data[pos + 2:pos + 4])[0]
        out.append((marker, pos, pos + 2 + length))
        if marker == 0xDA:
            break
        pos += 2 + length
    return out


def _without(data, marker):
    """The file with every header segment of `marker` removed."""
    out, last = bytearray(), 0
    for m, start, end in _segments(data):
        if m == marker:
            out += data[last:start]
            last = end
    return bytes(out + data[last:])


def _sof(data):
    return next(start for m, start, _ in _segments(data) if m in (0xC0, 0xC1, 0xC2))


def _many_scans_script(components=3):
    """A progressive scan script of 3 + 3 * 32 = 99 scans (jpegtran's most):
    the DC of each component, then the AC coefficients of each component
    two at a time."""
    lines = ["%d: 0 0 0 0;" % c for c in range(components)]
    for c in range(components):
        lines += ["%d: %d %d 0 0;" % (c, k, min(k + 1, 63)) for k in range(1, 64, 2)]
    return "\n".join(lines) + "\n"


def _jpegtran(data, *args, tmp):
    import subprocess
    src = os.path.join(tmp, b"jpegtran-in.jpg")
    with open(src, "wb") as f:
        f.write(data)
    return subprocess.run(["jpegtran", *args, src], check=True, capture_output=True).stdout


# --- the tree ------------------------------------------------------------------
def build(root, outside=None):
    """Writes the hostile ImageFolder under `root` (created) and returns its
    entries. `outside` is a folder outside the dataset (and outside the
    daemon's allowed roots) for the escaping link's target; default:
    root/../outside."""
    root = os.fsencode(os.path.abspath(root))
    outside = os.fsencode(os.path.abspath(outside)) if outside else os.path.join(
        os.path.dirname(root), b"outside")
    tmp = os.path.join(os.path.dirname(root), b"hostile-corpus-work")
    for d in (root, outside, tmp):
        os.makedirs(d, exist_ok=True)
    a, b = b"class_a", b"class_b"
    for c in (a, b):
        os.makedirs(os.path.join(root, c), exist_ok=True)
    labels = {a: 0, b: 1}
    entries = []

    def write(cls, name, data):
        with open(os.path.join(root, cls, name), "wb") as f:
            f.write(data)
        return cls + b"/" + name

    def delivered(kind, cls, name, data, reference=None):
        path = write(cls, name, data)
        ref = path
        if reference is not None:
            ref = write(cls, b".ref-" + name, reference)  # hidden: not a sample
        entries.append(Entry(kind, path, labels[cls], DELIVERED, reference=ref))

    def skipped(kind, cls, name, data, reason):
        path = write(cls, name, data) if data is not None else cls + b"/" + name
        entries.append(Entry(kind, path, labels[cls], SKIPPED, reason=REASONS[reason]))

    def ignored(kind, path):
        entries.append(Entry(kind, path, -1, IGNORED))

    plain = _jpeg(_image(1))
    rng = np.random.default_rng(1234)

    # Controls and decodable oddities.
    delivered("baseline", a, b"baseline.jpg", plain)
    delivered("baseline, other class", b, b"baseline_b.jpg", _jpeg(_image(2)))
    delivered("progressive", b, b"progressive.jpg", _jpeg(_image(3), progressive=True))
    delivered("grayscale", b, b"gray.jpg", _jpeg(_image(4, "L")))
    delivered("CMYK (Adobe, inverted)", a, b"cmyk.jpg", _jpeg(_image(5, "CMYK")))
    delivered("arithmetic-coded", a, b"arithmetic.jpg",
              _jpegtran(plain, "-arithmetic", tmp=tmp), reference=plain)
    script = os.path.join(tmp, b"scans.txt")
    with open(script, "w") as f:
        f.write(_many_scans_script())
    many = _jpegtran(plain, "-scans", os.fsdecode(script), tmp=tmp)
    assert many.count(b"\xff\xda") == 99
    delivered("many-scan (99 scans)", a, b"many_scans.jpg", many, reference=plain)
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: rotate 90 CW to display
    delivered("EXIF-rotated (orientation 6, ignored)", a, b"exif_rotated.jpg",
              _jpeg(_image(6), exif=exif.tobytes()))
    # Huffman tables left out: the standard ones are used, and the file was
    # coded with them (Pillow's default, optimize off).
    delivered("missing Huffman tables", a, b"no_dht.jpg", _without(plain, 0xC4), reference=plain)
    # 8 APP15 segments of 64 KiB before the frame: a huge header, still valid.
    app = b"".join(b"\xff\xef" + struct.pack(">H", 65535) + bytes(65533) for _ in range(8))
    delivered("huge header (512 KiB of APP segments)", a, b"huge_app_header.jpg",
              plain[:2] + app + plain[2:], reference=plain)
    delivered("JPEG named .PNG", a, b"jpeg_named.PNG", _jpeg(_image(7)))
    delivered("non-UTF-8 name, valid JPEG", a, b"caf\xe9.jpg", _jpeg(_image(8)))

    # Refused, each with its reason.
    skipped("zero-byte", a, b"zero.jpg", b"", "empty")
    skipped("random bytes", a, b"random.jpg", rng.integers(1, 255, 3000, dtype=np.uint8).tobytes(),
            "unknown")
    png = io.BytesIO()
    _image(9).save(png, "PNG")
    delivered("PNG named .jpg", a, b"png_named.jpg", png.getvalue())
    skipped("random bytes after SOI", b, b"random_after_soi.jpg",
            b"\xff\xd8" + rng.integers(0, 256, 3000, dtype=np.uint8).tobytes(), "corrupt")
    for pct in (10, 50, 99):
        skipped("truncated to %d%%" % pct, a, b"truncated_%02d.jpg" % pct,
                plain[:len(plain) * pct // 100], "truncated")
    sos = next(start for m, start, _ in _segments(plain) if m == 0xDA)
    bad_marker = bytearray(plain)
    bad_marker[sos + 1] = 0x4B  # SOS becomes 0xFF 0x4B, no marker at all
    skipped("corrupt marker code", a, b"corrupt_marker.jpg", bytes(bad_marker), "corrupt")
    huge = bytearray(plain)
    huge[_sof(plain) + 5:_sof(plain) + 9] = struct.pack(">HH", 60000, 60000)
    skipped("huge header dimensions (60000x60000)", a, b"huge_dimensions.jpg", bytes(huge),
            "max_pixels")
    skipped("missing quantization tables", a, b"no_dqt.jpg", _without(plain, 0xDB),
            "no_quant_table")
    twelve = bytearray(plain)
    twelve[_sof(plain) + 1] = 0xC1  # extended sequential ...
    twelve[_sof(plain) + 4] = 12    # ... at 12-bit precision
    skipped("12-bit", a, b"twelve_bit.jpg", bytes(twelve), "precision")
    lossless = bytearray(plain)
    lossless[_sof(plain) + 1] = 0xC3  # the lossless process
    skipped("lossless (SOF3)", a, b"lossless.jpg", bytes(lossless), "lossless")
    skipped("non-UTF-8 name, random bytes", b, b"\xff\xfe.jpg",
            rng.integers(1, 255, 100, dtype=np.uint8).tobytes(), "unknown")
    os.mkfifo(os.path.join(root, a, b"fifo.jpg"))
    skipped("FIFO", a, b"fifo.jpg", None, "fifo")
    with open(os.path.join(outside, b"secret.jpg"), "wb") as f:
        f.write(_jpeg(_image(10)))
    os.symlink(os.path.join(b"..", b"..", os.path.basename(outside), b"secret.jpg"),
               os.path.join(root, a, b"escaping_link.jpg"))
    skipped("symlink escaping the root", a, b"escaping_link.jpg", None, "link")
    unreadable = write(a, b"unreadable.jpg", _jpeg(_image(11)))
    os.chmod(os.path.join(root, unreadable), 0)
    entries.append(Entry("unreadable (mode 000)", unreadable, 0, SKIPPED,
                         reason=REASONS["unreadable"]))

    # Not samples.
    ignored("JPEG named .txt", write(a, b"jpeg_named.txt", plain))
    ignored("hidden file", write(a, b".hidden.jpg", plain))
    os.makedirs(os.path.join(root, a, b"folder.jpg"))
    with open(os.path.join(root, a, b"folder.jpg", b"inner.jpg"), "wb") as f:
        f.write(plain)
    ignored("directory named like an image", a + b"/folder.jpg")
    ignored("image inside that directory", a + b"/folder.jpg/inner.jpg")
    return entries


def index_order(entries):
    """The indexed entries (DELIVERED or SKIPPED) in dataset-index order:
    by label, then file name in byte order."""
    indexed = [e for e in entries if e.outcome != IGNORED]
    return sorted(indexed, key=lambda e: (e.label, e.path.rsplit(b"/", 1)[1]))


def expected_pixels(root, entry):
    """The RGB pixels (H, W, 3 uint8) a DELIVERED entry must be served as."""
    path = os.path.join(os.fsencode(os.path.abspath(root)), entry.reference)
    with Image.open(path) as img:
        return np.asarray(img.convert("RGB"))


# --- hostile tar shards ----------------------------------------------------------
# build_tar(folder) writes one case per entry of TAR_CASES under
# `folder` and returns [TarCase]. A case is served (the shards load; `images`
# maps each sample's dataset path, "SHARD/MEMBER", to the label it must come
# with, `skipped` each failing sample's path to a substring of its reason,
# `warning` a substring of the daemon's log at load) or refused at load
# (`refused`: a substring of the error; --check-config fails).
TAR_REASONS = {
    "case_duplicate": "differ only in the case of their extension",
    "sparse": "a sparse tar member",
    "sparse_warning": "sparse member(s)",
    "concatenated": "data after the end-of-archive block",
    "same_file": "are the same file",
    "link": "symbolic link refused",
}


@dataclass(frozen=True)
class TarCase:
    name: str
    shards: tuple           # absolute paths (str), as the config lists them
    images: tuple = ()      # served: ((dataset path, label), ...) of samples delivered
    skipped: tuple = ()     # served: ((dataset path, reason substring), ...)
    warning: str = ""       # served: a substring the load logs
    refused: str = ""       # refused at load: a substring of the error


def _tar_header(name, size, type_=b"0", extra=None, magic=b"ustar  \0"):
    """A tar header block: GNU's magic by default, POSIX's b"ustar\\x0000"."""
    h = bytearray(512)
    h[0:len(name)] = name
    h[100:108] = b"0000644\0"
    h[108:116] = b"0000000\0"
    h[116:124] = b"0000000\0"
    h[124:136] = b"%011o\0" % size
    h[136:148] = b"00000000000\0"
    h[156:157] = type_
    h[257:265] = magic
    for offset, value in (extra or {}).items():
        h[offset:offset + len(value)] = value
    h[148:156] = b"        "
    h[148:156] = b"%06o\0 " % sum(h)
    return bytes(h)


def _pad(data):
    return data + b"\0" * (-len(data) % 512)


def _tar_member(name, data, type_=b"0", magic=b"ustar  \0"):
    return _tar_header(name, len(data), type_, magic=magic) + _pad(data)


def _pax_record(kv):
    n = len(kv) + 2
    while len(str(n)) + len(kv) + 2 != n:
        n = len(str(n)) + len(kv) + 2
    return b"%d %s\n" % (n, kv)


def _gnu_sparse_member(name, data):
    """An old GNU sparse member ('S') whose map goes on in an extension
    block ("isextended"), as GNU tar --sparse --format=gnu writes files with
    more than 4 holes: header (4 map entries), extension block (the 5th and
    an empty one at the end of the file), then the archived data: `data` in
    5 pieces of whole blocks (the last ones may be short or empty), each
    after a hole of len(data) bytes."""
    n = len(data)
    piece = 512 * max(1, -(-n // (512 * 5)))  # whole blocks (GNU tar reads them so)
    cuts = [min(n, piece * i) for i in range(5)] + [n]
    entries = [b"%011o\0" % (2 * n * i + n) + b"%011o\0" % (cuts[i + 1] - cuts[i])
               for i in range(5)]
    real = 2 * n * 5 + n
    header = _tar_header(name, n, b"S", {
        386: b"".join(entries[:4]),   # the header's 4 map entries
        482: b"\x01",                 # isextended
        483: b"%011o\0" % real,       # realsize
    })
    ext = bytearray(512)  # ext[504] = 0: the last extension block
    ext[0:48] = entries[4] + b"%011o\0" % real + b"%011o\0" % 0
    return header + bytes(ext) + _pad(data)


def _pax_sparse_member(name, data):
    """GNU tar's pax sparse format 1.0: the real name in GNU.sparse.name,
    the member named GNUSparseFile.N/, its data a map then the bytes."""
    records = b"".join(_pax_record(kv) for kv in (
        b"GNU.sparse.major=1", b"GNU.sparse.minor=0", b"GNU.sparse.name=" + name,
        b"GNU.sparse.realsize=%d" % (len(data) * 4)))
    # The map: 2 entries, the data at 0 and an empty one at the real end.
    body = _pad(b"2\n0\n%d\n%d\n0\n" % (len(data), len(data) * 4)) + data
    base = name.rsplit(b"/", 1)[-1]
    posix = b"ustar\x0000"
    return (_tar_member(b"./PaxHeaders.1/" + base, records, b"x", magic=posix) +
            _tar_member(b"./GNUSparseFile.1/" + base, body, magic=posix))


_TAR_END = b"\0" * 1024


def build_tar(folder):
    """Writes the hostile tar cases under `folder` (one sub-folder each) and
    returns [TarCase]."""
    folder = os.path.abspath(os.fsdecode(folder))
    cases = []
    seed = [100]

    def jpeg():
        seed[0] += 1
        return _jpeg(_image(seed[0]))

    def write(case, name, data):
        d = os.path.join(folder, case)
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, name)
        with open(path, "wb") as f:
            f.write(data)
        return path

    def sample(key, label):
        return _tar_member(key + b".jpg", jpeg()) + _tar_member(key + b".cls", b"%d" % label)

    # Two label members differing only in case: which label is meant?
    shard = write("case_duplicate", "s.tar", sample(b"000", 1) +
                  _tar_member(b"000.CLS", b"2") + _TAR_END)
    cases.append(TarCase("label members 000.cls and 000.CLS", (shard,),
                         refused=TAR_REASONS["case_duplicate"]))
    shard = write("case_duplicate_image", "s.tar", sample(b"000", 1) +
                  _tar_member(b"000.JPG", jpeg()) + _TAR_END)
    cases.append(TarCase("image members 000.jpg and 000.JPG", (shard,),
                         refused=TAR_REASONS["case_duplicate"]))

    # cat a.tar b.tar: b's members lie after a's end-of-archive blocks.
    first = sample(b"a0", 0) + sample(b"a1", 1) + _TAR_END + b"\0" * 8192
    shard = write("concatenated", "s.tar", first + sample(b"b0", 2) + _TAR_END)
    cases.append(TarCase("concatenated archives", (shard,),
                         images=(("s.tar/a0.jpg", 0), ("s.tar/a1.jpg", 1)),
                         warning=TAR_REASONS["concatenated"]))

    # Sparse members between ordinary ones: the rest of the shard serves.
    for case, member in (("gnu_sparse", _gnu_sparse_member), ("pax_sparse", _pax_sparse_member)):
        shard = write(case, "s.tar", sample(b"000", 0) + member(b"001.jpg", jpeg()) +
                      _tar_member(b"001.cls", b"1") + sample(b"002", 2) + _TAR_END)
        cases.append(TarCase("%s member" % case.replace("_", " "), (shard,),
                             images=(("s.tar/000.jpg", 0), ("s.tar/002.jpg", 2)),
                             skipped=(("s.tar/001.jpg", TAR_REASONS["sparse"]),),
                             warning=TAR_REASONS["sparse_warning"]))

    # The same shard twice: through a hard link (another name, one inode).
    shard = write("same_file", "a.tar", sample(b"000", 0) + _TAR_END)
    twin = os.path.join(os.path.dirname(shard), "b.tar")
    os.link(shard, twin)
    cases.append(TarCase("one shard listed twice through a hard link", (shard, twin),
                         refused=TAR_REASONS["same_file"]))

    # A shard that is a symbolic link, even to a shard inside the allowed
    # roots (the config check passes it): links are not followed.
    target = write("link", "target.tar", sample(b"000", 0) + _TAR_END)
    shard = os.path.join(os.path.dirname(target), "s.tar")
    os.symlink("target.tar", shard)
    cases.append(TarCase("shard that is a symbolic link", (target, shard),
                         refused=TAR_REASONS["link"]))
    return cases
