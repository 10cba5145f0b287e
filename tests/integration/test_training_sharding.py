"""Sharding across nodes: a 4-node x 2-rank job simulated with 4 daemons on
loopback (one per "node", each on its own socket and port). A torchrun-like
launcher starts the 8 rank processes with RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE and CONVEYOR_SERVER (the node's daemon) in their
environment; the ranks build their Loader from the environment alone.

Every epoch every sample is delivered exactly once across all ranks (N a
multiple of W), every rank gets the same number of batches, and the
remainder rule - pad by wrapping or drop_last, a per-stream option set the
same on every rank - does what core/data/sampler.h says when W does not divide N.
Ranks on different daemons agree on the order and on the pixels: the
sampler and the augmentations are pure functions of (seed, epoch, sample).
"""

import subprocess
import textwrap

import numpy as np

import conveyor
from conveyor_integration import (PYTHON, client_env, daemon_config, pipeline_entry,
                                  write_list_file)

NODES, PER_NODE = 4, 2
WORLD = NODES * PER_NODE
SEED, BATCH, EPOCHS = 7, 4, 2
ODD = 45  # samples of the `odd` pipeline: not a multiple of 8

# One rank of the job. Everything about its place in the job comes from the
# environment, as under torchrun.
_RANK = textwrap.dedent("""
    import sys
    import numpy as np
    import conveyor
    out = {}
    for name, pipeline, drop_last in (("train", "train", False), ("odd_pad", "odd", False),
                                      ("odd_drop", "odd", True)):
        loader = conveyor.Loader(None, pipeline=pipeline, batch_size=%d, seed=%d,
                                 drop_last=drop_last)
        out["rank"], out["world"], out["local_rank"] = loader.rank, loader.world_size, loader.local_rank
        batches = []
        with loader.stream(num_epochs=%d, first_epoch=0) as stream:
            for b in stream:
                batches.append((b.epoch, b.indices.copy(), np.array(b.images)))
            out[name + "_ends"] = np.array([m.epoch for m in stream.epoch_ends])
        out[name + "_epochs"] = np.array([e for e, _, _ in batches])
        out[name + "_sizes"] = np.array([len(i) for _, i, _ in batches])
        out[name + "_indices"] = np.concatenate([i for _, i, _ in batches])
        out[name + "_images"] = np.concatenate([x for _, _, x in batches])
        loader.close()
    np.savez(sys.argv[1], **out)
""" % (BATCH, SEED, EPOCHS))


def _launch(daemons, tmp_path):
    """Starts all ranks at once (rank = node * PER_NODE + local rank, each
    talking to its node's daemon) and returns their results by rank."""
    procs = []
    for node, d in enumerate(daemons):
        for local in range(PER_NODE):
            rank = node * PER_NODE + local
            env = client_env()
            env.update(RANK=str(rank), WORLD_SIZE=str(WORLD), LOCAL_RANK=str(local),
                       LOCAL_WORLD_SIZE=str(PER_NODE), GROUP_RANK=str(node),
                       CONVEYOR_SERVER=d.unix)
            out = tmp_path / ("rank%d.npz" % rank)
            procs.append((rank, out, subprocess.Popen([PYTHON, "-c", _RANK, str(out)], env=env,
                                                      stdout=subprocess.PIPE,
                                                      stderr=subprocess.STDOUT, text=True)))
    results = {}
    for rank, out, p in procs:
        text, _ = p.communicate(timeout=300)
        assert p.returncode == 0, "rank %d failed:\n%s" % (rank, text)
        with np.load(out) as z:
            results[rank] = {k: z[k] for k in z.files}
    return results


def _global_order(address, pipeline, epoch):
    """P of `epoch` (world size 1) and the pixels of every sample."""
    loader = conveyor.Loader(address, pipeline=pipeline, batch_size=BATCH, seed=SEED, rank=0,
                             world_size=1)
    order, pixels = [], {}
    with loader.epoch(epoch) as stream:
        for b in stream:
            for i, img in zip(b.indices.tolist(), b.images):
                order.append(i)
                pixels[i] = img.tobytes()
    loader.close()
    return order, pixels


def test_four_nodes_two_ranks_each_two_epochs(daemon_factory, dataset, tmp_path):
    root, samples = dataset
    n = len(samples)
    assert n % WORLD == 0
    lists = tmp_path / "lists"
    lists.mkdir()
    odd_list = write_list_file(lists / "odd.txt", samples[:ODD])
    cfg = daemon_config(root, pipelines={
        "train": pipeline_entry(root),
        "odd": pipeline_entry(root, dataset={"list": str(odd_list), "root": str(root)}),
    }, allowed_roots=[str(root.parent), str(lists)])
    daemons = [daemon_factory(cfg, name="node%d" % k, threads=1) for k in range(NODES)]
    assert len({d.unix for d in daemons}) == NODES and len({d.port for d in daemons}) == NODES

    results = _launch(daemons, tmp_path)
    assert sorted(results) == list(range(WORLD))
    for rank, res in results.items():
        assert (int(res["rank"]), int(res["world"]), int(res["local_rank"])) == (
            rank, WORLD, rank % PER_NODE)

    cases = {"train": ("train", n, False), "odd_pad": ("odd", ODD, False),
             "odd_drop": ("odd", ODD, True)}
    for name, (pipeline, size, drop_last) in cases.items():
        per_rank = size // WORLD if drop_last else -(-size // WORLD)
        for epoch in range(EPOCHS):
            # The reference order and pixels come from node 0's daemon; every
            # rank on every node must agree with them.
            perm, pixels = _global_order(daemons[0].unix, pipeline, epoch)
            assert sorted(perm) == list(range(size))
            got, batches = {}, set()
            for rank, res in results.items():
                sel = np.repeat(res[name + "_epochs"], res[name + "_sizes"]) == epoch
                got[rank] = res[name + "_indices"][sel].tolist()
                batches.add(int((res[name + "_epochs"] == epoch).sum()))
                for i, img in zip(got[rank], res[name + "_images"][sel]):
                    assert img.tobytes() == pixels[i], (name, epoch, rank, i)
                assert res[name + "_ends"].tolist() == list(range(EPOCHS))
            assert batches == {-(-per_rank // BATCH)}, (name, epoch, batches)
            for rank in range(WORLD):
                # Rank r's k-th sample is G[k * W + r], G[p] = P[p mod N].
                assert got[rank] == [perm[(k * WORLD + rank) % size] for k in range(per_rank)], \
                    (name, epoch, rank)
            union = sorted(i for r in got for i in got[r])
            if name == "train":
                assert union == list(range(size)), "every sample exactly once per epoch"
            elif drop_last:
                assert union == sorted(perm[:WORLD * per_rank]), "the tail of P is dropped"
            else:
                pad = WORLD * per_rank - size
                assert union == sorted(perm + perm[:pad]), "the padding wraps to P's start"
        # A new order every epoch.
        assert _global_order(daemons[0].unix, pipeline, 0)[0] != \
            _global_order(daemons[0].unix, pipeline, 1)[0]
