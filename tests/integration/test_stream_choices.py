"""Per-stream choices (OpenStream height/width, dtype, fields) through the
Python client against a real conveyord: within the pipeline's bounds
(`allowed_sizes`, `allowed_dtypes`; its own size and dtype always) a stream
chooses its output size, its element type and a subset of the pipeline's
sample fields, and StreamOpened.pipeline and every batch follow the choice.

- Another size: batches of that shape (square and not), every sample once,
  on shared memory, the data socket and inline.
- float32 from a uint8 pipeline: the same samples normalised,
  (x / 255 - mean) / std, within rounding of the uint8 stream's.
- A subset of the fields (tar shards with a caption, JSON metadata and the
  key; written as tests/integration/test_sample_fields.py writes them), and
  no fields at all (fields=[]): the same values, images and labels as the
  stream with every field.
- A size, dtype or field outside the bounds is InvalidRequest naming the
  allowed values.
- Progressive resizing: a Loader at a small size in epoch 0 and the
  pipeline's size in epoch 1 delivers the same samples in the same order as
  a Loader at full size (the order does not depend on the size), and ends
  at the same resume position; a pooled Loader asks every daemon for the
  same choice.
"""

import json

import numpy as np
import pytest

import conveyor
from conveyor._stubs import pb
from conveyor_integration import (CAPTION_FIELDS, IMAGE_SIZE, Daemon, daemon_config, finish_daemons,
                                  pipeline_entry, write_field_shards)

SEED = 5
PER_SHARD = 10
BATCH = 8
MEAN = np.array([0.485, 0.456, 0.406], np.float32)  # the pipeline defaults (TransformSpec)
STD = np.array([0.229, 0.224, 0.225], np.float32)


def _caption(i):
    return "photo %d: a caf\u00e9 %s" % (i, "x" * (i % 5))


FIELDS = CAPTION_FIELDS


@pytest.fixture(scope="module")
def served(dataset, tmp_path_factory):
    root, samples = dataset
    out = tmp_path_factory.mktemp("choice-shards")
    paths = write_field_shards(root, samples, out, _caption, lambda i, label: {"i": i},
                               per_shard=PER_SHARD)
    bounds = dict(allowed_sizes=[32, [48, 40]], allowed_dtypes=["float32"])
    pipelines = {
        # Deterministic (eval): two streams of the same samples compare.
        "eval": pipeline_entry(root, augment="eval", **bounds),
        # Random crops and flips: the order, not the pixels, is compared.
        "train": pipeline_entry(root, **bounds),
        "plain": pipeline_entry(root, augment="eval"),
        "clip": pipeline_entry(root, augment="eval",
                               dataset={"shards": [str(p) for p in paths]}, fields=FIELDS),
    }
    cfg = daemon_config(root, pipelines=pipelines, allowed_roots=[str(root.parent), str(out)])
    # YAML is a superset of JSON: lists of maps (and of lists) written as JSON.
    d = Daemon(tmp_path_factory.mktemp("choices-daemon"), json.dumps(cfg))
    try:
        d.start()
        yield d, samples
    finally:
        finish_daemons([d])


def _epoch(address, pipeline, epoch=0, **kw):
    """One epoch of a stream as plain values: (stream.pipeline, [batch dicts])."""
    out = []
    with conveyor.open_stream(address, pipeline, BATCH, seed=SEED, first_epoch=epoch,
                              **kw) as stream:
        info = stream.pipeline
        for b in stream:
            out.append({"indices": b.indices.tolist(), "labels": b.labels.tolist(),
                        "images": np.array(b.images),
                        "fields": {n: list(c) for n, c in b.fields.items()}})
    return info, out


def _indices(batches):
    return [i for b in batches for i in b["indices"]]


def _images(batches):
    return np.concatenate([b["images"] for b in batches])


@pytest.mark.parametrize("transport", ["shared_memory", "data_socket", "inline"])
def test_a_stream_at_another_size_gets_batches_of_that_size(served, transport):
    d, samples = served
    address = d.unix if transport == "shared_memory" else d.tcp
    for size, (h, w) in ((32, (32, 32)), ((48, 40), (48, 40))):
        info, batches = _epoch(address, "eval", size=size, transport=transport)
        assert list(info.sample_shape) == [3, h, w]
        assert info.dtype == pb.UINT8
        assert all(b["images"].shape == (len(b["indices"]), 3, h, w) for b in batches)
        assert all(b["images"].dtype == np.uint8 for b in batches)
        assert sorted(_indices(batches)) == list(range(len(samples)))
    # Asking for the pipeline's own size is always allowed.
    info, batches = _epoch(address, "plain", size=IMAGE_SIZE, transport=transport)
    assert list(info.sample_shape) == [3, IMAGE_SIZE, IMAGE_SIZE]
    assert _images(batches).shape[1:] == (3, IMAGE_SIZE, IMAGE_SIZE)


def test_a_float32_stream_gets_the_same_samples_normalised(served):
    d, _ = served
    _, u8 = _epoch(d.unix, "eval")
    info, f32 = _epoch(d.unix, "eval", dtype="float32")
    assert info.dtype == pb.FLOAT32
    assert list(info.sample_shape) == [3, IMAGE_SIZE, IMAGE_SIZE]
    assert _indices(f32) == _indices(u8)
    x, ref = _images(f32), _images(u8)
    assert x.dtype == np.float32 and x.shape == ref.shape
    want = (ref.astype(np.float32) / 255 - MEAN[:, None, None]) / STD[:, None, None]
    # The uint8 stream rounds each value: half a step, divided by std.
    np.testing.assert_allclose(x, want, atol=0.6 / 255 / STD.min() + 1e-4)
    # Both choices at once.
    info, small = _epoch(d.unix, "eval", dtype="float32", size=32)
    assert list(info.sample_shape) == [3, 32, 32] and info.dtype == pb.FLOAT32
    assert _images(small).shape[1:] == (3, 32, 32) and _images(small).dtype == np.float32


