"""TensorFlow side of tests/integration/test_tensorflow_adapter.py, run in
the tensorflow virtual environment's interpreter
(scripts/venvs/tensorflow.txt) against a daemon the test started. Writes
what it saw under --out (npz arrays, result.json) for the test to compare
with the plain Loader; a failed expectation exits non-zero with a message.

    tensorflow_checks.py spec|epoch|pointers|fit --server ADDR --out DIR [--pipeline P]
"""

import os
import sys

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import check_main
import conveyor
import conveyor.tensorflow as ctf
from conveyor._framework import views_keep_slot

import tensorflow as tf


def loader(args, **kw):
    return conveyor.Loader(args.server, pipeline=args.pipeline, batch_size=args.batch_size,
                           seed=args.seed, transport=args.transport, **kw)


class _Capsule:
    """Hands a tf.Tensor's DLPack capsule to numpy, to read its address."""

    def __init__(self, tensor):
        self.capsule = tf.experimental.dlpack.to_dlpack(tensor)

    def __dlpack__(self, stream=None):
        return self.capsule

    def __dlpack_device__(self):
        return (1, 0)  # kDLCPU


def address(tensor):
    return np.from_dlpack(_Capsule(tensor)).ctypes.data


def spec(args):
    ld = loader(args)
    ds = ctf.dataset(ld)
    images, labels = ds.element_spec
    refused = None
    try:
        ctf.dataset(ld, copy=False)
    except ValueError as e:
        refused = str(e)
    ld.close()
    return {"images": [list(images.shape.as_list()), images.dtype.name],
            "labels": [list(labels.shape.as_list()), labels.dtype.name],
            "copy_false_refused": refused}


def epoch(args):
    """One epoch through dataset(...).prefetch(4), every element kept until
    the end: an element aliasing a refilled slot would show here."""
    ld = loader(args)
    kept = list(ctf.dataset(ld).prefetch(4))
    np.savez(os.path.join(args.out, "epoch.npz"),
             images=np.concatenate([x.numpy() for x, _ in kept]),
             labels=np.concatenate([y.numpy() for _, y in kept]))
    ld.close()
    return {"batches": len(kept), "images_dtype": kept[0][0].dtype.name,
            "labels_dtype": kept[0][1].dtype.name, "next_epoch": ld.current_epoch}


def pointers(args):
    """Where to_tensors' buffers lie while the batch is held: copy=False is
    the slot itself (DLPack) when it is 64-byte aligned."""
    ld = loader(args)
    out = {"false": [], "true": [], "auto": [], "lease": [], "aligned": []}
    with ld.epoch(0) as stream:
        for batch in stream:
            slot = batch.images.ctypes.data
            out["aligned"].append(slot % 64 == 0)
            for mode, key in ((False, "false"), (True, "true"), ("auto", "auto")):
                x, y = ctf.to_tensors(batch, copy=mode)
                out[key].append(address(x) == slot)
                np.testing.assert_array_equal(x.numpy(), batch.images)
                np.testing.assert_array_equal(y.numpy(), batch.labels)
            out["lease"].append(views_keep_slot(batch))
    ld.close()
    return out


def fit(args):
    """Keras model.fit over two epochs of the prefetched dataset."""
    ld = loader(args)
    info = ld.pipeline_info()
    shape = tuple(info.sample_shape)
    inputs = tf.keras.Input(shape=shape, dtype=tf.uint8)
    x = tf.keras.layers.Rescaling(1 / 255)(inputs)
    x = tf.keras.layers.Permute((2, 3, 1))(x)  # NCHW -> NHWC: CPU convolutions want NHWC
    x = tf.keras.layers.Conv2D(8, 3, strides=2, activation="relu")(x)
    x = tf.keras.layers.GlobalAveragePooling2D()(x)
    model = tf.keras.Model(inputs, tf.keras.layers.Dense(info.num_classes)(x))
    model.compile(optimizer="sgd",
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(ctf.dataset(ld).prefetch(2), epochs=2, verbose=0)
    state = ld.state_dict()
    ld.close()
    return {"loss": [float(v) for v in history.history["loss"]], "state": state}


def main():
    return check_main.run({"spec": spec, "epoch": epoch, "pointers": pointers, "fit": fit})


if __name__ == "__main__":
    sys.exit(main())
