"""Sample fields (`fields` of a pipeline): a caption, JSON metadata and the
key of every sample, delivered with its image by a real conveyord reading
WebDataset tar shards written here.

- Every field of every sample arrives exactly once per epoch, equal to what
  the shard holds, beside the right image and label; optional fields may be
  absent (None); batches are identical on a rerun and after a mid-epoch
  resume, and the same over the data socket as over shared memory.
- A bad value is its sample's error naming the sample and the field:
  oversize text, invalid JSON, text that is not UTF-8, a required member
  missing; the other samples are delivered.
- Datasets read whole (folders) deliver `type: key` fields (their paths).
- Config mistakes are refused at --check-config, naming the field.
- Boxes, keypoints and masks follow the image through the crop, the
  padding window of random_crop and both flips: each lands where the
  transformed image shows its white rectangle.
"""

import json
import subprocess
import tarfile

import numpy as np
import pytest

import conveyor
from conveyor_integration import (CAPTION_FIELDS, CONVEYORD, Daemon, add_tar_member, daemon_config,
                                  finish_daemons, pipeline_entry, require_daemon,
                                  write_field_shards)

SEED = 11
PER_SHARD = 10


def _caption(i):
    # Not ASCII, of varied length: the bytes travel as they are.
    return "photo %d: a caf\u00e9 \u2615 %s" % (i, "x" * (i % 7))


def _meta(i, label):
    return {"i": i, "label": label, "boxes": [[i, 1.5, 2, 3]]}


def _write_bad_shard(root, samples, out):
    """Six samples: 0 and 5 good, 1 an oversize caption, 2 invalid JSON, 3 a
    caption that is not UTF-8, 4 no caption at all."""
    path = out / "bad.tar"
    jpeg = (root / samples[0][0]).read_bytes()
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tar:
        for i in range(6):
            key = "b%d" % i
            add_tar_member(tar, key + ".jpg", jpeg)
            caption = {1: b"y" * 200, 3: b"caf\xe9"}.get(i, b"fine %d" % i)
            if i != 4:
                add_tar_member(tar, key + ".txt", caption)
            add_tar_member(tar, key + ".json", b"{\"ok\": tru}" if i == 2 else b"[1]")
    return path


FIELDS = CAPTION_FIELDS


@pytest.fixture(scope="module")
def served(dataset, tmp_path_factory):
    root, samples = dataset
    out = tmp_path_factory.mktemp("field-shards")
    paths = write_field_shards(root, samples, out, _caption, _meta, per_shard=PER_SHARD)
    bad = _write_bad_shard(root, samples, out)
    pipelines = {
        "clip": pipeline_entry(root, dataset={"shards": [str(p) for p in paths],
                                              "shuffle_buffer": 5},
                               fields=FIELDS),
        "bad": pipeline_entry(root, dataset={"shards": [str(bad)], "label_key": ""},
                              fields=FIELDS, max_failure_rate=1.0),
        "folder_keys": pipeline_entry(root, fields=[{"name": "path", "type": "key"}]),
    }
    cfg = daemon_config(root, pipelines=pipelines, allowed_roots=[str(root.parent), str(out)])
    # YAML is a superset of JSON: lists of maps written as JSON.
    d = Daemon(tmp_path_factory.mktemp("fields-daemon"), json.dumps(cfg))
    try:
        d.start()
        yield d, samples
    finally:
        finish_daemons([d])


def _read(address, pipeline, epoch=0, batch_size=8, **kw):
    loader = conveyor.Loader(address, pipeline=pipeline, batch_size=batch_size, seed=SEED,
                             **kw)
    out = []
    with loader.epoch(epoch) as stream:
        for b in stream:
            out.append(_plain(b))
    loader.close()
    return out


def _plain(b):
    """What a batch delivered, as plain values (the batch is released)."""
    return {"indices": b.indices.tolist(), "labels": b.labels.tolist(),
            "images": np.array(b.images),
            "fields": {name: list(col) for name, col in b.fields.items()},
            "failures": [(f.path, f.reason) for f in b.failures]}


def _flat(batches, name):
    return [v for b in batches for v in b["fields"][name]]


