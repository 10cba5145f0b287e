"""Sample fields through the C ABI (conveyor_batch_field_*) and the C++
header over it (conveyor_client.hpp), against a real conveyord reading tar
shards written here, and against a fake daemon that sends hostile columns.

- cpp_client_fields.c (compiled as C against the built library) reads an
  epoch of a pipeline with a caption, optional JSON metadata and the key of
  every sample, over shared memory, the data socket and inline: every
  sample comes once and every value equals what its shard holds; the ABI's
  own errors (an index past the fields, an unknown name, NULL arguments)
  are what the header says; a held batch's fields outlive the stream.
- cpp_client_hpp.cc reads the captions through conveyor::abi::FieldView.
- A fake daemon (Python gRPC) sends a valid batch, then one whose columns
  lie: the stream ends with INTERNAL naming the field and what is wrong,
  never a crash; an empty batch without columns gets empty ones.
"""

import json
import subprocess
from concurrent import futures

import grpc
import pytest

from conveyor_integration import (BUILD_DIR, CAPTION_FIELDS, SOURCE_DIR, Daemon, daemon_config,
                                  finish_daemons, pb, pb_grpc, pipeline_entry, scaled,
                                  write_field_shards)

LIB_DIR = BUILD_DIR / "client" / "cpp"
INCLUDE_DIR = SOURCE_DIR / "client" / "cpp" / "include"
HERE = SOURCE_DIR / "tests" / "integration"
PER_SHARD = 10
FIELDS = CAPTION_FIELDS


def _caption(i):
    # Not ASCII, of varied length: the bytes travel as they are.
    return "photo %d: a caf\u00e9 \u2615 %s" % (i, "x" * (i % 7))


def _meta(i, label):
    return {"i": i, "label": label, "boxes": [[i, 1.5, 2, 3]]}


def _sanitizer_flags():
    """The library's sanitizer's flags (a program linking it needs them)."""
    data = (LIB_DIR / "libconveyor_client.so").resolve().read_bytes()
    if b"__asan_init" in data:
        return ["-fsanitize=address,undefined", "-fno-sanitize=vptr"]
    if b"__tsan_init" in data:
        return ["-fsanitize=thread"]
    return []


def _compile(compiler, std, source, out):
    lib = LIB_DIR / "libconveyor_client.so"
    if not lib.exists():
        pytest.fail("not built: %s" % lib)
    r = subprocess.run([compiler, std, "-Wall", "-Wextra", "-Werror", *_sanitizer_flags(),
                        "-I", str(INCLUDE_DIR), str(source), "-o", str(out), "-L", str(LIB_DIR),
                        "-lconveyor_client", "-Wl,-rpath," + str(LIB_DIR)],
                       capture_output=True, text=True, timeout=scaled(120))
    assert r.returncode == 0, r.stderr
    return out


@pytest.fixture(scope="module")
def tools(tmp_path_factory):
    out = tmp_path_factory.mktemp("field-tools")
    return {"c": _compile("cc", "-std=c11", HERE / "cpp_client_fields.c", out / "fields_c"),
            "hpp": _compile("c++", "-std=c++17", HERE / "cpp_client_hpp.cc", out / "fields_hpp")}


@pytest.fixture(scope="module")
def served(dataset, tmp_path_factory):
    """A daemon serving `clip` (the fields above over tar shards; samples
    whose number is a multiple of 5 have no .json) and `train` (no fields)."""
    root, samples = dataset
    out = tmp_path_factory.mktemp("cpp-field-shards")
    paths = write_field_shards(root, samples, out, _caption, _meta, per_shard=PER_SHARD)
    pipelines = {
        "clip": pipeline_entry(root, dataset={"shards": [str(p) for p in paths]}, fields=FIELDS),
        "train": pipeline_entry(root),
    }
    cfg = daemon_config(root, pipelines=pipelines, allowed_roots=[str(root.parent), str(out)])
    # YAML is a superset of JSON: lists of maps written as JSON.
    d = Daemon(tmp_path_factory.mktemp("cpp-fields-daemon"), json.dumps(cfg))
    try:
        d.start()
        yield d, samples
    finally:
        finish_daemons([d])


