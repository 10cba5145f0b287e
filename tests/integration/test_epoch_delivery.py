"""Whole epochs through the Python client, against a real conveyord:
every sample exactly once, right labels, images byte-identical to the
in-process engine, over the unix socket (shared memory) and TCP (the data
socket, and inline in gRPC messages), and two concurrent ranks that split
the dataset."""

import mmap
import threading
import warnings

import numpy as np
import pytest
import torch

import conveyor
from conveyor._lease import SlotLease
from conveyor_integration import IMAGE_SIZE, engine_dump, read_epoch


def _check_epoch(got, samples):
    n = len(samples)
    assert sorted(got.indices.tolist()) == list(range(n)), "every sample exactly once"
    assert got.labels.tolist() == [samples[i][1] for i in got.indices], "labels from sorted folders"
    assert got.images.shape == (n, 3, IMAGE_SIZE, IMAGE_SIZE)
    assert got.images.dtype == np.uint8
    assert got.end.samples == n


@pytest.mark.parametrize("augment", ["train", "eval"])
def test_unix_epoch_is_complete_and_identical_to_engine(daemon, dataset, tmp_path, augment):
    root, samples = dataset
    got = read_epoch(daemon.unix, pipeline=augment, batch_size=8, seed=7, epoch=1)
    assert got.transport == "shared_memory"
    _check_epoch(got, samples)
    assert got.sizes.tolist() == [8] * 6
    ref = engine_dump(root, tmp_path / "ref.npz", batch_size=8, seed=7, epoch=1, augment=augment)
    np.testing.assert_array_equal(got.indices, ref["indices"])
    np.testing.assert_array_equal(got.labels, ref["labels"])
    np.testing.assert_array_equal(got.sizes, ref["batch_sizes"])
    assert got.images.tobytes() == ref["images"].tobytes(), "images differ from the engine's"


@pytest.mark.parametrize("transport, expected", [("auto", "data_socket"), ("inline", "inline")])
def test_tcp_epoch_is_complete_and_identical_to_engine(daemon, dataset, tmp_path, transport,
                                                       expected):
    root, samples = dataset
    got = read_epoch(daemon.tcp, pipeline="train", batch_size=16, seed=3, epoch=0,
                     transport=transport)
    assert got.transport == expected
    _check_epoch(got, samples)
    ref = engine_dump(root, tmp_path / "ref.npz", batch_size=16, seed=3, epoch=0)
    np.testing.assert_array_equal(got.indices, ref["indices"])
    assert got.images.tobytes() == ref["images"].tobytes(), "images differ from the engine's"


def test_shared_memory_batches_are_zero_copy_and_invalidated_on_release(daemon):
    loader = conveyor.Loader(daemon.unix, pipeline="train", batch_size=8, seed=1, credits=2)
    with loader.epoch(0) as stream:
        batch = next(stream)
        images = batch.images
        assert images.flags.writeable  # MAP_SHARED read-write: torch shares it
        base = images
        while getattr(base, "base", None) is not None and isinstance(base, np.ndarray):
            base = base.base
            if isinstance(base, SlotLease):  # lifetime="safe": the lease views the mapping
                base = base._backing
        if isinstance(base, memoryview):
            base = base.obj
        assert isinstance(base, mmap.mmap), "shared-memory images must view the mapping"
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            t = torch.from_numpy(images)
        assert t.data_ptr() == images.ctypes.data
        kept = batch.copy()
        second = next(stream)  # taking the next batch releases the first
        assert batch.released and not second.released
        with pytest.raises(conveyor.BatchReleasedError):
            batch.images
        assert kept.images.shape == (8, 3, IMAGE_SIZE, IMAGE_SIZE)
        second.release()
        with pytest.raises(conveyor.BatchReleasedError):
            second.images
    loader.close()


def test_two_ranks_concurrently_are_disjoint_and_cover(daemon, dataset):
    _, samples = dataset
    results, errors = {}, []
    barrier = threading.Barrier(2)

    def run(rank):
        try:
            loader = conveyor.Loader(daemon.unix, pipeline="train", batch_size=5, seed=11,
                                     rank=rank, world_size=2, credits=2)
            indices, batches = [], 0
            with loader.epoch(2) as stream:
                barrier.wait(timeout=30)  # both streams open before either reads
                for b in stream:
                    indices.extend(b.indices.tolist())
                    assert b.labels.tolist() == [samples[i][1] for i in b.indices]
                    batches += 1
            loader.close()
            results[rank] = (indices, batches, stream.batches_per_epoch)
        except BaseException as e:  # reported by the main thread
            errors.append(e)
            barrier.abort()

    threads = [threading.Thread(target=run, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    (i0, n0, bpe0), (i1, n1, bpe1) = results[0], results[1]
    assert len(i0) == len(i1) == len(samples) // 2
    assert not set(i0) & set(i1), "ranks must be disjoint"
    assert sorted(i0 + i1) == list(range(len(samples))), "ranks together cover the dataset"
    assert n0 == n1 == bpe0 == bpe1 == 5  # 24 samples per rank in batches of 5


def test_resume_from_state_dict_continues_exactly(daemon, dataset):
    """A loader restored from state_dict() delivers the rest of the epoch,
    identical to the uninterrupted stream."""
    full = read_epoch(daemon.unix, batch_size=8, seed=21, epoch=3)
    first = conveyor.Loader(daemon.unix, pipeline="train", batch_size=8, seed=21)
    with first.epoch(3) as stream:
        head = [next(stream).copy() for _ in range(2)]
    state = first.state_dict()
    first.close()
    assert state["epoch"] == 3 and state["offset"] == 16

    # credits 2 < the 4 remaining batches (short streams: see the next test)
    second = conveyor.Loader(daemon.unix, pipeline="train", batch_size=8, seed=0, credits=2)
    second.load_state_dict(state)
    tail = []
    with second.epoch(3) as stream:
        for b in stream:
            tail.append(b.copy())
    assert second.state_dict()["epoch"] == 4 and second.state_dict()["offset"] == 0
    second.close()
    got = head + tail
    assert np.concatenate([b.indices for b in got]).tolist() == full.indices.tolist()
    assert np.concatenate([b.images for b in got]).tobytes() == full.images.tobytes()


def test_stream_shorter_than_its_credits_still_hands_over_its_region(daemon, dataset):
    """A stream whose batches all fit in its credits may be fully produced
    (and its call finished) before the client asks for the memfd: the daemon
    must still hand the region over. Repeated, since it is a race."""
    _, samples = dataset
    for attempt in range(30):
        stream = conveyor.open_stream(daemon.unix, "train", 24, seed=attempt, credits=4)
        with stream:
            got = [b.indices.copy() for b in stream]
        assert sorted(np.concatenate(got).tolist()) == list(range(len(samples))), attempt