def test_pipeline_info_lists_the_fields(served):
    d, _ = served
    info = {p.name: p for p in conveyor.list_pipelines(d.unix)}
    fields = info["clip"].fields
    assert [(f.name, f.member, f.required) for f in fields] == [
        ("caption", "txt", True), ("meta", "json", False), ("key", "", True)]
    assert fields[0].max_bytes == 128 and fields[1].max_bytes == 4096
    assert "caption=text,txt,required,128;" in info["clip"].fingerprint["fields"]
    assert list(info["folder_keys"].fields)[0].name == "path"


def test_every_field_of_every_sample_once_beside_its_image(served):
    d, samples = served
    batches = _read(d.unix, "clip")
    indices = [i for b in batches for i in b["indices"]]
    assert sorted(indices) == list(range(len(samples)))  # every sample once
    keys = _flat(batches, "key")
    captions = _flat(batches, "caption")
    metas = _flat(batches, "meta")
    labels = [x for b in batches for x in b["labels"]]
    assert len(keys) == len(captions) == len(metas) == len(indices)
    for index, key, caption, meta, label in zip(indices, keys, captions, metas, labels):
        # Shards hold the samples in index order, so the key names the index.
        i = int(key[len("sub/s"):])
        assert i == index, key
        assert caption == _caption(i)
        assert label == samples[i][1]
        if i % 5:
            assert meta == _meta(i, label)
        else:
            assert meta is None  # optional and absent
    for b in batches:
        assert not b["failures"]


def test_fields_identical_on_rerun_resume_and_over_the_data_socket(served):
    d, _ = served
    first = _read(d.unix, "clip", epoch=1)
    again = _read(d.unix, "clip", epoch=1)
    assert [b["fields"] for b in again] == [b["fields"] for b in first]
    over_tcp = _read(d.tcp, "clip", epoch=1, transport="data_socket")
    assert [b["fields"] for b in over_tcp] == [b["fields"] for b in first]
    assert all(np.array_equal(a["images"], b["images"]) for a, b in zip(first, over_tcp))

    # Resume after 2 batches: the rest is the uninterrupted run's rest.
    loader = conveyor.Loader(d.unix, pipeline="clip", batch_size=8, seed=SEED)
    with loader.epoch(1) as stream:
        taken = [_plain(next(stream)), _plain(next(stream))]
    state = loader.state_dict()
    loader.close()
    resumed = conveyor.Loader(d.unix, pipeline="clip", batch_size=8, seed=SEED)
    resumed.load_state_dict(state)
    rest = []
    with resumed.epoch(1) as stream:
        for b in stream:
            rest.append(_plain(b))
    resumed.close()
    assert [b["fields"] for b in taken + rest] == [b["fields"] for b in first]
    assert all(np.array_equal(a["images"], b["images"]) for a, b in zip(taken + rest, first))


def test_a_bad_value_fails_its_sample_naming_the_field(served):
    d, _ = served
    batches = _read(d.unix, "bad", batch_size=6, shuffle=False)
    assert len(batches) == 1
    b = batches[0]
    assert b["fields"]["key"] == ["b0", "b5"]
    assert b["fields"]["caption"] == ["fine 0", "fine 5"]
    assert b["fields"]["meta"] == [[1], [1]]
    assert b["labels"] == [0, 0]  # label_key "": no labels
    reasons = {path.split("/")[-1]: reason for path, reason in b["failures"]}
    assert set(reasons) == {"b1.jpg", "b2.jpg", "b3.jpg", "b4.jpg"}
    assert "field 'caption': 200 bytes, more than its max_bytes 128" in reasons["b1.jpg"]
    assert "field 'meta': not valid JSON" in reasons["b2.jpg"]
    assert "field 'caption': not valid UTF-8" in reasons["b3.jpg"]
    assert "field 'caption': the sample has no '.txt' member" in reasons["b4.jpg"]


def test_folder_datasets_deliver_their_paths_as_keys(served):
    d, samples = served
    batches = _read(d.unix, "folder_keys")
    indices = [i for b in batches for i in b["indices"]]
    paths = _flat(batches, "path")
    assert [samples[i][0] for i in indices] == paths
    assert sorted(paths) == sorted(str(rel) for rel, _ in samples)