class FieldRun:
    """What cpp_client_fields printed: the fields line, the batches, the
    values {name: {sample_index: (present, bytes)}} and the checks."""

    def __init__(self, proc):
        self.proc = proc
        self.fields = None
        self.batches = []
        self.values = {}
        self.ok = []
        self.failed = []
        for line in proc.stdout.splitlines():
            words = line.split()
            if not words:
                continue
            if words[0] == "fields":
                self.fields = words[2:]
                assert int(words[1]) == len(self.fields), line
            elif words[0] == "batch":
                self.batches.append((int(words[1]), int(words[2])))
            elif words[0] == "value":
                name, index, present, raw = words[1], int(words[2]), int(words[3]), words[4]
                column = self.values.setdefault(name, {})
                assert index not in column, "sample %d twice in field %s" % (index, name)
                column[index] = (present, b"" if raw == "-" else bytes.fromhex(raw))
            elif words[0] == "ok":
                self.ok.append(words[1])
            elif words[0] == "FAILED":
                self.failed.append(line)


def run_fields(tools, address, pipeline, batch_size=8, transport="auto"):
    proc = subprocess.run([str(tools["c"]), address, pipeline, str(batch_size), transport],
                          capture_output=True, text=True, timeout=scaled(60))
    # A crash (signal) is never an acceptable way to fail.
    assert proc.returncode >= 0, "died of signal %d:\n%s" % (-proc.returncode, proc.stderr)
    return FieldRun(proc)


ABI_CHECKS = {"index_past_the_fields_is_out_of_range", "offsets_past_the_fields_is_out_of_range",
              "null_batch_is_invalid_argument", "null_out_is_invalid_argument",
              "unknown_name_is_not_found", "find_field_gives_its_index",
              "held_batch_fields_unchanged_after_close"}


@pytest.mark.parametrize("via, transport", [("unix", "auto"), ("unix", "shared_memory"),
                                            ("tcp", "data_socket"), ("tcp", "inline")])
def test_every_caption_through_the_c_abi_equals_the_shards(served, tools, via, transport):
    d, samples = served
    got = run_fields(tools, getattr(d, via), "clip", transport=transport)
    assert got.proc.returncode == 0, got.proc.stdout[-3000:] + got.proc.stderr
    assert got.failed == [], got.failed
    assert ABI_CHECKS <= set(got.ok), got.ok
    assert got.fields == ["caption:text", "meta:json", "key:key"]
    assert sum(n for _, n in got.batches) == len(samples)
    assert [s for s, _ in got.batches] == list(range(len(got.batches)))
    # Every sample once, in every field.
    for name in ("caption", "meta", "key"):
        assert sorted(got.values[name]) == list(range(len(samples))), name
    for i, (_, label) in enumerate(samples):
        # Shards hold the samples in index order, so the key names the index.
        assert got.values["key"][i] == (1, b"sub/s%06d" % i)
        assert got.values["caption"][i] == (1, _caption(i).encode()), i
        present, meta = got.values["meta"][i]
        if i % 5:
            assert present == 1 and json.loads(meta) == _meta(i, label), i
        else:
            assert (present, meta) == (0, b""), i  # optional and absent: empty


