"""Sample fields on the client, without a daemon (conveyor/_fields.py):
FieldColumn messages built by hand become Batch.fields - values by type,
absent samples, the sequence protocol, the arrays for zero-overhead readers
- and every column that does not fit its batch, or a value that does not
decode, is a ProtocolError naming the field (a fuzz loop of hostile columns
ends in a valid column or that error, never another exception). Then how
fields travel: Stream._wrap (checked against the pipeline's declared
fields), Batch.copy(), DeviceBatch, the torch / jax / tensorflow adapters
(opt-in) and `conveyor fetch`'s files."""

import io
import json
import random
import struct
import threading
import types

import numpy as np
import pytest

from conveyor import FieldColumn, _fields, cli
from conveyor._batch import Batch
from conveyor._device_feed import DeviceBatch
from conveyor._fields import build_fields, field_names, select_fields
from conveyor._inline import InlineTransport
from conveyor._stream import Stream
from conveyor._stubs import pb
from conveyor.errors import ConveyorError, InvalidRequest, ProtocolError

TYPES = {"text": pb.FIELD_TEXT, "bytes": pb.FIELD_BYTES, "json": pb.FIELD_JSON,
         "key": pb.FIELD_KEY, "npy": pb.FIELD_NPY, "mask": pb.FIELD_MASK}


def message(name, kind, values):
    """A conveyor_pb2.FieldColumn of `values` (bytes, or None: absent)."""
    offsets, data, present = [0], b"", b""
    for v in values:
        data += v or b""
        offsets.append(len(data))
        present += b"\x01" if v is not None else b"\x00"
    return pb.FieldColumn(name=name, type=TYPES.get(kind, kind),
                          offsets=struct.pack("<%dI" % len(offsets), *offsets), data=data,
                          present=present)


def column(name, kind, values):
    return FieldColumn(message(name, kind, values), len(values))


# --- values -------------------------------------------------------------------

def test_text_values_and_absent_samples():
    col = column("caption", "text", [b"a dog", None, "caf\u00e9 \u2603".encode(), b""])
    assert len(col) == 4
    assert list(col) == ["a dog", None, "caf\u00e9 \u2603", ""]
    assert col[0] == "a dog" and col[1] is None and col[3] == ""
    assert col.name == "caption" and col.type == "text"


def test_bytes_values():
    col = column("raw", "bytes", [b"\x00\xff\x80", None, b""])
    assert list(col) == [b"\x00\xff\x80", None, b""]
    assert all(isinstance(v, bytes) for v in col if v is not None)


def test_npy_values_are_read_only_arrays_loaded_once():
    import io
    buf = io.BytesIO()
    np.save(buf, np.arange(8, dtype=np.float32).reshape(2, 4))
    col = column("boxes", "npy", [buf.getvalue(), None])
    first = col[0]
    assert first.dtype == np.float32 and first.shape == (2, 4)
    assert first.tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert col[0] is first and col[1] is None
    with pytest.raises(ValueError):
        first[0, 0] = 1  # shared by every reader: read-only
    bad = column("boxes", "npy", [b"\x93NUMPY junk"])
    with pytest.raises(ProtocolError, match=r"field 'boxes' of sample 0 .*not a \.npy array"):
        bad[0]


def test_masks_are_read_only_arrays_of_the_column_shape():
    m = message("mask", "mask", [bytes(range(6)), None])
    m.value_shape.extend([2, 3])
    col = FieldColumn(m, 2)
    assert col[0].tolist() == [[0, 1, 2], [3, 4, 5]] and col[1] is None
    assert not col[0].flags.writeable and col.value_shape == (2, 3)
    short = message("mask", "mask", [bytes(5)])
    short.value_shape.extend([2, 3])
    with pytest.raises(ProtocolError, match="mask of sample 0 has 5 bytes, not 2 x 3"):
        FieldColumn(short, 1)
    shapeless = message("mask", "mask", [bytes(6)])
    with pytest.raises(ProtocolError, match="value_shape"):
        FieldColumn(shapeless, 1)
    text = message("caption", "text", [b"a"])
    text.value_shape.extend([1, 1])
    with pytest.raises(ProtocolError, match="value_shape"):
        FieldColumn(text, 1)


