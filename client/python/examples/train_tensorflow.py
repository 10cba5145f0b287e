#!/usr/bin/env python3
"""Trains a small Keras CNN with model.fit on CPU, fed by conveyord through
conveyor.tensorflow, and prints per step the time spent waiting for data
against the time spent computing.

    train_tensorflow.py --server unix:///run/conveyor/conveyor.sock --pipeline train \
        --batch-size 32 --steps 50

Needs TensorFlow (pip install tensorflow-cpu; the project's
scripts/venv.sh tensorflow makes an environment with it). The dataset is
not prefetched here (prefetch=0), so that a step's time splits cleanly into
the wait for the daemon's batch and the computation; a real job keeps
dataset()'s default prefetch=2.
"""
import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import conveyor  # noqa: E402
import conveyor.tensorflow as ctf  # noqa: E402
from conveyor._proto.v1 import conveyor_pb2 as pb  # noqa: E402

import tensorflow as tf  # noqa: E402


class TimedLoader:
    """The loader as conveyor.tensorflow.dataset sees it (pipeline_info,
    stream), timing how long each batch takes to come from the daemon."""

    def __init__(self, loader):
        self.loader = loader
        self.waits = []

    def pipeline_info(self):
        return self.loader.pipeline_info()

    def stream(self, num_epochs):
        with self.loader.stream(num_epochs=num_epochs) as stream:
            while True:
                t0 = time.perf_counter()
                batch = next(stream, None)
                self.waits.append(time.perf_counter() - t0)
                if batch is None:
                    return
                yield batch


class StepTimes(tf.keras.callbacks.Callback):
    """Per step: the data wait (TimedLoader) and the rest of the step."""

    def __init__(self, timed):
        super().__init__()
        self.timed = timed
        self.steps = []

    def on_train_batch_begin(self, batch, logs=None):
        self.begin = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        total = time.perf_counter() - self.begin
        wait = self.timed.waits[-1] if self.timed.waits else 0.0
        self.steps.append((wait, max(total - wait, 0.0)))
        print("step %d: loss %.4f, data wait %.2f ms, compute %.2f ms%s"
              % (len(self.steps) - 1, logs["loss"], 1e3 * wait, 1e3 * self.steps[-1][1],
                 " (includes tracing)" if len(self.steps) == 1 else ""), flush=True)


def build_model(info):
    layout = "nchw" if info.layout == pb.NCHW else "nhwc"
    inputs = tf.keras.Input(shape=tuple(info.sample_shape),
                            dtype=ctf.element_spec(info)[0].dtype)
    x = tf.keras.layers.Rescaling(1 / 255)(inputs) if info.dtype == pb.UINT8 else inputs
    if layout == "nchw":
        x = tf.keras.layers.Permute((2, 3, 1))(x)  # TensorFlow's CPU convolutions want NHWC
    x = tf.keras.layers.Conv2D(16, 3, strides=2, padding="same", activation="relu")(x)
    x = tf.keras.layers.Conv2D(32, 3, strides=2, padding="same", activation="relu")(x)
    x = tf.keras.layers.GlobalAveragePooling2D()(x)
    outputs = tf.keras.layers.Dense(max(info.num_classes, 2))(x)
    model = tf.keras.Model(inputs, outputs)
    model.compile(optimizer=tf.keras.optimizers.SGD(0.05),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", default=os.environ.get("CONVEYOR_SERVER",
                                                       "unix:///run/conveyor/conveyor.sock"))
    ap.add_argument("--pipeline", required=True)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    loader = conveyor.Loader(args.server, pipeline=args.pipeline, batch_size=args.batch_size,
                             seed=args.seed)
    timed = TimedLoader(loader)
    times = StepTimes(timed)
    try:
        model = build_model(loader.pipeline_info())
        ds = ctf.dataset(timed, num_epochs=0, prefetch=0)  # endless: fit stops after --steps
        model.fit(ds, epochs=1, steps_per_epoch=args.steps, callbacks=[times], verbose=0)
    finally:
        loader.close()
    later = times.steps[1:] or times.steps  # step 0 traces the graph
    print("mean data wait %.2f ms/step, compute %.2f ms/step over steps %d..%d"
          % (1e3 * sum(w for w, _ in later) / len(later),
             1e3 * sum(c for _, c in later) / len(later),
             len(times.steps) - len(later), len(times.steps) - 1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