def test_the_cpp_header_reads_the_captions(served, tools):
    d, samples = served
    proc = subprocess.run([str(tools["hpp"]), d.unix, "clip", "8", "11", "caption"],
                          capture_output=True, text=True, timeout=scaled(60))
    assert proc.returncode == 0, proc.stderr
    fields = dict(w.split("=", 1) for w in proc.stdout.split()[1:])
    indices = [int(v) for v in fields["indices"].split(",")]
    values = [bytes.fromhex(v) for v in fields["values"].split(",")]
    assert sorted(indices) == list(range(len(samples)))
    assert values == [_caption(i).encode() for i in indices]
    # An unknown field is the library's NOT_FOUND, naming the fields there.
    bad = subprocess.run([str(tools["hpp"]), d.unix, "clip", "8", "11", "colour"],
                         capture_output=True, text=True, timeout=scaled(60))
    assert bad.returncode == 1, bad.stdout
    assert "NOT_FOUND" in bad.stderr and "colour" in bad.stderr, bad.stderr
    assert "caption, meta, key" in bad.stderr, bad.stderr


def test_a_pipeline_without_fields_has_none(served, tools):
    d, samples = served
    got = run_fields(tools, d.unix, "train")
    assert got.proc.returncode == 0, got.proc.stdout[-3000:] + got.proc.stderr
    assert got.fields == [] and got.values == {} and got.failed == []
    assert sum(n for _, n in got.batches) == len(samples)
    assert "index_past_the_fields_is_out_of_range" in got.ok


# --- a fake daemon ---------------------------------------------------------------
DECLARED = [("caption", pb.FIELD_TEXT), ("key", pb.FIELD_KEY)]


def _le32(values):
    return b"".join(int(v).to_bytes(4, "little") for v in values)


def _column(name, ftype, values):
    """A valid column of `values` (None: absent)."""
    offsets, data, present = [0], b"", b""
    for v in values:
        data += v or b""
        offsets.append(len(data))
        present += b"\x01" if v is not None else b"\x00"
    return pb.FieldColumn(name=name, type=ftype, offsets=_le32(offsets), data=data,
                          present=present)


def _batch(sequence, slot, n, columns):
    return pb.Batch(sequence=sequence, epoch=0, batch_in_epoch=sequence, num_samples=n,
                    shape=[n, 1], dtype=pb.UINT8, slot=slot, images=bytes(range(n)),
                    images_bytes=n, labels=[0] * n, sample_indices=list(range(10 * sequence,
                                                                                10 * sequence + n)),
                    fields=columns)


def _good(sequence, slot, n=2):
    return _batch(sequence, slot, n, [
        _column("caption", pb.FIELD_TEXT, [b"cap %d.%d" % (sequence, i) for i in range(n)]),
        _column("key", pb.FIELD_KEY, [b"k%d" % i if i % 2 == 0 else None for i in range(n)])])


class FakeConveyor(pb_grpc.ConveyorServicer):
    """Answers StreamBatches with StreamOpened (INLINE, the DECLARED
    fields), the given batches and StreamEnd."""

    def __init__(self, batches):
        self.batches = batches

    def StreamBatches(self, request_iterator, context):
        next(request_iterator)  # OpenStream
        info = pb.PipelineInfo(name="fake", dataset_size=100, sample_shape=[1], dtype=pb.UINT8,
                               fields=[pb.FieldInfo(name=n, type=t) for n, t in DECLARED])
        yield pb.ServerMessage(opened=pb.StreamOpened(
            stream_id=1, transport=pb.INLINE, samples_per_epoch=100, batches_per_epoch=50,
            pipeline=info, inline_message=pb.InlineOpened()))
        for b in self.batches:
            yield pb.ServerMessage(batch=b)
        yield pb.ServerMessage(end=pb.StreamEnd(batches=len(self.batches)))