def test_json_is_parsed_lazily_and_cached():
    col = column("meta", "json", [b'{"boxes": [[1, 2, 3, 4]]}', b"not json", None, b" 7 "])
    first = col[0]
    assert first == {"boxes": [[1, 2, 3, 4]]}
    assert col[0] is first, "a JSON value is parsed once and cached"
    assert col[3] == 7 and col[2] is None
    # The bad value fails only when read, naming the field and the sample.
    with pytest.raises(ProtocolError, match=r"field 'meta' of sample 1 .*not valid JSON"):
        col[1]
    assert col[-1] == 7
    assert col.present.tolist() == [True, True, False, True]


def test_json_null_and_absent_differ_in_present_only():
    col = column("meta", "json", [b"null", None])
    assert col[0] is None and col[1] is None
    assert col.present.tolist() == [True, False]


def test_key_keeps_any_bytes_through_surrogateescape():
    raw = b"shard-0/caf\xe9\xff"
    col = column("key", "key", [raw, b"plain"])
    assert col[0].encode("utf-8", "surrogateescape") == raw
    assert col[1] == "plain"


def test_invalid_utf8_text_names_field_and_sample():
    col = column("caption", "text", [b"ok", b"bad \xff"])
    assert col[0] == "ok"
    with pytest.raises(ProtocolError, match=r"field 'caption' of sample 1 \(of 2\): not UTF-8"):
        col[1]
    with pytest.raises(ProtocolError):
        list(col)


def test_json_decode_errors_are_protocol_errors():
    deep = b"[" * 100000 + b"]" * 100000
    cases = [b"\xff{}", b"{", b"[1,]", deep, b"1" * 5000]  # the last: int digits limit
    col = column("meta", "json", cases)
    for i in range(len(cases)):
        with pytest.raises(ProtocolError, match="field 'meta' of sample %d" % i):
            col[i]


def test_sequence_protocol():
    values = [str(i).encode() for i in range(6)]
    col = column("t", "text", values)
    assert col[-1] == "5" and col[-6] == "0"
    assert col[1:4] == ["1", "2", "3"] and col[::-2] == ["5", "3", "1"]
    assert col[np.int64(2)] == "2"
    for i in (6, -7, 100):
        with pytest.raises(IndexError):
            col[i]
    with pytest.raises(TypeError):
        col["0"]
    assert "3" in col and col.index("4") == 4 and list(reversed(col))[0] == "5"
    assert "num_samples=6" in repr(col)


def test_zero_overhead_arrays_are_read_only():
    col = column("t", "bytes", [b"ab", None, b"cde"])
    assert col.offsets.dtype == np.uint32 and col.offsets.tolist() == [0, 2, 2, 5]
    assert col.present.dtype == np.bool_ and col.present.tolist() == [True, False, True]
    assert bytes(col.data) == b"abcde"
    assert not col.offsets.flags.writeable and not col.present.flags.writeable
    with pytest.raises(ValueError):
        col.offsets[0] = 1
    assert col.raw(2) == b"cde" and col.raw(-2) == b"" and col.raw(0) == b"ab"
    with pytest.raises(IndexError):
        col.raw(3)


def test_empty_column():
    col = column("t", "text", [])
    assert len(col) == 0 and list(col) == [] and col[:] == []
    with pytest.raises(IndexError):
        col[0]
    with pytest.raises(IndexError):
        col.raw(0)


# --- columns that do not fit ----------------------------------------------------

def broken(**changes):
    m = message("caption", "text", [b"ab", None, b"c"])
    for k, v in changes.items():
        setattr(m, k, v)
    return m


