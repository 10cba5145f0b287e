"""Exact and elastic resume.

Exact: Loader.state_dict() / load_state_dict() capture (pipeline, seed,
epoch, offset, world_size). Resuming after the trainer process restarts, or
after the daemon is SIGKILLed and restarted, yields exactly the batches not
yet consumed, byte-identical (random augmentations included) to an
uninterrupted run. Batches the daemon had sent but the trainer had not taken
are not lost: the position is what the trainer took.

Elastic: a state saved at world size W loads at W'. The rest of the epoch,
P[offset..N) of the epoch's global permutation P, is dealt round-robin over
the W' ranks (rank r' gets P[offset + r'], P[offset + r' + W'], ...): exactly
once when W' divides N - offset, else padded by wrapping to the start of P
(or, with drop_last, the last (N - offset) mod W' left out). The next epoch
starts fresh at W'. See core/data/sampler.h.
"""

import json
import subprocess
import textwrap

import numpy as np
import pytest

import conveyor
from conveyor_integration import PYTHON, client_env, collect, daemon_config

SEED = 3


def _loader(address, rank=0, world_size=1, batch_size=8, **kw):
    return conveyor.Loader(address, pipeline="train", batch_size=batch_size, seed=SEED, rank=rank,
                           world_size=world_size, **kw)


def _reference(address, epochs, first_epoch=0, batch_size=8):
    """The uninterrupted single-rank run: Batch copies."""
    loader = _loader(address, batch_size=batch_size)
    with loader.stream(num_epochs=epochs, first_epoch=first_epoch) as stream:
        ref = [b.copy() for b in stream]
    loader.close()
    return ref


def _permutation(ref, epoch):
    """P of `epoch`: at world size 1 the rank's order is the global order."""
    return np.concatenate([b.indices for b in ref if b.epoch == epoch]).tolist()


def _pixels_by_index(ref, epoch):
    out = {}
    for b in ref:
        if b.epoch == epoch:
            for i, img in zip(b.indices.tolist(), b.images):
                out[i] = img.tobytes()
    return out


def _assert_identical(got, ref):
    gi, gl, gx = collect(got)
    ri, rl, rx = collect(ref)
    assert gi.tolist() == ri.tolist()
    assert gl.tolist() == rl.tolist()
    assert gx.tobytes() == rx.tobytes(), "pixels differ from the uninterrupted run"
    assert [(b.epoch, b.offset) for b in got] == [(b.epoch, b.offset) for b in ref]


# --- the state ---------------------------------------------------------------
def test_state_dict_holds_pipeline_seed_epoch_offset_world_size(daemon):
    loader = _loader(daemon.unix, rank=1, world_size=2)
    with loader.epoch(0) as stream:
        next(stream)
        next(stream)
    state = loader.state_dict()
    assert state == {"pipeline": "train", "seed": SEED, "epoch": 0, "offset": 32,
                     "world_size": 2}
    json.dumps(state)  # plain values: goes into any checkpoint format
    other = conveyor.Loader(daemon.unix, pipeline="eval", batch_size=8)
    with pytest.raises(conveyor.InvalidRequest, match=r"pipeline 'train'.*'eval'"):
        other.load_state_dict(state)
    loader.close()
    other.close()


# --- exact resume ------------------------------------------------------------
_TRAINER = textwrap.dedent("""
    import json, os, signal, sys
    import numpy as np
    import conveyor
    address, state_path, out, take = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    loader = conveyor.Loader(address, pipeline="train", batch_size=8, seed=%d, credits=4)
    epochs = 2
    if os.path.exists(state_path):
        with open(state_path) as f:
            loader.load_state_dict(json.load(f))
    got = []
    with loader.stream(num_epochs=epochs - loader.current_epoch) as stream:
        for b in stream:
            got.append((b.indices.copy(), b.labels.copy(), np.array(b.images), b.epoch, b.offset))
            if take and len(got) == take:
                break
    np.savez(out, indices=np.concatenate([g[0] for g in got]),
             labels=np.concatenate([g[1] for g in got]),
             images=np.concatenate([g[2] for g in got]),
             epochs=np.array([g[3] for g in got]), offsets=np.array([g[4] for g in got]))
    if take:
        with open(state_path, "w") as f:
            json.dump(loader.state_dict(), f)   # the checkpoint
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)    # the trainer crashes
""" % SEED)


