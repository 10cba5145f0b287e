"""`augment` as a list of ops, through a real daemon:

- the train preset written as ops gives byte-identical batches (the same
  draws, the same fused pass);
- vertical_flip and grayscale with p 1 after resize + center_crop give the
  eval preset's images mirrored top to bottom and made grey by PIL's rule;
- with p 0.5 each, about half the samples of an epoch are flipped, and
  reruns of the epoch are identical;
- the whole-image ops (random crop with padding, colour jitter, blur,
  TrivialAugmentWide) give batches identical on a rerun, with another thread
  count, and after a mid-epoch resume; a jitter with every factor at 1
  changes nothing;
- an `augment` field reports each sample's draws, and torchvision applying
  those draws to the source file gives the delivered image byte for byte
  (the blur within its one-level tolerance).
"""

import json

import numpy as np
from PIL import Image

import augment_reference
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


HEAVY = [{"op": "random_resized_crop"}, {"op": "random_crop", "padding": 4},
         {"op": "horizontal_flip"},
         {"op": "color_jitter", "brightness": 0.4, "contrast": 0.4, "saturation": 0.4,
          "hue": 0.1, "p": 0.8},
         {"op": "grayscale", "p": 0.2},
         {"op": "gaussian_blur", "kernel_size": 5, "p": 0.5},
         {"op": "trivial_augment_wide"}]


def _resumed(address, pipeline, epoch, after):
    loader = conveyor.Loader(address, pipeline=pipeline, batch_size=16, seed=SEED,
                             shuffle=False)
    with loader.epoch(epoch) as stream:
        taken = [np.array(next(stream).images) for _ in range(after)]
    state = loader.state_dict()
    loader.close()
    again = conveyor.Loader(address, pipeline=pipeline, batch_size=16, seed=SEED,
                            shuffle=False)
    again.load_state_dict(state)
    with again.epoch(epoch) as stream:
        rest = [np.array(b.images) for b in stream]
    again.close()
    return np.concatenate(taken + rest)


def test_whole_image_ops_are_deterministic(dataset, daemon_factory):
    root, samples = dataset
    pipelines = {
        "heavy": pipeline_entry(root, layout="nhwc", augment=HEAVY),
        "train": pipeline_entry(root, layout="nhwc"),
        "identity_jitter": pipeline_entry(root, layout="nhwc", augment=[
            {"op": "random_resized_crop"}, {"op": "horizontal_flip"},
            {"op": "color_jitter", "brightness": [1, 1], "hue": 0}]),
    }
    d = daemon_factory(json.dumps(daemon_config(root, pipelines=pipelines)))
    first = _images(d.unix, "heavy", epoch=1)
    assert len(first) == len(samples)
    assert np.array_equal(_images(d.unix, "heavy", epoch=1), first)
    one_thread = daemon_factory(json.dumps(daemon_config(
        root, pipelines={"heavy": pipeline_entry(root, layout="nhwc", augment=HEAVY)},
        threads=1)))
    assert np.array_equal(_images(one_thread.unix, "heavy", epoch=1), first)
    assert np.array_equal(_resumed(d.unix, "heavy", 1, 1), first)
    # The ops change the images, differently per epoch.
    assert not np.array_equal(_images(d.unix, "heavy", epoch=2), first)
    # A jitter that draws nothing: the crop and flip are the preset's, the pixels too.
    assert np.array_equal(_images(d.unix, "identity_jitter"), _images(d.unix, "train"))


def test_reported_draws_reproduce_every_image_with_torchvision(dataset, daemon_factory):
    root, samples = dataset
    size = (40, 48)
    fields = [{"name": "draws", "type": "augment"}, {"name": "path", "type": "key"}]
    common = dict(layout="nhwc", size=list(size), dct_scaling=False, fields=fields)
    pipelines = {
        "heavy": pipeline_entry(root, augment=HEAVY, **common),
        "eval": pipeline_entry(root, augment=[
            {"op": "resize", "size": 52}, {"op": "center_crop"},
            {"op": "random_crop", "padding": 3, "padding_mode": "reflect"},
            {"op": "color_jitter", "hue": 0.3}], **common),
    }
    d = daemon_factory(json.dumps(daemon_config(root, pipelines=pipelines)))
    info = {p.name: p for p in conveyor.list_pipelines(d.unix)}
    assert [f.name for f in info["heavy"].fields] == ["draws", "path"]
    seen = {"heavy": set(), "eval": set()}
    blurred = 0
    for name, padding, mode in (("heavy", 4, "constant"), ("eval", 3, "reflect")):
        loader = conveyor.Loader(d.unix, pipeline=name, batch_size=16, seed=SEED)
        with loader.epoch(1) as stream:
            for b in stream:
                for image, draws, path in zip(b.images, b.fields["draws"], b.fields["path"]):
                    with Image.open(root / path) as im:
                        pil = im.convert("RGB")
                    want = augment_reference.reference(pil, draws, size, padding=padding,
                                                       padding_mode=mode, blur_kernel=(5, 5))
                    diff = np.abs(np.array(image).astype(int) - want)
                    if draws.get("blur", {}).get("applied"):
                        blurred += 1
                        assert diff.max() <= 1 and np.count_nonzero(diff) < 0.01 * diff.size
                    else:
                        assert diff.max() == 0, (path, draws)
                    seen[name].add(path)
                    if "trivial_augment" in draws:
                        seen[name].add(draws["trivial_augment"]["op"])
        loader.close()
    assert len([k for k in seen["heavy"] if k.endswith(".jpg")]) == len(samples)
    assert len(seen["heavy"]) > len(samples) + 8  # most TrivialAugmentWide ops appeared
    assert len(seen["eval"]) == len(samples) and blurred > 5
