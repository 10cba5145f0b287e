"""Per-stream choices in the Python client, without a daemon
(conveyor/_choices.py and where they go): size=, dtype= and fields= are
checked locally (InvalidRequest for malformed values), set on the
OpenStream request of open_stream, of a Loader's epochs (set_size applies
to the streams opened after it; a retried stream keeps its own) and of
every range of a pooled Loader; stream_info() describes the stream's
samples; a daemon that ignores a choice is FailedPrecondition. The
requests are caught where open_stream hands them to Stream (a fake)."""

import threading
import types

import numpy as np
import pytest

import conveyor
from conveyor import _pool, loader as loader_mod
from conveyor import tensorflow as conveyor_tf
from conveyor._choices import StreamChoices, check_dtype, check_fields, check_size
from conveyor._pool import PoolOptions, PoolStream
from conveyor._pool_servers import ServerSet
from conveyor._stubs import pb
from conveyor.errors import FailedPrecondition, InvalidRequest, NotFound
from conveyor.retry import RetryPolicy


def info(shape=(3, 64, 64), layout=pb.NCHW, kind="image", dtype=pb.UINT8,
         fields=("caption", "meta", "key")):
    p = pb.PipelineInfo(name="p", dataset_size=48, sample_shape=list(shape), dtype=dtype,
                        layout=layout, kind=kind, max_batch_size=64)
    p.fingerprint["transform"] = "v1;out=64x64"
    for name in fields:
        p.fields.add(name=name, type=pb.FIELD_TEXT)
    return p


# --- local checks -------------------------------------------------------------
@pytest.mark.parametrize("size,want", [
    (None, None), (32, (32, 32)), ((48, 64), (48, 64)), ([48, 64], (48, 64)),
    (np.int64(96), (96, 96)), ((np.int32(7), 9), (7, 9))])
def test_sizes_are_an_int_or_a_pair(size, want):
    assert check_size(size) == want


@pytest.mark.parametrize("size", [0, -1, 1.5, True, "64", (64,), (1, 2, 3), (0, 4), (4, -1),
                                  (64.0, 64), 2 ** 32, {"h": 1}])
def test_malformed_sizes_are_refused_naming_the_value(size):
    with pytest.raises(InvalidRequest, match="size must be None, a positive int or "
                                             r"\(height, width\)"):
        check_size(size)


@pytest.mark.parametrize("dtype,want", [
    (None, None), ("uint8", "uint8"), ("float32", "float32"), ("FLOAT16", "float16"),
    (np.float32, "float32"), (np.dtype("uint8"), "uint8")])
def test_dtypes_by_name_or_numpy(dtype, want):
    assert check_dtype(dtype) == want


@pytest.mark.parametrize("dtype", ["bfloat16", "int8", "float64", "", 3, np.int16, object()])
def test_unknown_dtypes_are_refused_listing_the_known(dtype):
    with pytest.raises(InvalidRequest, match="one of uint8, float32, float16"):
        check_dtype(dtype)


def test_fields_are_a_list_of_names():
    assert check_fields(None) is None
    assert check_fields([]) == ()
    assert check_fields(("meta", "caption")) == ("meta", "caption")
    with pytest.raises(InvalidRequest, match=r"not a single str: write fields=\['caption'\]"):
        check_fields("caption")
    with pytest.raises(InvalidRequest, match="not a single bytes"):
        check_fields(b"caption")
    with pytest.raises(InvalidRequest, match="list of field names"):
        check_fields({"caption"})
    with pytest.raises(InvalidRequest, match="non-empty str"):
        check_fields(["caption", ""])
    with pytest.raises(InvalidRequest, match="non-empty str"):
        check_fields([1])
    with pytest.raises(InvalidRequest, match="'key' given twice"):
        check_fields(["key", "meta", "key"])


