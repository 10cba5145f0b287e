"""JAX side of tests/integration/test_jax_adapter.py, run in the jax virtual
environment's interpreter (scripts/venvs/jax.txt) against a daemon the test
started. Writes what it saw under --out (npz arrays, result.json) for the
test to compare with the plain Loader; a failed expectation exits non-zero
with a message.

    jax_checks.py epoch --server ADDR --transport T --out DIR
    jax_checks.py pointers --server ADDR --out DIR
    jax_checks.py shard --server ADDR --out DIR      (XLA_FLAGS: 4 CPU devices)
    jax_checks.py ranks --server ADDR --out DIR      ($RANK / $WORLD_SIZE: the test's)
"""

import os
import sys

import numpy as np

import check_main
import conveyor
import conveyor.jax as cjax
from conveyor._framework import views_keep_slot

import jax


def loader(args, **kw):
    kw.setdefault("batch_size", args.batch_size)
    return conveyor.Loader(args.server, pipeline=args.pipeline, seed=args.seed,
                           transport=args.transport, **kw)


def epoch(args):
    """One epoch through conveyor.jax.iterate (copy='auto'), every array
    kept until the end: a view the daemon refilled would show here."""
    ld = loader(args)
    kept = list(cjax.iterate(ld.epoch(0)))
    for x, y in kept:
        assert isinstance(x, jax.Array) and isinstance(y, jax.Array), (type(x), type(y))
    jax.block_until_ready(kept)
    np.savez(os.path.join(args.out, "epoch.npz"),
             images=np.concatenate([np.asarray(x) for x, _ in kept]),
             labels=np.concatenate([np.asarray(y) for _, y in kept]))
    ld.close()
    return {"batches": len(kept), "labels_dtype": str(kept[0][1].dtype),
            "images_dtype": str(kept[0][0].dtype)}


def pointers(args):
    """Where each conversion's buffer lies, batch by batch, while the batch
    is held: copy=False is the slot itself (DLPack, no copy)."""
    ld = loader(args)
    out = {"false": [], "true": [], "auto": [], "lease": []}
    with ld.epoch(0) as stream:
        for batch in stream:
            slot = batch.images.ctypes.data
            for mode, key in ((False, "false"), (True, "true"), ("auto", "auto")):
                x, _ = cjax.to_jax(batch, copy=mode)
                out[key].append(x.unsafe_buffer_pointer() == slot)
                np.testing.assert_array_equal(np.asarray(x), batch.images)
            out["lease"].append(views_keep_slot(batch))
    ld.close()
    return out


def shard(args):
    """Batches placed over the local devices along the batch axis: each
    device holds its slice of the batch, which equals the plain batch."""
    devices = jax.local_devices()
    sharding = cjax.batch_sharding()
    ld = loader(args)
    images, labels, shards = [], [], 0
    with ld.epoch(0) as stream:
        for batch in stream:
            x, y = cjax.to_jax(batch, sharding=sharding)
            for arr, ref in ((x, batch.images), (y, batch.labels)):
                assert arr.sharding == sharding, arr.sharding
                held = sorted(arr.addressable_shards, key=lambda s: s.device.id)
                assert [s.device for s in held] == sorted(devices, key=lambda d: d.id), held
                rows = ref.shape[0] // len(devices)
                starts = sorted(s.index[0].start for s in held)
                assert starts == [i * rows for i in range(len(devices))], starts
                for s in held:
                    assert s.data.shape[0] == rows, (s.data.shape, rows)
                    assert s.data.devices() == {s.device}, (s.data.devices(), s.device)
                    np.testing.assert_array_equal(np.asarray(s.data), ref[s.index])
                    shards += 1
            images.append(np.asarray(x))
            labels.append(np.asarray(y))
    # The same through iterate(), and a batch that cannot split evenly.
    again = [np.asarray(x) for x, _ in cjax.iterate(ld.epoch(0), sharding=sharding)]
    np.testing.assert_array_equal(np.concatenate(again), np.concatenate(images))
    uneven = None
    odd = loader(args, batch_size=len(devices) + 2)
    with odd.epoch(0) as stream:
        try:
            cjax.to_jax(next(stream), sharding=sharding)
        except ValueError as e:
            uneven = str(e)
    odd.close()
    ld.close()
    np.savez(os.path.join(args.out, "epoch.npz"), images=np.concatenate(images),
             labels=np.concatenate(labels))
    return {"devices": len(devices), "shards_checked": shards, "uneven_error": uneven}


def ranks(args):
    """conveyor.jax.loader under the real JAX, a single process: JAX's
    process_index()/process_count() (0 and 1) leave rank and world size to
    Loader's defaults (the environment's $RANK / $WORLD_SIZE, if any); the
    loader reads that rank's shard; given arguments win."""
    ld = cjax.loader(args.server, pipeline=args.pipeline, batch_size=args.batch_size,
                     seed=args.seed)
    indices = [int(i) for b in ld.epoch(0) for i in b.indices]
    given = cjax.loader(args.server, pipeline=args.pipeline, batch_size=args.batch_size,
                        rank=0, world_size=3)
    out = {"process": [jax.process_index(), jax.process_count()],
           "process_rank": cjax.process_rank(), "rank": [ld.rank, ld.world_size],
           "given": [given.rank, given.world_size], "indices": indices}
    ld.close()
    given.close()
    return out


def main():
    return check_main.run({"epoch": epoch, "pointers": pointers, "shard": shard, "ranks": ranks})


if __name__ == "__main__":
    sys.exit(main())