@pytest.mark.parametrize("changes,n,why", [
    (dict(offsets=struct.pack("<3I", 0, 2, 2)), 3, r"12 bytes of offsets for 3 samples"),
    (dict(offsets=struct.pack("<4I", 0, 2, 2, 3) + b"\x00"), 3, r"17 bytes of offsets"),
    (dict(offsets=b""), 3, r"0 bytes of offsets"),
    (dict(offsets=struct.pack("<4I", 1, 2, 2, 3)), 3, r"offsets start at 1, not 0"),
    (dict(offsets=struct.pack("<4I", 0, 3, 2, 3)), 3, r"offsets decrease at sample 1 \(2 after 3\)"),
    (dict(offsets=struct.pack("<4I", 0, 2, 2, 0xFFFFFFFF)), 3, r"end at 4294967295 but data has 3"),
    (dict(offsets=struct.pack("<4I", 0, 2, 2, 2)), 3, r"offsets end at 2 but data has 3 bytes"),
    (dict(data=b"abcd"), 3, r"offsets end at 3 but data has 4 bytes"),
    (dict(data=b""), 3, r"offsets end at 3 but data has 0 bytes"),
    (dict(present=b"\x01\x00"), 3, r"2 bytes of present for 3 samples"),
    (dict(present=b"\x01\x00\x01\x01"), 3, r"4 bytes of present for 3 samples"),
    (dict(present=b"\x01\x00\x02"), 3, r"present\[2\] is 2"),
    (dict(present=b"\x00\x00\x01"), 3, r"sample 0 is absent but has 2 bytes"),
    (dict(type=pb.FIELD_TYPE_UNSPECIFIED), 3, r"unknown type 0"),
    (dict(type=99), 3, r"unknown type 99"),
    ({}, 2, r"16 bytes of offsets for 2 samples"),  # a batch header that says 2 samples
    ({}, 4, r"16 bytes of offsets for 4 samples"),
])
def test_columns_that_do_not_fit_are_refused_naming_the_field(changes, n, why):
    with pytest.raises(ProtocolError, match=r"batch 9: field 'caption': .*" + why):
        FieldColumn(broken(**changes), n, where="batch 9")


def test_build_fields_keeps_order_and_refuses_names():
    cols = [message("b", "text", [b"x"]), message("a", "json", [b"1"])]
    fields = build_fields(cols, 1)
    assert list(fields) == ["b", "a"] and fields["a"][0] == 1
    with pytest.raises(ProtocolError, match="field 'b' comes twice"):
        build_fields(cols + [message("b", "bytes", [b""])], 1)
    with pytest.raises(ProtocolError, match="a field without a name"):
        build_fields([message("", "text", [b"x"])], 1)


def declared(*pairs):
    return [pb.FieldInfo(name=n, type=TYPES[t]) for n, t in pairs]


def test_build_fields_against_the_pipelines_declaration():
    cols = [message("caption", "text", [b"x"]), message("meta", "json", [b"{}"])]
    ok = build_fields(cols, 1, declared(("caption", "text"), ("meta", "json")))
    assert list(ok) == ["caption", "meta"]
    for decl in (declared(("caption", "text")),
                 declared(("meta", "json"), ("caption", "text")),
                 declared(("caption", "bytes"), ("meta", "json")),
                 declared(("caption", "text"), ("meta", "json"), ("key", "key")),
                 []):
        with pytest.raises(ProtocolError, match="the batch's fields .* differ from the pipeline's"):
            build_fields(cols, 1, decl, where="batch 3")
    # A batch of no samples may carry no columns: empty ones of the declared fields.
    empty = build_fields([], 0, declared(("caption", "text"), ("key", "key")))
    assert list(empty) == ["caption", "key"] and all(len(c) == 0 for c in empty.values())
    assert empty["key"].type == "key"
    with pytest.raises(ProtocolError, match="differ"):
        build_fields([], 2, declared(("caption", "text")))


# --- hostile messages: a valid column or ProtocolError, nothing else ------------

def _read_all(col):
    for i in range(len(col)):
        try:
            col[i]
        except ProtocolError:
            pass
        col.raw(i)
    try:
        col[:]
    except ProtocolError:
        pass


