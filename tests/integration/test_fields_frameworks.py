"""Sample fields through the framework adapters, against a real daemon
serving tar shards of jpg + caption (.txt) + detection rows (.npy,
[x0, y0, x1, y1, class], moved with the crop and flip):

- torch (Debian's): a detection-style loop, TorchLoader(fields=...) turned
  into a list of {"boxes", "labels"} target dicts per batch, every sample
  once, boxes inside the image and classes from the shard;
- JAX (scripts/venvs/jax.txt): conveyor.jax.iterate(fields=...) with the
  captions passed through as Python strings beside the arrays;
- TensorFlow (scripts/venvs/tensorflow.txt): conveyor.tensorflow.dataset
  with fields=, captions as tf.string tensors in the element spec.

The JAX and TF code runs in their environments' interpreters; the daemon
in this process.
"""

import io
import json
import subprocess
import tarfile
import textwrap

import numpy as np
import pytest

import conveyor
import conveyor_integration as ci
from conveyor_integration import (Daemon, add_tar_member, daemon_config, finish_daemons,
                                  pipeline_entry)

COUNT = 20
SIZE = 64


def _caption(i):
    return "sample %d: a caf\u00e9 \u2615" % i


@pytest.fixture(scope="module")
def served(dataset, tmp_path_factory):
    from PIL import Image
    root, _ = dataset
    out = tmp_path_factory.mktemp("framework-shards")
    path = out / "det.tar"
    rng = np.random.default_rng(5)
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tar:
        for i in range(COUNT):
            w, h = int(rng.integers(100, 180)), int(rng.integers(90, 150))
            buf = io.BytesIO()
            Image.new("RGB", (w, h), (90, 30, 200)).save(buf, format="JPEG")
            key = "s%03d" % i
            add_tar_member(tar, key + ".jpg", buf.getvalue())
            add_tar_member(tar, key + ".txt", _caption(i).encode())
            rows = np.array([[0, 0, w / 2, h / 2, i % 7], [w / 4, h / 4, w, h, 100 + i]],
                            dtype=np.float32)
            npy = io.BytesIO()
            np.save(npy, rows)
            add_tar_member(tar, key + ".npy", npy.getvalue())
    fields = [{"name": "caption", "member": "txt", "type": "text"},
              {"name": "boxes", "member": "npy", "type": "npy", "geometry": "boxes_xyxy"},
              {"name": "key", "type": "key"}]
    pipelines = {"det": pipeline_entry(root, dataset={"shards": [str(path)], "label_key": ""},
                                       fields=fields, size=SIZE, scale=[0.5, 1.0])}
    cfg = daemon_config(root, pipelines=pipelines, allowed_roots=[str(root.parent), str(out)])
    d = Daemon(tmp_path_factory.mktemp("frameworks-daemon"), json.dumps(cfg))
    try:
        d.start()
        yield d
    finally:
        finish_daemons([d])


def test_torch_detection_loop_gets_a_target_dict_per_sample(served):
    import torch

    import conveyor.torch as ct
    loader = ct.TorchLoader(served.unix, pipeline="det", batch_size=6, seed=3,
                            fields=["boxes", "key"])
    seen = []
    for images, labels, fields in loader:
        assert images.dtype == torch.uint8 and images.shape[1:] == (3, SIZE, SIZE)
        targets = [{"boxes": torch.from_numpy(np.array(rows[:, :4])),
                    "labels": torch.from_numpy(np.array(rows[:, 4])).long()}
                   for rows in fields["boxes"]]
        assert len(targets) == images.shape[0] == len(fields["key"])
        for target, key in zip(targets, fields["key"]):
            i = int(key[1:])
            boxes = target["boxes"]
            assert boxes.dtype == torch.float32 and boxes.ndim == 2 and boxes.shape[1] == 4
            assert bool(((boxes >= 0) & (boxes <= SIZE)).all())
            assert bool((boxes[:, 2] > boxes[:, 0]).all() and (boxes[:, 3] > boxes[:, 1]).all())
            # Classes travel with their boxes: the second box covers the
            # crop's centre at scale >= 0.5, so it is never dropped.
            assert target["labels"].tolist()[-1] == 100 + i
            assert set(target["labels"].tolist()) <= {i % 7, 100 + i}
            seen.append(i)
    assert sorted(seen) == list(range(COUNT))


def _run(python, code, address):
    r = subprocess.run([python, "-c", textwrap.dedent(code), address], capture_output=True,
                       text=True, env=ci.client_env(), timeout=ci.scaled(300))
    assert r.returncode == 0, "failed (%d):\n%s\n%s" % (r.returncode, r.stdout[-3000:],
                                                         r.stderr[-6000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_jax_loop_passes_captions_through(served):
    python = ci.venv_python("jax")
    got = _run(python, """
        import json, os, sys
        os.environ["JAX_PLATFORMS"] = "cpu"
        import conveyor, conveyor.jax as cj
        loader = conveyor.Loader(sys.argv[1], pipeline="det", batch_size=8, seed=1)
        captions, shapes = [], []
        for images, labels, fields in cj.iterate(loader.epoch(0), fields=["caption"]):
            assert list(fields) == ["caption"]
            assert all(isinstance(c, str) for c in fields["caption"])
            captions += fields["caption"]
            shapes.append(list(images.shape))
        print(json.dumps({"captions": captions, "shapes": shapes}))
    """, served.unix)
    assert sorted(got["captions"]) == sorted(_caption(i) for i in range(COUNT))
    assert got["shapes"][0] == [8, 3, SIZE, SIZE]


def test_tensorflow_dataset_has_captions_as_tf_string(served):
    python = ci.venv_python("tensorflow")
    got = _run(python, """
        import json, sys
        import tensorflow as tf
        import conveyor, conveyor.tensorflow as ctf
        loader = conveyor.Loader(sys.argv[1], pipeline="det", batch_size=8, seed=1)
        ds = ctf.dataset(loader, fields=["caption", "key"])
        spec = ds.element_spec
        captions, keys = [], []
        for images, labels, fields in ds:
            assert fields["caption"].dtype == tf.string
            captions += [c.decode() for c in fields["caption"].numpy()]
            keys += [k.decode() for k in fields["key"].numpy()]
        print(json.dumps({"captions": captions, "keys": keys,
                          "spec": str(spec[2]["caption"])}))
    """, served.unix)
    assert sorted(got["captions"]) == sorted(_caption(i) for i in range(COUNT))
    assert sorted(got["keys"]) == ["s%03d" % i for i in range(COUNT)]
    assert "tf.string" in got["spec"]


def test_the_plain_loader_sees_the_same_rows(served):
    loader = conveyor.Loader(served.unix, pipeline="det", batch_size=20, seed=3)
    with loader.epoch(0) as stream:
        b = next(stream)
        rows = {k: np.array(v) for k, v in zip(b.fields["key"], b.fields["boxes"])}
    loader.close()
    assert len(rows) == COUNT
    assert all(r.dtype == np.float32 and r.shape[1] == 5 for r in rows.values())