def test_a_stream_gets_the_fields_it_chose_and_none_with_an_empty_list(served):
    d, samples = served
    info, full = _epoch(d.unix, "clip")
    assert [f.name for f in info.fields] == ["caption", "meta", "key"]
    # Given in another order: delivered in the pipeline's.
    info, some = _epoch(d.unix, "clip", fields=["key", "caption"])
    assert [f.name for f in info.fields] == ["caption", "key"]
    assert all(list(b["fields"]) == ["caption", "key"] for b in some)
    assert _indices(some) == _indices(full)
    for name in ("caption", "key"):
        assert [v for b in some for v in b["fields"][name]] == \
            [v for b in full for v in b["fields"][name]]
    keys = [v for b in some for v in b["fields"]["key"]]
    captions = [v for b in some for v in b["fields"]["caption"]]
    assert captions == [_caption(int(k[len("sub/s"):])) for k in keys]
    assert _images(some).tobytes() == _images(full).tobytes()

    info, none = _epoch(d.unix, "clip", fields=[])
    assert list(info.fields) == []
    assert all(b["fields"] == {} for b in none)
    assert _indices(none) == _indices(full)
    assert [x for b in none for x in b["labels"]] == [x for b in full for x in b["labels"]]
    assert _images(none).tobytes() == _images(full).tobytes()
    assert sorted(_indices(none)) == list(range(len(samples)))


@pytest.mark.parametrize("pipeline,kw,message", [
    ("eval", dict(size=96),
     "output size 96x96 is not allowed by pipeline eval (allowed_sizes: 64x64, 32x32, 48x40)"),
    ("eval", dict(size=(40, 48)),
     "output size 40x48 is not allowed by pipeline eval (allowed_sizes: 64x64, 32x32, 48x40)"),
    ("plain", dict(size=32),
     "output size 32x32 is not allowed by pipeline plain (allowed_sizes: 64x64)"),
    ("eval", dict(dtype="float16"),
     "dtype float16 is not allowed by pipeline eval (allowed_dtypes: uint8, float32)"),
    ("plain", dict(dtype="float32"),
     "dtype float32 is not allowed by pipeline plain (allowed_dtypes: uint8)"),
    ("clip", dict(fields=["caption", "nope"]),
     "field 'nope' is not a field of pipeline clip (its fields: caption, meta, key)"),
    ("plain", dict(fields=["caption"]),
     "field 'caption' is not a field of pipeline plain (its fields: none)"),
])
def test_a_choice_out_of_bounds_is_refused_naming_the_allowed_values(served, pipeline, kw,
                                                                     message):
    d, _ = served
    with pytest.raises(conveyor.InvalidRequest) as e:
        conveyor.open_stream(d.unix, pipeline, BATCH, **kw)
    assert message in str(e.value)
    # The daemon is fine afterwards.
    assert _epoch(d.unix, pipeline, num_epochs=1)[1]


def _read_loader(loader, epochs, sizes=None):
    """[(epoch, indices, image shape) per batch] over `epochs` passes of
    iter(loader), set_size(sizes[e]) before pass e when sizes is given."""
    out = []
    for e in range(epochs):
        if sizes is not None:
            loader.set_size(sizes[e])
        for b in loader:
            out.append((b.epoch, b.indices.tolist(), tuple(b.images.shape[1:])))
    return out


def test_progressive_resizing_keeps_the_samples_and_their_order(served):
    d, samples = served
    full = conveyor.Loader(d.unix, pipeline="train", batch_size=BATCH, seed=SEED)
    prog = conveyor.Loader(d.unix, pipeline="train", batch_size=BATCH, seed=SEED)
    want = _read_loader(full, 2)
    got = _read_loader(prog, 2, sizes=[32, None])
    assert [(e, i) for e, i, _ in got] == [(e, i) for e, i, _ in want]
    assert {s for e, _, s in got if e == 0} == {(3, 32, 32)}
    assert {s for e, _, s in got if e == 1} == {(3, IMAGE_SIZE, IMAGE_SIZE)}
    assert {s for _, _, s in want} == {(3, IMAGE_SIZE, IMAGE_SIZE)}
    # Every sample once per epoch, and a different order in each.
    for e in (0, 1):
        assert sorted(x for ep, i, _ in got if ep == e for x in i) == list(range(len(samples)))
    assert [i for ep, i, _ in got if ep == 0] != [i for ep, i, _ in got if ep == 1]
    assert prog.state_dict() == full.state_dict()
    full.close()
    prog.close()


def test_a_pooled_loader_asks_every_daemon_for_the_same_choice(served):
    d, _ = served
    _, one = _epoch(d.unix, "eval", size=(48, 40), dtype="float32")
    pooled = conveyor.Loader(servers=[d.unix, d.tcp], pipeline="eval", batch_size=BATCH,
                             seed=SEED, size=(48, 40), dtype="float32",
                             pool=conveyor.PoolOptions(policy="balanced", range_batches=2))
    batches = []
    with pooled.epoch(0) as stream:
        assert list(stream.pipeline.sample_shape) == [3, 48, 40]
        for b in stream:
            batches.append((b.indices.tolist(), np.array(b.images)))
        served_by = [w["batches"] for w in stream.stats()["daemons"]]
    assert [i for i, _ in batches] == [b["indices"] for b in one]
    assert np.concatenate([x for _, x in batches]).tobytes() == _images(one).tobytes()
    assert sum(served_by) == len(one)
    pooled.close()