def _outcome(m, n):
    try:
        col = FieldColumn(m, n, where="batch 1")
    except ProtocolError as e:
        assert "field " in str(e)
        return "refused"
    assert len(col) == n and len(col.offsets) == n + 1 and int(col.offsets[-1]) == len(col.data)
    _read_all(col)
    return "valid"


def _random_bytes(rng, n):
    return bytes(rng.getrandbits(8) for _ in range(n))


def test_fuzz_random_columns():
    rng = random.Random(20240917)
    seen = {"refused": 0, "valid": 0}
    pool = [b"{}", b"[1, 2]", b'"s"', b"\xff\xfe", b"caf\xc3\xa9", b'{"a":', b"null", b""]
    for _ in range(3000):
        n = rng.choice([0, 1, 2, 3, 5, 8, rng.randrange(0, 40)])
        if rng.random() < 0.25:  # random bytes everywhere
            offsets = _random_bytes(rng, rng.choice([4 * (n + 1), rng.randrange(0, 48)]))
            data = _random_bytes(rng, rng.randrange(0, 64))
            present = _random_bytes(rng, rng.choice([n, rng.randrange(0, 12)]))
        else:  # a plausible column, then a lie or two
            values = [rng.choice(pool + [None]) for _ in range(n)]
            m = message("x", "bytes", values)
            offsets, data, present = m.offsets, m.data, m.present
            lie = rng.randrange(8)
            if lie == 0 and n:  # an offset anywhere
                k = rng.randrange(n + 1)
                offsets = offsets[:4 * k] + struct.pack("<I", rng.getrandbits(32)) + offsets[4 * k + 4:]
            elif lie == 1:  # truncated or padded offsets
                offsets = offsets[:rng.randrange(len(offsets) + 1)] + _random_bytes(rng, rng.randrange(3))
            elif lie == 2:  # data longer or shorter than the offsets say
                data = data[:rng.randrange(len(data) + 1)] + _random_bytes(rng, rng.randrange(3))
            elif lie == 3 and n:  # a present flag that is not 0/1, or absent with bytes
                k = rng.randrange(n)
                present = present[:k] + bytes([rng.choice([0, 2, 255])]) + present[k + 1:]
            elif lie == 4:  # present of another length
                present = present[:rng.randrange(len(present) + 1)] + b"\x01" * rng.randrange(2)
            # else: the column as made (valid, or not UTF-8 / JSON in places)
        kind = rng.choice([pb.FIELD_TEXT, pb.FIELD_BYTES, pb.FIELD_JSON, pb.FIELD_KEY, 0, 5, -1])
        m = pb.FieldColumn(name=rng.choice(["caption", "meta", "k"]), type=kind,
                           offsets=offsets, data=data, present=present)
        seen[_outcome(m, n)] += 1
    assert seen["refused"] > 100 and seen["valid"] > 100, seen


def _mutate(rng, b):
    b = bytearray(b)
    op = rng.randrange(3)
    if op == 0 and b:
        b[rng.randrange(len(b))] = rng.getrandbits(8)
    elif op == 1 and b:
        del b[rng.randrange(len(b))]
    else:
        b.insert(rng.randrange(len(b) + 1), rng.getrandbits(8))
    return bytes(b)


def test_fuzz_mutated_valid_columns():
    """A valid column with a byte of offsets, data or present flipped,
    dropped or added, or its wire form cut short, against batches of the
    right size and of one sample more or less."""
    rng = random.Random(7)
    base = message("meta", "json", [b'{"a": 1}', None, b"[true, null]", b'"\\u00e9"', b"3.5"])
    wire = base.SerializeToString()
    seen = {"refused": 0, "valid": 0, "unparsable": 0}
    for _ in range(3000):
        m = pb.FieldColumn()
        m.CopyFrom(base)
        if rng.random() < 0.2:
            try:
                m = pb.FieldColumn.FromString(wire[:rng.randrange(len(wire))])
            except Exception:  # noqa: BLE001 - the gRPC layer refuses those before us
                seen["unparsable"] += 1
                continue
        else:
            for _ in range(rng.randrange(1, 4)):
                part = rng.choice(["offsets", "data", "present"])
                setattr(m, part, _mutate(rng, getattr(m, part)))
            m.type = rng.choice([pb.FIELD_JSON, pb.FIELD_JSON, pb.FIELD_TEXT, pb.FIELD_KEY])
        seen[_outcome(m, rng.choice([5, 5, 5, 4, 6]))] += 1
    assert seen["refused"] > 100 and seen["valid"] > 10, seen


