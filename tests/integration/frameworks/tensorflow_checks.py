"""TensorFlow side of tests/integration/test_tensorflow_adapter.py, run in
the tensorflow virtual environment's interpreter
(scripts/venvs/tensorflow.txt) against a daemon the test started. Writes
what it saw under --out (npz arrays, result.json) for the test to compare
with the plain Loader; a failed expectation exits non-zero with a message.

    tensorflow_checks.py spec|epoch|pointers|fit|cardinality --server ADDR --out DIR [--pipeline P]
"""

import os
import sys
import warnings

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
    """One epoch through dataset(..., prefetch=4), every element kept until
    the end: an element aliasing a refilled slot would show here."""
    ld = loader(args)
    kept = list(ctf.dataset(ld, prefetch=4))
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


def conveyor_warnings(caught):
    return [str(w.message) for w in caught if str(w.message).startswith("conveyor")]


def fit(args):
    """Keras model.fit over two epochs of the dataset as the README makes it
    (prefetched by dataset() itself), on the default safe lifetime (the
    elements are the leased slots): no batch is copied out of its slot for
    want of credits (no warning), and Keras knows the steps per epoch."""
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
    credits_before = ld.credits
    ds = ctf.dataset(ld)
    steps = []

    class Steps(tf.keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            steps.append(self.params.get("steps"))

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        history = model.fit(ds, epochs=2, verbose=0, callbacks=[Steps()])
    state = ld.state_dict()
    ld.close()
    return {"loss": [float(v) for v in history.history["loss"]], "state": state,
            "cardinality": int(ds.cardinality()), "keras_steps": steps,
            "credits": [credits_before, ld.credits], "warnings": conveyor_warnings(caught),
            "lease": ld.lifetime}


def cardinality(args):
    """The dataset's asserted cardinality (batches per epoch x epochs,
    infinite for endless, unknown when resuming mid-epoch), what a pass
    that turns out shorter says, the credits dataset() leaves the loader
    with, and the prefetch it refuses."""
    out = {}
    ld = loader(args)
    out["batches_per_epoch"] = len(ld)
    for epochs in (1, 2, 0):
        out["epochs_%d" % epochs] = int(ctf.dataset(ld, num_epochs=epochs).cardinality())
    out["infinite"] = int(tf.data.INFINITE_CARDINALITY)
    out["unknown"] = int(tf.data.UNKNOWN_CARDINALITY)
    ctf.dataset(ld, prefetch=5)
    out["credits_prefetch_5"] = ld.credits
    out["credits_needed_5"] = ctf.credits_for(5)
    # A pass left early leaves the loader mid-epoch: the next pass of a
    # dataset asserting a full epoch says so at once.
    ds = ctf.dataset(ld, prefetch=0)
    out["first_pass"] = sum(1 for _ in ds.take(2))
    out["state_after_take"] = ld.state_dict()
    try:
        sum(1 for _ in ds)
        out["short_pass_error"] = None
    except tf.errors.OpError as e:
        out["short_pass_error"] = e.message
    # A dataset made mid-epoch (after load_state_dict) has an unknown
    # cardinality, and reads the rest of that epoch.
    resumed = ctf.dataset(ld)
    out["resumed_cardinality"] = int(resumed.cardinality())
    out["resumed_pass"] = sum(1 for _ in resumed)
    out["after_resumed"] = ld.state_dict()
    refused = []
    for bad in (tf.data.AUTOTUNE, -3, 1.5):
        try:
            ctf.dataset(ld, prefetch=bad)
            refused.append(None)
        except ValueError as e:
            refused.append(str(e))
    out["refused_prefetch"] = refused
    out["numpy_prefetch"] = int(ctf.dataset(ld, prefetch=np.int64(1)).cardinality())
    ld.close()
    return out


def main():
    return check_main.run({"spec": spec, "epoch": epoch, "pointers": pointers, "fit": fit,
                           "cardinality": cardinality})


if __name__ == "__main__":
    sys.exit(main())