# --- the request ----------------------------------------------------------------
def test_no_choice_leaves_the_request_as_before():
    req = StreamChoices().apply(pb.OpenStream(pipeline="p"))
    assert (req.height, req.width, req.dtype) == (0, 0, pb.DTYPE_UNSPECIFIED)
    assert not req.HasField("fields")
    assert req.SerializeToString() == pb.OpenStream(pipeline="p").SerializeToString()


def test_choices_are_set_on_the_request_and_no_fields_is_an_empty_selection():
    req = StreamChoices.of((48, 32), "float16", ["meta"]).apply(pb.OpenStream(pipeline="p"))
    assert (req.height, req.width, req.dtype) == (48, 32, pb.FLOAT16)
    assert req.HasField("fields") and list(req.fields.names) == ["meta"]
    none = StreamChoices.of(fields=[]).apply(pb.OpenStream(pipeline="p"))
    assert none.HasField("fields") and list(none.fields.names) == []
    # Set, it survives the wire (an unset selection is "every field").
    back = pb.OpenStream.FromString(none.SerializeToString())
    assert back.HasField("fields")


class FakeStream:
    """What open_stream hands the request to: records it and answers a
    StreamOpened.pipeline with the choices applied (or `answer`)."""
    opened = []
    answer = None

    def __init__(self, address, request, **kw):
        self.request = request
        self.kw = kw
        self.closed = False
        base = info()
        if FakeStream.answer is not None:
            self.pipeline = FakeStream.answer
        else:
            self.pipeline = StreamChoices(
                (request.height, request.width) if request.height else None,
                {pb.UINT8: "uint8", pb.FLOAT32: "float32", pb.FLOAT16: "float16"}.get(
                    request.dtype),
                tuple(request.fields.names) if request.HasField("fields") else None,
            ).stream_info(base)
        self.stream_id = 7
        FakeStream.opened.append(self)

    def __iter__(self):
        return self

    def __next__(self):
        raise StopIteration

    def close(self):
        self.closed = True


@pytest.fixture
def fake_stream(monkeypatch):
    FakeStream.opened = []
    FakeStream.answer = None
    monkeypatch.setattr(loader_mod, "Stream", FakeStream)
    return FakeStream


def test_open_stream_sets_the_choices(fake_stream):
    s = conveyor.open_stream("unix:///nonexistent.sock", "p", 8, size=32, dtype="float32",
                             fields=["caption", "key"])
    req = s.request
    assert (req.pipeline, req.batch_size, req.height, req.width, req.dtype) == (
        "p", 8, 32, 32, pb.FLOAT32)
    assert list(req.fields.names) == ["caption", "key"]
    assert list(s.pipeline.sample_shape) == [3, 32, 32]
    plain = conveyor.open_stream("unix:///nonexistent.sock", "p", 8).request
    assert (plain.height, plain.width, plain.dtype) == (0, 0, 0) and not plain.HasField("fields")


@pytest.mark.parametrize("kw,match", [
    (dict(size=-3), "size must be"), (dict(dtype="int8"), "dtype must be"),
    (dict(fields="caption"), "fields must be")])
def test_open_stream_refuses_malformed_choices_before_any_call(fake_stream, kw, match):
    with pytest.raises(InvalidRequest, match=match):
        conveyor.open_stream("unix:///nonexistent.sock", "p", 8, **kw)
    assert fake_stream.opened == []


def test_a_daemon_that_ignores_the_choices_is_failed_precondition(fake_stream):
    fake_stream.answer = info()  # what a daemon older than the choices answers
    with pytest.raises(FailedPrecondition, match=r"without the choice of size 32x32 \(its samples "
                                                 r"are 64x64\); dtype float32 \(its samples are "
                                                 r"uint8\); fields \[key\] \(its fields: "
                                                 r"\[caption, meta, key\]\)"):
        conveyor.open_stream("unix:///nonexistent.sock", "p", 8, size=32, dtype="float32",
                             fields=["key"])
    assert fake_stream.opened[-1].closed
    # Without choices nothing is checked.
    assert not conveyor.open_stream("unix:///nonexistent.sock", "p", 8).closed