def test_hostile_batch_through_stream_wrap_is_a_protocol_error():
    rng = random.Random(3)
    stream = fake_stream(declared(("caption", "text")))
    for _ in range(500):
        m = batch_message(2, [message("caption", "text", [b"a", b"b"])])
        c = m.fields[0]
        c.offsets = bytes(rng.getrandbits(8) for _ in range(rng.choice([12, 8, 16])))
        c.present = bytes(rng.choice([0, 1]) for _ in range(rng.choice([2, 2, 1, 3])))
        try:
            batch = stream._wrap(m)
        except ProtocolError:
            continue
        _read_all(batch.fields["caption"])


# --- batches -------------------------------------------------------------------

def fake_stream(declared_fields=None):
    """A Stream with only what _wrap reads, on the inline transport."""
    stream = Stream.__new__(Stream)
    stream._transport = InlineTransport()
    stream.lifetime = "safe"
    stream._lock = threading.Lock()
    stream._held, stream._current, stream._done = {}, None, True
    if declared_fields is not None:
        stream.pipeline = pb.PipelineInfo(name="p", fields=declared_fields)
    return stream


def batch_message(n, fields, sequence=4):
    return pb.Batch(sequence=sequence, num_samples=n, shape=[n, 2], dtype=pb.UINT8,
                    images=bytes(range(2 * n)), images_bytes=2 * n, labels=list(range(n)),
                    sample_indices=list(range(10, 10 + n)), fields=fields)


def test_stream_builds_batch_fields_in_the_pipelines_order():
    decl = declared(("caption", "text"), ("meta", "json"), ("key", "key"))
    stream = fake_stream(decl)
    m = batch_message(2, [message("caption", "text", [b"a cat", None]),
                          message("meta", "json", [b'{"h": 2}', b"[]"]),
                          message("key", "key", [b"000001", b"00000\xff"])])
    batch = stream._wrap(m)
    assert list(batch.fields) == ["caption", "meta", "key"]
    assert batch.fields["caption"][0] == "a cat" and batch.fields["caption"][1] is None
    assert batch.fields["meta"][0]["h"] == 2
    assert "fields=['caption', 'meta', 'key']" in repr(batch)
    copy = batch.copy()
    assert copy.fields == batch.fields and copy.fields is not batch.fields
    batch.release()  # fields come with the header: still readable
    assert batch.fields["key"][1].encode("utf-8", "surrogateescape") == b"00000\xff"
    device = DeviceBatch(copy, images="a tensor")
    assert device.fields["caption"][0] == "a cat"


def test_batches_without_fields_get_an_empty_dict():
    assert fake_stream()._wrap(batch_message(2, [])).fields == {}
    assert fake_stream(declared())._wrap(batch_message(2, [])).fields == {}
    assert Batch(None, np.zeros((1, 2), np.uint8), np.zeros(1, np.int64),
                 np.zeros(1, np.int64)).fields == {}
    host = types.SimpleNamespace(labels=None, indices=None, sequence=0, epoch=0,
                                 batch_in_epoch=0, position=0, offset=0, epoch_samples=0,
                                 end_of_epoch=False, num_samples=0, slot=0, failures=[])
    assert DeviceBatch(host, None).fields == {}
    assert "fields" not in repr(fake_stream()._wrap(batch_message(1, [])))


