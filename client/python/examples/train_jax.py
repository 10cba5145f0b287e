#!/usr/bin/env python3
"""Trains a small CNN with plain jax.grad on CPU, fed by conveyord through
conveyor.jax, and prints per step the time spent waiting for data against
the time spent computing.

    train_jax.py --server unix:///run/conveyor/conveyor.sock --pipeline train \
        --batch-size 32 --steps 50

Needs JAX (pip install 'jax[cpu]'; the project's scripts/venv.sh jax makes
an environment with it). --devices N shards each batch over N local devices
along the batch axis (on CPU: XLA_FLAGS=--xla_force_host_platform_device_count=N).
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import conveyor  # noqa: E402
import conveyor.jax as cjax  # noqa: E402
from conveyor._proto.v1 import conveyor_pb2 as pb  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402


def init_params(key, channels, num_classes):
    k1, k2, k3 = jax.random.split(key, 3)

    def he(k, shape, fan_in):
        return jax.random.normal(k, shape, jnp.float32) * jnp.sqrt(2.0 / fan_in)

    return {"conv1": he(k1, (16, channels, 3, 3), channels * 9), "b1": jnp.zeros(16),
            "conv2": he(k2, (32, 16, 3, 3), 16 * 9), "b2": jnp.zeros(32),
            "dense": he(k3, (32, num_classes), 32), "b3": jnp.zeros(num_classes)}


def make_step(layout, lr):
    # Images stay in the pipeline's layout; the convolutions are told which.
    dims = ("NCHW", "OIHW", "NCHW") if layout == "nchw" else ("NHWC", "OIHW", "NHWC")
    channel_axis = 1 if layout == "nchw" else 3
    bias_shape = (1, -1, 1, 1) if layout == "nchw" else (1, 1, 1, -1)

    def conv(x, w, b):
        y = jax.lax.conv_general_dilated(x, w, window_strides=(2, 2), padding="SAME",
                                         dimension_numbers=dims)
        return jax.nn.relu(y + b.reshape(bias_shape))

    def loss_fn(params, images, labels):
        x = images.astype(jnp.float32) / 255.0
        x = conv(x, params["conv1"], params["b1"])
        x = conv(x, params["conv2"], params["b2"])
        spatial = tuple(a for a in (1, 2, 3) if a != channel_axis)
        x = x.mean(axis=spatial)                       # global average pool
        logits = x @ params["dense"] + params["b3"]
        onehot = jax.nn.one_hot(labels, logits.shape[-1])
        return -(jax.nn.log_softmax(logits) * onehot).sum(axis=-1).mean()

    @jax.jit
    def step(params, images, labels):
        loss, grads = jax.value_and_grad(loss_fn)(params, images, labels)
        return jax.tree_util.tree_map(lambda p, g: p - lr * g, params, grads), loss

    return step


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", default=os.environ.get("CONVEYOR_SERVER",
                                                       "unix:///run/conveyor/conveyor.sock"))
    ap.add_argument("--pipeline", required=True)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--devices", type=int, default=0,
                    help="shard each batch over this many local devices (0: no sharding)")
    args = ap.parse_args()

    loader = conveyor.Loader(args.server, pipeline=args.pipeline, batch_size=args.batch_size,
                             seed=args.seed, drop_last=True)
    info = loader.pipeline_info()
    layout = "nchw" if info.layout == pb.NCHW else "nhwc"
    channels = info.sample_shape[0] if layout == "nchw" else info.sample_shape[-1]
    params = init_params(jax.random.PRNGKey(args.seed), channels, max(info.num_classes, 2))
    step = make_step(layout, args.lr)
    sharding = (cjax.batch_sharding(jax.local_devices()[:args.devices]) if args.devices
                else None)

    waits, computes = [], []
    batches = cjax.iterate(loader.stream(num_epochs=0), sharding=sharding)  # endless
    try:
        for n in range(args.steps):
            t0 = time.perf_counter()
            images, labels = next(batches)       # data wait: the daemon's batch, as jax.Arrays
            t1 = time.perf_counter()
            params, loss = step(params, images, labels)
            loss = float(loss)                   # waits for the step to finish
            t2 = time.perf_counter()
            waits.append(t1 - t0)
            computes.append(t2 - t1)
            print("step %d: loss %.4f, data wait %.2f ms, compute %.2f ms%s"
                  % (n, loss, 1e3 * waits[-1], 1e3 * computes[-1],
                     " (includes compiling)" if n == 0 else ""), flush=True)
    finally:
        batches.close()
        loader.close()
    later = slice(1, None) if len(waits) > 1 else slice(None)  # step 0 compiles
    print("mean data wait %.2f ms/step, compute %.2f ms/step over steps %d..%d"
          % (1e3 * sum(waits[later]) / len(waits[later]),
             1e3 * sum(computes[later]) / len(computes[later]),
             later.start or 0, len(waits) - 1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