def test_list_file_columns_are_fields(dataset, tmp_path, daemon_factory):
    root, samples = dataset
    lines = []
    for i, (rel, label) in enumerate(samples):
        line = "%s\t%d\tcaption %d: caf\u00e9" % (rel, label, i)
        if i % 3:
            line += "\t" + json.dumps({"i": i})
        lines.append(line)
    listing = tmp_path / "list.tsv"
    listing.write_text("\n".join(lines) + "\n")
    fields = [{"name": "caption", "column": 2, "type": "text"},
              {"name": "meta", "column": 3, "type": "json", "required": False},
              {"name": "path", "type": "key"}]
    cfg = daemon_config(root, pipelines={"listed": pipeline_entry(
        root, dataset={"list": str(listing), "root": str(root)}, fields=fields)},
        allowed_roots=[str(root.parent), str(tmp_path)])
    d = daemon_factory(json.dumps(cfg))
    batches = _read(d.unix, "listed")
    indices = [i for b in batches for i in b["indices"]]
    assert sorted(indices) == list(range(len(samples)))
    for i, caption, meta, path in zip(indices, _flat(batches, "caption"), _flat(batches, "meta"),
                                      _flat(batches, "path")):
        assert caption == "caption %d: caf\u00e9" % i
        assert meta == ({"i": i} if i % 3 else None)
        assert path == str(samples[i][0])