def test_resume_after_trainer_process_restart_is_byte_identical(daemon, tmp_path):
    """A trainer process takes 8 batches (epoch 0, then 2 of epoch 1; with 4
    credits the daemon had sent it more), checkpoints and dies by SIGKILL.
    A new process loads the checkpoint and gets exactly the rest."""
    ref = _reference(daemon.unix, epochs=2)
    assert len(ref) == 12
    state = tmp_path / "state.json"
    runs = []
    for i, take in enumerate((8, 0)):
        out = tmp_path / ("run%d.npz" % i)
        p = subprocess.run([PYTHON, "-c", _TRAINER, daemon.unix, str(state), str(out), str(take)],
                           env=client_env(), capture_output=True, text=True, timeout=120)
        assert p.returncode == (-9 if take else 0), p.stderr
        with np.load(out) as z:
            runs.append({k: z[k] for k in z.files})
    saved = json.loads(state.read_text())
    assert saved == {"pipeline": "train", "seed": SEED, "epoch": 1, "offset": 16, "world_size": 1}
    ri, rl, rx = collect(ref)
    assert np.concatenate([r["indices"] for r in runs]).tolist() == ri.tolist()
    assert np.concatenate([r["labels"] for r in runs]).tolist() == rl.tolist()
    assert np.concatenate([r["images"] for r in runs]).tobytes() == rx.tobytes()
    assert (np.concatenate([r["offsets"] for r in runs]).tolist()
            == [b.offset for b in ref])


def test_resume_after_daemon_sigkill_is_byte_identical(daemon_factory, dataset, restart_daemon):
    root, _ = dataset
    d = daemon_factory(daemon_config(root), name="resume-kill", tcp=False)
    ref = _reference(d.unix, epochs=2)
    loader = _loader(d.unix, credits=4)
    stream = loader.stream(num_epochs=2)
    got = [next(stream).copy() for _ in range(3)]
    state = loader.state_dict()
    assert (state["epoch"], state["offset"]) == (0, 24)
    d.proc.kill()
    d.proc.wait()
    with pytest.raises(conveyor.Unavailable):
        for _ in stream:  # batches already received may still come; then the error
            pass
    stream.close()
    loader.close()

    d2 = restart_daemon(d)
    assert d2.socket_path == d.socket_path
    loader = _loader(d2.unix, credits=3)
    loader.load_state_dict(state)
    with loader.stream(num_epochs=2 - loader.current_epoch) as stream:
        got += [b.copy() for b in stream]
    loader.close()
    _assert_identical(got, ref)


# --- elastic resume ----------------------------------------------------------
def _take(address, world, steps, epoch, batch_size=4, **kw):
    """Every rank of a `world`-rank job takes `steps` batches of `epoch`.
    Returns (the batches of each rank, the state every rank saved)."""
    taken, states = [], []
    for r in range(world):
        loader = _loader(address, rank=r, world_size=world, batch_size=batch_size, **kw)
        with loader.epoch(epoch) as stream:
            taken.append([next(stream).copy() for _ in range(steps)])
        states.append(loader.state_dict())
        loader.close()
    assert all(s == states[0] for s in states), "ranks in step save the same state"
    return taken, states[0]


def _resume(address, world, state, batch_size=4, epochs=2, **kw):
    """Every rank of a `world`-rank job loads `state` and runs the rest of
    its epoch plus `epochs - 1` more. Returns {rank: {epoch: [batches]}}."""
    out = {}
    for r in range(world):
        loader = _loader(address, rank=r, world_size=world, batch_size=batch_size, **kw)
        loader.load_state_dict(state)
        per = out.setdefault(r, {})
        with loader.stream(num_epochs=epochs) as stream:
            for b in stream:
                per.setdefault(b.epoch, []).append(b.copy())
        loader.close()
    return out


