"""Batch memory lives as long as anything references it.

By default (lifetime="safe") a batch's images view the daemon's slot (shared
memory, or the data socket's buffer of that slot) through a lease: the
Release goes back only when the batch was released AND the last array,
tensor or DLPack capsule viewing it is gone, so a kept tensor is never
overwritten. Once arrays of released batches hold all credits but one, the
client copies further batches into private memory (and gives their slots back
at once) instead of waiting for a batch the daemon cannot send.
lifetime="fast" is the old zero-copy fast path: the slot goes back when the
next batch is taken, whatever still views it.
"""

import gc
import warnings

import numpy as np
import pytest
import torch

import conveyor
from conveyor_integration import wait_until

TRANSPORTS = [("unix", "shared_memory"), ("tcp", "data_socket")]


def _address(daemon, where):
    return daemon.unix if where == "unix" else daemon.tcp


def _slots_held(daemon, stream_id):
    for s in conveyor.stats(daemon.unix).streams:
        if s.stream_id == stream_id:
            return s.slots_held_by_client
    return None


@pytest.mark.parametrize("where,transport", TRANSPORTS)
def test_kept_tensors_keep_their_images(daemon, where, transport):
    """The issue's case: torch.from_numpy(batch.images) kept across
    iterations (the default auto-release loop). Every kept tensor still holds
    the images of its own batch at the end of the epoch."""
    loader = conveyor.Loader(_address(daemon, where), pipeline="train", batch_size=8, seed=3,
                             credits=4)
    kept, copies = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the copy notice, tested below
        with loader.epoch(0) as stream:
            assert stream.transport == transport
            for batch in stream:
                kept.append(torch.from_numpy(batch.images))
                copies.append(batch.images.copy())
    loader.close()
    assert len(kept) == 6
    bad = [i for i, (t, c) in enumerate(zip(kept, copies)) if not np.array_equal(t.numpy(), c)]
    assert bad == [], "kept tensors %s hold another batch's images" % bad


@pytest.mark.parametrize("where,transport", TRANSPORTS)
def test_copies_once_released_batches_hold_the_credits(daemon, where, transport):
    """All but one credit held by kept arrays: later batches are private
    copies (stream.copied_batches), the stream never waits for a slot the
    user holds, and the client says so once."""
    loader = conveyor.Loader(_address(daemon, where), pipeline="train", batch_size=4, seed=1,
                             credits=3)
    kept = []
    with pytest.warns(RuntimeWarning, match="copied"):
        with loader.stream(num_epochs=2) as stream:
            for batch in stream:
                kept.append((batch.images, batch.images.copy()))
            copied = stream.copied_batches
    loader.close()
    assert len(kept) == 24
    # Two leased batches stay views of their slots; every later one is a copy.
    assert copied == 22, copied
    for i, (arr, ref) in enumerate(kept):
        assert np.array_equal(arr, ref), "batch %d changed" % i


def test_slot_goes_back_when_the_last_view_is_gone(daemon):
    """auto_release=False: release() with a view still alive keeps the slot
    the client's (GetStats' slots_held_by_client), dropping the view gives it
    back."""
    stream = conveyor.open_stream(daemon.unix, "train", 8, num_epochs=0, credits=2,
                                  auto_release=False)
    try:
        batch = next(stream)
        view = batch.images[1:3]  # a view of a view: the lease still holds
        ref = view.copy()
        assert wait_until(lambda: _slots_held(daemon, stream.stream_id) == 2, 10)
        batch.release()
        with pytest.raises(conveyor.BatchReleasedError):
            batch.images
        del batch
        gc.collect()
        # The second batch is taken and released: its slot goes back, the
        # first one's stays held by `view`.
        second = next(stream)
        second.release()
        del second
        assert wait_until(lambda: _slots_held(daemon, stream.stream_id) == 2, 10)
        assert stream.leased == 1
        third = next(stream)
        third.release()
        del third
        assert np.array_equal(view, ref)
        assert stream.leased == 1
        del view
        assert stream.leased == 0
        # Both credits are free again: the daemon refills them.
        assert wait_until(lambda: _slots_held(daemon, stream.stream_id) == 2, 10)
        assert next(stream).num_samples == 8
    finally:
        stream.close()


def test_all_credits_held_by_views_is_a_clear_error(daemon):
    """credits=1 and the previous batch's array kept: the one slot is the
    user's, so the next batch can never come - an error saying so, not a
    hang."""
    loader = conveyor.Loader(daemon.unix, pipeline="train", batch_size=8, credits=1)
    with loader.epoch(0) as stream:
        first = next(stream).images
        with pytest.raises(conveyor.ConveyorError, match="credit.*still referenced"):
            next(stream)
    del first
    loader.close()


def test_fast_path_releases_on_the_next_batch(daemon):
    """lifetime="fast": the previous slot goes back when the next batch is
    taken even though its array is kept (no lease, no copy): with 2 credits
    the slots alternate and a kept array sees later batches' images."""
    loader = conveyor.Loader(daemon.unix, pipeline="train", batch_size=8, seed=3, credits=2,
                             lifetime="fast")
    kept, copies, slots = [], [], []
    with loader.epoch(0) as stream:
        for batch in stream:
            kept.append(batch.images)
            copies.append(batch.images.copy())
            slots.append(batch.slot)
            assert stream.leased == 0
        assert stream.copied_batches == 0
    loader.close()
    assert len(set(slots)) == 2 and len(slots) == 6, slots
    # The last batch of each slot is what both of its arrays show now.
    changed = [i for i in range(len(kept)) if not np.array_equal(kept[i], copies[i])]
    assert changed, "fast path: views of reused slots show the newer batch"


def test_bad_lifetime_is_refused():
    with pytest.raises(conveyor.InvalidRequest, match="lifetime"):
        conveyor.Loader("unix:///nonexistent.sock", pipeline="p", batch_size=1, lifetime="keep")


def test_copied_batches_held_unreleased_are_counted_apart(daemon):
    """auto_release=False with a kept view: later batches are copies that
    reuse one slot. Each is still a batch the caller holds until it releases
    it (stream.held), releasing one leaves the other held, and copies - whose
    slots went back at arrival - do not count against the credits."""
    stream = conveyor.open_stream(daemon.unix, "train", 8, num_epochs=0, credits=2,
                                  auto_release=False)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            first = next(stream)
            view = first.images
            first.release()
            b, c = next(stream), next(stream)
            assert stream.copied_batches == 2 and b.slot == c.slot
            assert stream.held == 2 and stream.leased == 1
            b.release()
            assert stream.held == 1 and not c.released
            d = next(stream)  # c holds no slot: not a credit
            assert stream.held == 2
            c.release()
            d.release()
            assert stream.held == 0
        del view
        assert stream.leased == 0
    finally:
        stream.close()