@pytest.fixture
def fake_daemon():
    servers = []

    def start(batches):
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pb_grpc.add_ConveyorServicer_to_server(FakeConveyor(batches), server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        servers.append(server)
        return "127.0.0.1:%d" % port

    yield start
    for s in servers:
        s.stop(grace=None)


def test_fake_daemon_valid_batches_and_an_empty_one(fake_daemon, tools):
    # An empty batch (every sample failed) may carry no columns: it gets
    # empty ones of the declared fields.
    address = fake_daemon([_good(0, 0), _batch(1, 1, 0, []), _good(2, 2, n=3)])
    got = run_fields(tools, address, "fake", batch_size=3)
    assert got.proc.returncode == 0, got.proc.stdout + got.proc.stderr
    assert got.failed == [] and ABI_CHECKS <= set(got.ok), got.proc.stdout
    assert got.fields == ["caption:text", "key:key"]
    assert got.batches == [(0, 2), (1, 0), (2, 3)]
    assert got.values["caption"] == {0: (1, b"cap 0.0"), 1: (1, b"cap 0.1"), 20: (1, b"cap 2.0"),
                                     21: (1, b"cap 2.1"), 22: (1, b"cap 2.2")}
    assert got.values["key"] == {0: (1, b"k0"), 1: (0, b""), 20: (1, b"k0"), 21: (0, b""),
                                 22: (1, b"k2")}


def _mutated(**changes):
    """Batch 1 with its caption column changed."""
    b = _good(1, 1)
    for k, v in changes.items():
        setattr(b.fields[0], k, v)
    return b


def _renamed(name):
    b = _good(1, 1)
    b.fields[1].name = name
    return b


def _swapped():
    b = _good(1, 1)
    cols = [pb.FieldColumn(), pb.FieldColumn()]
    cols[0].CopyFrom(b.fields[1])
    cols[1].CopyFrom(b.fields[0])
    del b.fields[:]
    b.fields.extend(cols)
    return b


@pytest.mark.parametrize("bad, why", [
    (_mutated(offsets=_le32([0, 5])), 'field "caption": 8 bytes of offsets for 2 samples '
                                      '(12 expected: 3 uint32)'),
    (_mutated(offsets=_le32([0, 5, 9])), 'field "caption": offsets end at 9 but data has 14 bytes'),
    (_mutated(offsets=_le32([0, 0xFFFFFFF0, 14])), 'field "caption": offsets decrease at sample 1'),
    (_mutated(offsets=_le32([3, 7, 14])), 'field "caption": offsets start at 3, not 0'),
    (_mutated(data=b"x" * 1000), 'field "caption": offsets end at 14 but data has 1000 bytes'),
    (_mutated(present=b"\x01"), 'field "caption": 1 bytes of present for 2 samples'),
    (_mutated(present=b"\x01\x07"), 'field "caption": present[1] is 7 (0 or 1 expected)'),
    (_mutated(present=b"\x00\x01"), 'field "caption": sample 0 is absent but has 7 bytes'),
    (_mutated(type=9), 'field "caption": unknown type 9'),
    (_renamed("caption"), 'field "caption" comes twice'),
    (_renamed(""), "a field without a name"),
    (_renamed("colour"), "the batch's fields [caption (text), colour (key)] differ from the "
                         "pipeline's [caption (text), key (key)]"),
    (_swapped(), "the batch's fields [key (key), caption (text)] differ"),
], ids=["offsets-short", "offsets-end-short", "offsets-decrease", "offsets-start",
        "data-lies", "present-short", "present-flag", "absent-with-bytes", "type", "twice",
        "unnamed", "undeclared", "order"])
def test_hostile_columns_end_the_stream_naming_the_field(fake_daemon, tools, bad, why):
    address = fake_daemon([_good(0, 0), bad, _good(2, 2)])
    got = run_fields(tools, address, "fake")
    assert got.proc.returncode == 1, got.proc.stdout + got.proc.stderr
    # The valid batch before it was delivered; the bad one and those after
    # it never were.
    assert got.batches == [(0, 2)], got.proc.stdout
    assert got.values["caption"] == {0: (1, b"cap 0.0"), 1: (1, b"cap 0.1")}
    assert "INTERNAL" in got.proc.stderr, got.proc.stderr
    assert "protocol error: batch 1: " + why in got.proc.stderr, got.proc.stderr
    assert 'pipeline "fake"' in got.proc.stderr, got.proc.stderr