def _indices(batches):
    return np.concatenate([b.indices for b in batches]).tolist() if batches else []


@pytest.mark.parametrize("old_world,new_world,steps", [(4, 2, 1), (2, 3, 3)])
def test_elastic_resume_delivers_the_rest_exactly_once(daemon, dataset, old_world, new_world,
                                                       steps):
    """W -> W' where W' divides the rest: the rest of the epoch goes once over
    the new ranks (the union with what the old ranks took is the dataset,
    once); the next epoch is a fresh one at W'. Pixels of every sample equal
    the reference's (augmentations depend on seed, epoch and sample only)."""
    _, samples = dataset
    n, epoch, batch = len(samples), 5, 4
    ref = _reference(daemon.unix, epochs=2, first_epoch=epoch)
    perm, perm_next = _permutation(ref, epoch), _permutation(ref, epoch + 1)
    pixels = {e: _pixels_by_index(ref, e) for e in (epoch, epoch + 1)}

    taken, state = _take(daemon.unix, old_world, steps, epoch, batch_size=batch)
    offset = steps * batch * old_world
    assert state == {"pipeline": "train", "seed": SEED, "epoch": epoch, "offset": offset,
                     "world_size": old_world}
    assert (n - offset) % new_world == 0
    before = [i for rank in taken for i in _indices(rank)]
    assert sorted(before) == sorted(perm[:offset])

    after = _resume(daemon.unix, new_world, state, batch_size=batch)
    rest = {r: _indices(after[r][epoch]) for r in range(new_world)}
    # The documented rule, rank by rank: P[offset + r + k W'].
    for r in range(new_world):
        assert rest[r] == perm[offset + r::new_world], r
    assert len({len(after[r][epoch]) for r in range(new_world)}) == 1, "same batches per rank"
    union = before + [i for r in range(new_world) for i in rest[r]]
    assert sorted(union) == list(range(n)), "nothing lost, nothing repeated"
    # The next epoch starts fresh at W'.
    nxt = {r: _indices(after[r][epoch + 1]) for r in range(new_world)}
    for r in range(new_world):
        assert nxt[r] == perm_next[r::new_world], r
    assert sorted(i for r in nxt for i in nxt[r]) == list(range(n))
    for r in range(new_world):
        for e in (epoch, epoch + 1):
            for b in after[r][e]:
                for i, img in zip(b.indices.tolist(), b.images):
                    assert img.tobytes() == pixels[e][i], (r, e, i)


@pytest.mark.parametrize("drop_last", [False, True])
def test_elastic_resume_remainder_is_padded_or_dropped_as_documented(daemon, dataset, drop_last):
    """2 -> 3 at offset 16 of 48: the rest (32 samples) does not divide by 3.
    Padding: 11 per rank, 33 positions, the extra one wraps to P[0] (a sample
    the old ranks already took this epoch). drop_last: 10 per rank, the last
    two of P left out of this epoch."""
    _, samples = dataset
    n, epoch, batch = len(samples), 7, 4
    ref = _reference(daemon.unix, epochs=1, first_epoch=epoch)
    perm = _permutation(ref, epoch)
    taken, state = _take(daemon.unix, 2, 2, epoch, batch_size=batch, drop_last=drop_last)
    offset = 16
    assert state["offset"] == offset
    after = _resume(daemon.unix, 3, state, batch_size=batch, epochs=1, drop_last=drop_last)
    rest = {r: _indices(after[r][epoch]) for r in range(3)}
    per_rank = (n - offset) // 3 if drop_last else -(-(n - offset) // 3)
    assert per_rank == (10 if drop_last else 11)
    for r in range(3):
        assert rest[r] == [perm[(offset + r + 3 * k) % n] for k in range(per_rank)], r
    union = sorted(i for r in rest for i in rest[r])
    if drop_last:
        assert union == sorted(perm[offset:n - 2])
        assert set(perm[n - 2:]).isdisjoint(union)
    else:
        assert union == sorted(perm[offset:] + perm[:1]), "the padding is P[0], once more"