def test_stream_refuses_fields_that_do_not_fit():
    decl = declared(("caption", "text"))
    with pytest.raises(ProtocolError, match="batch 4: field 'caption': 12 bytes of offsets"):
        fake_stream(decl)._wrap(batch_message(3, [message("caption", "text", [b"a", b"b"])]))
    with pytest.raises(ProtocolError, match="differ from the pipeline's"):
        fake_stream(decl)._wrap(batch_message(1, [message("other", "text", [b"a"])]))
    with pytest.raises(ProtocolError, match="differ from the pipeline's"):
        fake_stream(decl)._wrap(batch_message(1, []))
    with pytest.raises(ProtocolError, match="differ from the pipeline's"):
        fake_stream(declared())._wrap(batch_message(1, [message("caption", "text", [b"a"])]))
    m = batch_message(2, [message("caption", "text", [b"a", b"b"])])
    m.num_samples = 3
    with pytest.raises(ProtocolError, match="num_samples 3 but 2 labels"):
        fake_stream(decl)._wrap(m)
    # A batch whose every sample failed may carry no columns.
    empty = fake_stream(decl)._wrap(batch_message(0, []))
    assert list(empty.fields) == ["caption"] and len(empty.fields["caption"]) == 0


# --- adapters ------------------------------------------------------------------

def fielded_batch():
    fields = build_fields([message("caption", "text", [b"a", None]),
                           message("meta", "json", [b'{"b": [1]}', b"2"]),
                           message("raw", "bytes", [b"\x00\x01", b""])], 2)
    return Batch(None, np.arange(8, dtype=np.uint8).reshape(2, 4), np.array([3, 4], np.int64),
                 np.array([7, 8], np.int64), fields=fields)


def test_select_fields():
    b = fielded_batch()
    assert select_fields(b, False) == {}
    assert select_fields(b, True) == {"caption": ["a", None], "meta": [{"b": [1]}, 2],
                                      "raw": [b"\x00\x01", b""]}
    assert select_fields(b, "meta") == {"meta": [{"b": [1]}, 2]}
    assert list(select_fields(b, ["raw", "caption"])) == ["raw", "caption"]
    with pytest.raises(InvalidRequest, match=r"no field 'nope' in this pipeline \(its fields: "
                                             r"caption, meta, raw\)"):
        select_fields(b, ["caption", "nope"])
    with pytest.raises(InvalidRequest, match="fields= takes"):
        field_names([1], ["a"])
    assert isinstance(InvalidRequest("x"), ConveyorError)


def test_torch_batch_tensors_fields_are_opt_in():
    pytest.importorskip("torch")
    from conveyor.torch import batch_tensors

    b = fielded_batch()
    assert len(batch_tensors(b)) == 2 and len(batch_tensors(b, yield_indices=True)) == 3
    images, labels, fields = batch_tensors(b, fields=["caption", "meta"])
    assert labels.tolist() == [3, 4] and images.shape == (2, 4)
    assert fields == {"caption": ["a", None], "meta": [{"b": [1]}, 2]}
    images, labels, indices, fields = batch_tensors(b, yield_indices=True, fields=True)
    assert indices.tolist() == [7, 8] and list(fields) == ["caption", "meta", "raw"]
    with pytest.raises(InvalidRequest, match="no field 'x'"):
        batch_tensors(b, fields="x")


def test_jax_to_jax_fields_are_opt_in(monkeypatch):
    from conveyor import jax as cjax

    fake = types.SimpleNamespace(
        dlpack=types.SimpleNamespace(from_dlpack=lambda x: ("arr", x)),
        dtypes=types.SimpleNamespace(canonicalize_dtype=lambda dt: np.dtype(np.int32)),
        device_put=lambda a: a)
    monkeypatch.setattr(cjax, "_jax", lambda: fake)
    b = fielded_batch()
    b._returns = "lease"  # its images stay valid: no copy
    assert len(cjax.to_jax(b)) == 2
    images, labels, fields = cjax.to_jax(b, fields=["caption"])
    assert images[0] == "arr" and labels.tolist() == [3, 4]
    assert fields == {"caption": ["a", None]}
    out = list(cjax.iterate([b, b], fields=True))
    assert [len(o) for o in out] == [3, 3] and out[1][2]["meta"] == [{"b": [1]}, 2]