@pytest.mark.parametrize("pipeline, field, why", [
    ({"fields": [{"name": "c", "member": "txt"}]}, "fields[0]",
     "fields read from members are for tar shards"),
    ({"fields": [{"name": "c", "column": 2}]}, "fields[0]",
     "columns for list and URL files"),
    ({"fields": [{"name": "c", "column": 1}], "dataset": "LIST"}, "fields[0].column",
     "must be within"),
    ({"fields": [{"name": "k", "type": "key", "member": "txt"}]}, "fields[0].member",
     "a `key` field has no member"),
    ({"fields": [{"name": "a", "type": "key"}, {"name": "a", "type": "key"}]}, "fields[1]",
     "the name is used twice"),
    ({"fields": [{"name": "a", "type": "text", "member": "txt", "colour": 1}]}, "fields[0].colour",
     "unknown field"),
    ({"fields": [{"name": "a", "type": "key"}], "augment": "eval", "cache_output": True},
     "cache_output", "not available with `fields`"),
    ({"fields": {"name": "a"}}, "fields", "expected a list of fields"),
])
def test_config_mistakes_name_the_field(dataset, tmp_path, pipeline, field, why):
    require_daemon()
    root, _ = dataset
    entry = pipeline_entry(root, **pipeline)
    if "member" in json.dumps(pipeline) and "colour" in json.dumps(pipeline):
        entry["dataset"] = {"shards": [str(tmp_path / "x.tar")]}
    if entry["dataset"] == "LIST":
        (tmp_path / "list.tsv").write_text("a/b.jpg\t0\n")
        entry["dataset"] = {"list": str(tmp_path / "list.tsv"), "root": str(root)}
    cfg = daemon_config(root, pipelines={"p": entry},
                        allowed_roots=[str(root.parent), str(tmp_path)])
    path = tmp_path / "conveyord.yaml"
    path.write_text(json.dumps(cfg))
    r = subprocess.run([str(CONVEYORD), "--config", str(path), "--check-config"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "field pipelines.p.%s" % field in r.stderr, r.stderr
    assert why in r.stderr, r.stderr


# --- boxes that move with the image -----------------------------------------
def _box_shards(out, count=24, seed=3):
    """Shards of dark images, each with one white rectangle, and its box as
    a float32 [1, 4] .npy in pixels (xyxy); sample 0's box file is float64."""
    import io as _io

    from PIL import Image, ImageDraw
    rng = np.random.default_rng(seed)
    path = out / "boxes.tar"
    truth = {}
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tar:
        for i in range(count):
            w, h = int(rng.integers(120, 200)), int(rng.integers(100, 160))
            bw, bh = int(rng.integers(w // 4, w // 2)), int(rng.integers(h // 4, h // 2))
            x0, y0 = int(rng.integers(0, w - bw)), int(rng.integers(0, h - bh))
            img = Image.new("RGB", (w, h), (15, 15, 15))
            ImageDraw.Draw(img).rectangle([x0, y0, x0 + bw - 1, y0 + bh - 1], fill=(240, 240, 240))
            buf = _io.BytesIO()
            img.save(buf, format="JPEG", quality=98)
            key = "img%03d" % i
            add_tar_member(tar, key + ".jpg", buf.getvalue())
            mask = Image.new("L", (w, h), 0)
            ImageDraw.Draw(mask).rectangle([x0, y0, x0 + bw - 1, y0 + bh - 1], fill=255)
            png = _io.BytesIO()
            mask.save(png, format="PNG")
            add_tar_member(tar, key + ".mask.png", png.getvalue())
            box = np.array([[x0, y0, x0 + bw, y0 + bh]], dtype=np.float64 if i == 0 else np.float32)
            npy = _io.BytesIO()
            np.save(npy, box)
            add_tar_member(tar, key + ".npy", npy.getvalue())
            # The rectangle's corners as keypoints (x, y, visibility 2).
            corners = np.array([[x0, y0, 2], [x0 + bw, y0, 2], [x0, y0 + bh, 2],
                                [x0 + bw, y0 + bh, 2]], dtype=np.float32)
            npy = _io.BytesIO()
            np.save(npy, corners)
            add_tar_member(tar, key + ".kp.npy", npy.getvalue())
            truth[key] = box[0].tolist()
    return path, truth


@pytest.fixture(scope="module")
def boxes_daemon(dataset, tmp_path_factory):
    root, _ = dataset
    out = tmp_path_factory.mktemp("box-shards")
    path, truth = _box_shards(out)
    fields = [{"name": "boxes", "member": "npy", "type": "npy", "geometry": "boxes_xyxy"},
              {"name": "mask", "member": "mask.png", "type": "mask", "max_bytes": 65536},
              {"name": "corners", "member": "kp.npy", "type": "npy", "geometry": "keypoints"},
              {"name": "key", "type": "key"}]
    shards = {"shards": [str(path)], "label_key": ""}
    pipelines = {
        "train": pipeline_entry(root, dataset=shards, fields=fields, scale=[0.25, 1.0],
                                layout="nhwc"),
        # CIFAR's shifted window and both flips (fill 0: the padding is dark).
        "padded": pipeline_entry(root, dataset=shards, fields=fields, layout="nhwc", augment=[
            {"op": "random_resized_crop", "scale": [0.25, 1.0]},
            {"op": "random_crop", "padding": 10}, {"op": "horizontal_flip"},
            {"op": "vertical_flip"}]),
        "eval": pipeline_entry(root, dataset=shards, fields=fields, augment="eval",
                               resize_size=80, layout="nhwc"),
    }
    cfg = daemon_config(root, pipelines=pipelines, allowed_roots=[str(root.parent), str(out)])
    d = Daemon(tmp_path_factory.mktemp("boxes-daemon"), json.dumps(cfg))
    try:
        d.start()
        yield d, truth
    finally:
        finish_daemons([d])


def _bright_box(image):
    """[x0, y0, x1, y1] around the image's bright pixels (HWC uint8), or None."""
    mask = image.astype(np.int32).mean(axis=2) > 128
    if mask.sum() < 4:
        return None
    ys, xs = np.nonzero(mask)
    return [xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]


@pytest.mark.parametrize("pipeline", ["train", "padded", "eval"])
def test_boxes_land_where_the_transformed_image_shows_them(boxes_daemon, pipeline):
    d, truth = boxes_daemon
    checked = dropped = 0
    for epoch in range(1 if pipeline == "eval" else 3):
        loader = conveyor.Loader(d.unix, pipeline=pipeline, batch_size=8, seed=SEED)
        with loader.epoch(epoch) as stream:
            for b in stream:
                assert not b.failures
                for image, boxes, mask, corners, key in zip(
                        b.images, b.fields["boxes"], b.fields["mask"], b.fields["corners"],
                        b.fields["key"]):
                    assert key in truth
                    assert boxes.dtype == np.float32 and boxes.ndim == 2 and boxes.shape[1] == 4
                    seen = _bright_box(image)
                    # The mask moved with the image: nearest-neighbour, so its
                    # pixels agree with the image's away from the blurred edges.
                    assert mask.dtype == np.uint8 and mask.shape == image.shape[:2]
                    bright = image.astype(np.int32).mean(axis=2) > 128
                    assert np.mean(bright == (mask > 127)) > 0.93, key
                    masked = _bright_box(np.repeat(mask[:, :, None], 3, axis=2))
                    if seen is not None and masked is not None:
                        assert np.allclose(masked, seen, atol=2.0), (key, masked, seen)
                    # Keypoints keep their four rows; the visible ones are in the output,
                    # and when all four are, they span the bright rectangle.
                    assert corners.shape == (4, 3), key
                    h, w = image.shape[:2]
                    visible = corners[corners[:, 2] > 0]
                    assert np.all((visible[:, 0] >= 0) & (visible[:, 0] <= w) &
                                  (visible[:, 1] >= 0) & (visible[:, 1] <= h)), (key, corners)
                    if len(visible) == 4 and seen is not None:
                        span = [visible[:, 0].min(), visible[:, 1].min(), visible[:, 0].max(),
                                visible[:, 1].max()]
                        assert np.allclose(span, seen, atol=2.0), (key, span, seen)
                    if boxes.shape[0] == 0:
                        # Dropped: the rectangle is outside the crop.
                        assert seen is None or (seen[2] - seen[0]) * (seen[3] - seen[1]) < 6, key
                        dropped += 1
                        continue
                    box = boxes[0]
                    if (box[2] - box[0]) < 3 or (box[3] - box[1]) < 3:
                        continue  # a sliver: resampling blurs it below the threshold
                    assert seen is not None, (key, box)
                    # The resampler blurs an edge over about a pixel.
                    assert np.allclose(seen, box, atol=2.0), (key, seen, box.tolist())
                    checked += 1
        loader.close()
    assert checked >= (20 if pipeline == "eval" else 40)
    if pipeline != "eval":
        assert dropped + checked >= 60


def test_bad_boxes_fail_their_sample(dataset, tmp_path, daemon_factory):
    import io as _io

    from PIL import Image
    root, _ = dataset
    path = tmp_path / "bad-boxes.tar"
    jpeg = _io.BytesIO()
    Image.new("RGB", (64, 64)).save(jpeg, format="JPEG")
    cases = {"ok": np.zeros((2, 4), np.float32), "three": np.zeros((1, 3), np.float32),
             "ints": np.zeros((1, 4), np.int64)}
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tar:
        for key, array in cases.items():
            add_tar_member(tar, key + ".jpg", jpeg.getvalue())
            npy = _io.BytesIO()
            np.save(npy, array)
            add_tar_member(tar, key + ".npy", npy.getvalue())
        add_tar_member(tar, "junk.jpg", jpeg.getvalue())
        add_tar_member(tar, "junk.npy", b"\x93NUMPY not really")
    fields = [{"name": "boxes", "member": "npy", "type": "npy", "geometry": "boxes_xywh"}]
    cfg = daemon_config(root, pipelines={"p": pipeline_entry(
        root, dataset={"shards": [str(path)], "label_key": ""}, fields=fields,
        max_failure_rate=1.0)}, allowed_roots=[str(root.parent), str(tmp_path)])
    d = daemon_factory(json.dumps(cfg))
    batches = _read(d.unix, "p", batch_size=4, shuffle=False)
    reasons = {p.split("/")[-1]: r for b in batches for p, r in b["failures"]}
    assert set(reasons) == {"three.jpg", "ints.jpg", "junk.jpg"}
    assert "boxes must have shape [N, 4 or more], not [1, 3]" in reasons["three.jpg"]
    assert "boxes must be float32 or float64, not int64" in reasons["ints.jpg"]
    assert "field 'boxes': npy:" in reasons["junk.jpg"]
    # The all-zero boxes have no area: dropped, an empty [0, 4] array.
    assert [v.shape for b in batches for v in b["fields"]["boxes"]] == [(0, 4)]
