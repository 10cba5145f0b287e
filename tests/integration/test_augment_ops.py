"""`augment` as a list of ops, through a real daemon:

- the train preset written as ops gives byte-identical batches (the same
  draws, the same fused pass);
- vertical_flip and grayscale with p 1 after resize + center_crop give the
  eval preset's images mirrored top to bottom and made grey by PIL's rule;
- with p 0.5 each, about half the samples of an epoch are flipped, and
  reruns of the epoch are identical.
"""

import json

import numpy as np

import conveyor
from conveyor_integration import daemon_config, pipeline_entry

SEED = 4


def _images(address, pipeline, epoch=0):
    loader = conveyor.Loader(address, pipeline=pipeline, batch_size=16, seed=SEED,
                             shuffle=False)
    out = []
    with loader.epoch(epoch) as stream:
        for b in stream:
            out.append(np.array(b.images))
    loader.close()
    return np.concatenate(out)


def test_augment_ops(dataset, daemon_factory):
    root, samples = dataset
    eval_ops = [{"op": "resize", "size": 80}, {"op": "center_crop"}]
    pipelines = {
        "train": pipeline_entry(root, layout="nhwc"),
        "train_ops": pipeline_entry(root, layout="nhwc", augment=[
            {"op": "random_resized_crop"}, {"op": "horizontal_flip"}]),
        "eval": pipeline_entry(root, layout="nhwc", augment="eval", resize_size=80),
        "eval_ops": pipeline_entry(root, layout="nhwc", augment=eval_ops + [
            {"op": "vertical_flip", "p": 1}, {"op": "grayscale", "p": 1}]),
        "half": pipeline_entry(root, layout="nhwc", augment=eval_ops + [
            {"op": "vertical_flip"}]),
    }
    d = daemon_factory(json.dumps(daemon_config(root, pipelines=pipelines)))

    assert np.array_equal(_images(d.unix, "train"), _images(d.unix, "train_ops"))

    plain = _images(d.unix, "eval").astype(np.uint32)
    mirrored = plain[:, ::-1]  # NHWC: rows reversed
    grey = ((mirrored[..., 0] * 19595 + mirrored[..., 1] * 38470 + mirrored[..., 2] * 7471 +
             0x8000) >> 16).astype(np.uint8)
    got = _images(d.unix, "eval_ops")
    assert np.array_equal(got, np.repeat(grey[..., None], 3, axis=3))

    half = _images(d.unix, "half")
    flipped = [i for i in range(len(samples))
               if not np.array_equal(half[i], plain[i]) and np.array_equal(half[i], mirrored[i])]
    unchanged = [i for i in range(len(samples)) if np.array_equal(half[i], plain[i])]
    assert len(flipped) + len(unchanged) == len(samples)
    assert 10 <= len(flipped) <= len(samples) - 10
    assert np.array_equal(_images(d.unix, "half"), half)  # the same draws on a rerun