# --- what the stream's samples are ----------------------------------------------
def test_stream_info_applies_the_choices_by_layout_and_kind():
    c = StreamChoices.of((48, 32), "float16", ["key", "caption"])
    nchw = c.stream_info(info())
    assert list(nchw.sample_shape) == [3, 48, 32] and nchw.dtype == pb.FLOAT16
    assert [f.name for f in nchw.fields] == ["caption", "key"]  # the pipeline's order
    assert nchw.dataset_size == 48 and nchw.fingerprint["transform"] == "v1;out=64x64"
    nhwc = c.stream_info(info(shape=(64, 64, 3), layout=pb.NHWC))
    assert list(nhwc.sample_shape) == [48, 32, 3]
    video = c.stream_info(info(shape=(8, 64, 64, 3), layout=pb.NHWC, kind="video"))
    assert list(video.sample_shape) == [8, 48, 32, 3]
    audio = c.stream_info(info(shape=(2, 16000), layout=pb.NCHW, kind="audio"))
    assert list(audio.sample_shape) == [2, 16000]  # no size: the daemon refuses one
    assert list(StreamChoices.of(fields=[]).stream_info(info()).fields) == []
    same = StreamChoices().stream_info(info())
    assert same == info()
    assert c.unhonoured(nchw) is None and c.unhonoured(nhwc) is None


# --- Loader ---------------------------------------------------------------------------
def make_loader(**kw):
    return conveyor.Loader("unix:///nonexistent.sock", pipeline="p", batch_size=4, seed=3,
                           **kw)


def test_loader_choices_go_on_every_stream_and_set_size_applies_to_later_ones(fake_stream):
    ld = make_loader(size=(32, 48), dtype="float32", fields=["caption"])
    assert (ld.size, ld.dtype, ld.fields) == ((32, 48), "float32", ("caption",))
    first = ld.epoch(0)
    ld.set_size(64)
    second = ld.stream(num_epochs=1)
    ld.set_size(None)
    third = iter(ld)
    reqs = [s.request for s in (first, second, third)]
    assert [(r.height, r.width) for r in reqs] == [(32, 48), (64, 64), (0, 0)]
    assert all(r.dtype == pb.FLOAT32 and list(r.fields.names) == ["caption"] for r in reqs)
    assert all(r.seed == 3 and r.pipeline == "p" for r in reqs)
    assert ld.size is None
    # A malformed size is refused and the loader keeps its size.
    ld.set_size(48)
    with pytest.raises(InvalidRequest, match="size must be"):
        ld.set_size((48, 0))
    assert ld.size == (48, 48)
    with pytest.raises(AttributeError):
        ld.size = 32  # set_size() is the way
    ld.close()


def test_loader_refuses_malformed_choices():
    for kw in (dict(size=0), dict(dtype="double"), dict(fields="meta")):
        with pytest.raises(InvalidRequest):
            make_loader(**kw)


def test_state_dict_does_not_depend_on_the_size(fake_stream):
    a, b = make_loader(), make_loader(size=32)
    assert a.state_dict() == b.state_dict()
    assert set(a.state_dict()) == {"pipeline", "epoch", "offset", "world_size", "seed"}
    b.load_state_dict(a.state_dict())
    assert b.size == (32, 32)


def test_a_retried_stream_keeps_the_choices_it_was_opened_with(fake_stream):
    ld = make_loader(size=32, retry=RetryPolicy(max_wait_s=1.0))
    rs = ld.epoch(0)
    ld.set_size(64)
    again = rs._open()  # what a reconnect opens
    assert (again.request.height, again.request.width) == (32, 32)
    assert (ld.epoch(1).request.height) == 64
    ld.close()