def test_tensorflow_element_spec_and_dataset_with_fields():
    tf = pytest.importorskip("tensorflow")
    from conveyor import tensorflow as ctf

    info = pb.PipelineInfo(name="p", sample_shape=[4], dtype=pb.UINT8,
                           fields=declared(("caption", "text"), ("meta", "json"), ("raw", "bytes")))
    images, labels = ctf.element_spec(info)
    _, _, specs = ctf.element_spec(info, fields=True)
    assert list(specs) == ["caption", "meta", "raw"]
    assert all(s.dtype == tf.string and s.shape.as_list() == [None] for s in specs.values())
    assert list(ctf.element_spec(info, fields="meta")[2]) == ["meta"]
    with pytest.raises(InvalidRequest, match="no field 'x'"):
        ctf.element_spec(info, fields=["x"])

    b = fielded_batch()
    t_images, t_labels, t_fields = ctf.to_tensors(b, fields=["caption", "raw"])
    assert t_fields["caption"].numpy().tolist() == [b"a", b""]
    assert t_fields["raw"].numpy().tolist() == [b"\x00\x01", b""]

    class FakeStream:
        def __init__(self):
            self.batches = iter([fielded_batch(), fielded_batch()])

        def __iter__(self):
            return self.batches

        def close(self):
            pass

    loader = types.SimpleNamespace(pipeline_info=lambda: info,
                                   stream=lambda num_epochs: FakeStream())
    ds = ctf.dataset(loader, copy=True, prefetch=0, fields=["meta", "caption"])
    assert sorted(ds.element_spec[2]) == ["caption", "meta"]
    got = list(ds)
    assert len(got) == 2
    assert got[0][2]["meta"].numpy().tolist() == [b'{"b": [1]}', b"2"]
    assert got[0][2]["caption"].numpy().tolist() == [b"a", b""]
    assert got[0][1].numpy().tolist() == [3, 4]


# --- conveyor fetch --------------------------------------------------------------

def test_fetch_writes_each_field_as_three_arrays():
    b = fielded_batch()
    (suffix, data), = cli._batch_files(b, "npz")
    assert suffix == ".npz"
    with np.load(io.BytesIO(data), allow_pickle=False) as z:
        assert sorted(z.files) == sorted(["images", "labels", "indices"] + [
            "%s_%s" % (n, k) for n in ("caption", "meta", "raw")
            for k in ("offsets", "data", "present")])
        off, dat, pres = z["meta_offsets"], z["meta_data"], z["meta_present"]
        assert off.dtype == np.uint32 and dat.dtype == np.uint8 and pres.dtype == np.bool_
        assert json.loads(dat[off[0]:off[1]].tobytes()) == {"b": [1]}
        assert z["caption_present"].tolist() == [True, False]
    names = [s for s, _ in cli._batch_files(b, "npy")]
    assert "_caption_offsets.npy" in names and "_raw_present.npy" in names


def test_fetch_field_names_never_reach_a_path():
    fields = build_fields([message("../x/y", "text", [b"a"])], 1)
    b = Batch(None, np.zeros((1, 1), np.uint8), np.zeros(1, np.int64), np.zeros(1, np.int64),
              fields=fields)
    names = [s for s, _ in cli._batch_files(b, "npy")]
    assert "_..%2Fx%2Fy_data.npy" in names and not any("/" in n for n in names)


def test_help_of_fetch_names_the_field_arrays(capsys):
    with pytest.raises(SystemExit):
        cli.main(["fetch", "--help"])
    assert "NAME_offsets" in " ".join(capsys.readouterr().out.split())


def test_module_names():
    assert set(_fields.TYPE_NAMES.values()) == set(TYPES)