def test_stream_info_is_the_pipeline_info_with_the_choices(monkeypatch):
    ld = make_loader(size=48, dtype="float16", fields=[])
    monkeypatch.setattr(conveyor.Loader, "pipeline_info", lambda self: info())
    got = ld.stream_info()
    assert list(got.sample_shape) == [3, 48, 48] and got.dtype == pb.FLOAT16
    assert list(got.fields) == []
    ld.set_size(None)
    assert list(ld.stream_info().sample_shape) == [3, 64, 64]


def test_a_pickled_loader_keeps_its_choices():
    import pickle
    ld = make_loader(size=(32, 48), fields=["key"])
    back = pickle.loads(pickle.dumps(ld))
    assert (back.size, back.dtype, back.fields) == ((32, 48), None, ("key",))


# --- the pool ---------------------------------------------------------------------
class FakeBatch:
    def __init__(self, epoch):
        self.epoch = epoch
        self.batch_in_epoch = self.position = self.epoch_samples = 0

    def release(self):
        pass


class FakeRangeStream:
    def __init__(self, count, epoch):
        self._left = count
        self._epoch = epoch

    def __next__(self):
        if self._left == 0:
            raise StopIteration
        self._left -= 1
        return FakeBatch(self._epoch)

    def close(self):
        pass


def pool_stream(monkeypatch, open_stream, choices, entries=("unix:///a.sock", "unix:///b.sock"),
                range_batches=2):
    monkeypatch.setattr(PoolStream, "_reference", lambda self, endpoints: info())
    monkeypatch.setattr(PoolStream, "_connect",
                        lambda self, w: setattr(w, "channel", types.SimpleNamespace(
                            close=lambda: None)))
    return PoolStream(ServerSet(list(entries)),
                      PoolOptions(policy="balanced", range_batches=range_batches,
                                  unavailable_timeout=20.0).check(),
                      pipeline="p", batch_size=4, seed=0, rank=0, world_size=1, shuffle=True,
                      drop_last=False, transport="auto", security=None, first_epoch=0,
                      num_epochs=1, resume=None, on_batch=None, open_stream=open_stream,
                      choices=choices)


def test_every_range_on_every_daemon_asks_for_the_same_choices(monkeypatch):
    calls = []
    lock = threading.Lock()

    def open_stream(channel, pipeline, batch_size, **kw):
        with lock:
            calls.append(kw)
        return FakeRangeStream(kw["max_batches"], kw["first_epoch"])

    choices = StreamChoices.of((32, 48), "float32", ["meta"])
    ps = pool_stream(monkeypatch, open_stream, choices)
    assert list(ps.pipeline.sample_shape) == [3, 32, 48] and ps.pipeline.dtype == pb.FLOAT32
    assert list(ps.reference.sample_shape) == [3, 64, 64]
    got = list(ps)
    assert len(got) == ps.total_batches == 12  # 48 samples, batches of 4
    assert len(calls) == 6
    assert all((c["size"], c["dtype"], c["fields"]) == ((32, 48), "float32", ("meta",))
               for c in calls)


def test_the_range_size_follows_the_streams_samples(monkeypatch):
    def open_stream(channel, pipeline, batch_size, **kw):
        return FakeRangeStream(kw["max_batches"], kw["first_epoch"])

    # 3x64x64 uint8 is 12 KiB a sample; float32 is four times that.
    budget = dict(batch_size=4, ranges_ahead=4)
    small = _pool.auto_range_batches(info(), buffer_bytes=4 * 4 * 12288 * 8, **budget)
    big = _pool.auto_range_batches(StreamChoices.of(dtype="float32").stream_info(info()),
                                   buffer_bytes=4 * 4 * 12288 * 8, **budget)
    assert (small, big) == (8, 2)
    monkeypatch.setattr(PoolStream, "_reference", lambda self, endpoints: info())
    ps = PoolStream(ServerSet(["unix:///a.sock"]),
                    PoolOptions(buffer_bytes=4 * 4 * 12288 * 8).check(), pipeline="p",
                    batch_size=4, seed=0, rank=0, world_size=1, shuffle=True, drop_last=False,
                    transport="auto", security=None, first_epoch=0, num_epochs=1, resume=None,
                    on_batch=None, open_stream=open_stream,
                    choices=StreamChoices.of(dtype="float32"))
    try:
        assert ps.range_batches == 2
    finally:
        ps.close()


@pytest.mark.parametrize("error", [InvalidRequest, FailedPrecondition, NotFound])
def test_a_choice_every_daemon_refuses_fails_at_once_naming_each(monkeypatch, error):
    def open_stream(channel, pipeline, batch_size, **kw):
        raise error("opening a stream of pipeline 'p' failed: INVALID_ARGUMENT: output size "
                    "96x96 is not allowed by pipeline p (allowed_sizes: 64x64, 32x32)")

    # The workers warn (once per daemon) from their threads, maybe before
    # next(), maybe after it raised: caught until they are done.
    with pytest.warns(RuntimeWarning, match="refused"):
        ps = pool_stream(monkeypatch, open_stream, StreamChoices.of(size=96))
        with pytest.raises(error, match="every daemon of the pool refused the stream: "
                                        "unix:///a.sock: .*allowed_sizes: 64x64, 32x32.*; "
                                        "unix:///b.sock: "):
            next(ps)
        ps.close()
        for w in ps._workers.values():
            for t in w.threads:
                t.join(10)


def test_the_loader_hands_its_choices_to_the_pool(monkeypatch):
    seen = {}

    def fake_pool(servers, options, **kw):
        seen.update(kw)
        return "pool"

    monkeypatch.setattr(loader_mod, "PoolStream", fake_pool)
    ld = conveyor.Loader(servers=["unix:///a.sock", "unix:///b.sock"], pipeline="p",
                         batch_size=4, size=32, fields=[])
    assert ld.epoch(0) == "pool"
    assert seen["choices"] == StreamChoices((32, 32), None, ())
    ld.set_size(None)
    ld.epoch(1)
    assert seen["choices"] == StreamChoices(None, None, ())


# --- conveyor.tensorflow ----------------------------------------------------------
def test_the_tf_dataset_spec_is_built_from_the_streams_info(monkeypatch):
    """dataset() builds its element spec from loader.stream_info() (the
    loader's size, dtype and fields), not the pipeline's; a pass whose
    stream has other samples (set_size after dataset()) is a ValueError."""
    built = {}

    class Stop(Exception):
        pass

    def element_spec(pipeline_info, fields=False):
        built["info"] = pipeline_info
        raise Stop

    monkeypatch.setattr(conveyor_tf, "_tf", lambda: types.SimpleNamespace())
    monkeypatch.setattr(conveyor_tf, "element_spec", element_spec)
    monkeypatch.setattr(conveyor.Loader, "pipeline_info", lambda self: info())
    ld = make_loader(size=32, dtype="float32", fields=["key"])
    with pytest.raises(Stop):
        conveyor_tf.dataset(ld)
    got = built["info"]
    assert list(got.sample_shape) == [3, 32, 32] and got.dtype == pb.FLOAT32
    assert [f.name for f in got.fields] == ["key"]

    made_for = ((3, 32, 32), pb.FLOAT32)
    conveyor_tf._check_stream(types.SimpleNamespace(pipeline=got), made_for)
    conveyor_tf._check_stream(types.SimpleNamespace(), made_for)  # no pipeline: not checked
    ld.set_size(None)
    with pytest.raises(ValueError, match=r"samples of shape \[3, 64, 64\], float32 but the "
                                         r"dataset was made for \[3, 32, 32\], float32.*"
                                         "set_size"):
        conveyor_tf._check_stream(types.SimpleNamespace(pipeline=ld.stream_info()), made_for)
