"""A client that stops reading costs only its credits: the daemon produces no
more than `credits` of its batches, another client beside it reads every
epoch it asks for, and the daemon's memory is what its own accounting says
(two streams' slots), returning to one stream's when the reader leaves.

Nothing here is timed: the checks are counts (GetStats' per-stream batches
and stage items, slot_bytes_in_use, memfd mappings in /proc/PID/maps) and,
for a daemon not built with a sanitizer, a generous RSS bound that only a
real leak (memory growing with the batches read) would exceed.
"""

import threading

import pytest

import conveyor
from conveyor_integration import (daemon_config, pipeline_entry, skip_rss_check_if_sanitized,
                                  wait_until)

MiB = 1 << 20


def _stream_stats(address, stream_id):
    for s in conveyor.stats(address).streams:
        if s.stream_id == stream_id:
            return s
    raise AssertionError("stream %d not in GetStats" % stream_id)


def _work(address, stream_id):
    """(batches emitted, {stage: items_in}) of one stream: what the workers
    have done for it."""
    s = _stream_stats(address, stream_id)
    return s.batches_emitted, {st.name: st.items_in for st in s.stages}


def test_stalled_client_costs_only_its_credits(daemon_factory, dataset):
    root, samples = dataset
    # The stalled client reads full-size (224 px) batches: were it not held to
    # its credits, the daemon would fill memory with them.
    d = daemon_factory(daemon_config(root, pipelines={
        "train": pipeline_entry(root), "big": pipeline_entry(root, size=224)}), name="stall")
    B, C, EPOCHS = 16, 4, 20
    loader = conveyor.Loader(d.unix, pipeline="train", batch_size=B, seed=5, credits=C)
    with loader.stream(num_epochs=2, first_epoch=0) as stream:  # warm-up
        assert sum(b.num_samples for b in stream) == 2 * len(samples)
    assert wait_until(d.idle, 10), conveyor.stats(d.unix)
    assert wait_until(lambda: d.memfd_mappings() == [], 10), d.memfd_mappings()
    baseline_rss = d.rss_bytes()

    stalled = conveyor.open_stream(d.unix, "big", 32, num_epochs=0, credits=C,
                                   auto_release=False)
    try:
        held = [next(stalled) for _ in range(C)]
        assert stalled.held == C
        # Asking for more than the credits is refused by the client, not a hang.
        with pytest.raises(conveyor.ConveyorError, match="credits"):
            next(stalled)
        # Every slot is the client's: the stream produced exactly its credits.
        assert wait_until(lambda: _stream_stats(d.unix, stalled.stream_id).slots_held_by_client
                          == C, 10)
        stalled_work = _work(d.unix, stalled.stream_id)
        assert stalled_work[0] == C, stalled_work
        st = conveyor.stats(d.unix)
        assert st.slot_bytes_in_use >= stalled.region_bytes, st

        peak = [0]
        stop = threading.Event()

        def sample_rss():
            while not stop.is_set():
                peak[0] = max(peak[0], d.rss_bytes())
                stop.wait(0.02)

        sampler = threading.Thread(target=sample_rss, daemon=True)
        sampler.start()
        try:
            images = 0
            with loader.stream(num_epochs=EPOCHS, first_epoch=0) as stream:
                for i, b in enumerate(stream):
                    images += b.num_samples
                    if i == 0:
                        # Both streams' slots are accounted for, and mapped.
                        st = conveyor.stats(d.unix)
                        assert st.streams_open == 2, st
                        assert st.slot_bytes_in_use >= stalled.region_bytes + stream.region_bytes
                        assert len(d.memfd_mappings()) == 2, d.memfd_mappings()
                assert stream.end is not None
                reader_region = stream.region_bytes
        finally:
            stop.set()
            sampler.join()
        assert images == EPOCHS * len(samples), "the reader must complete its epochs"

        # Meanwhile not one batch (nor any stage's item) more of the stalled stream.
        assert _work(d.unix, stalled.stream_id) == stalled_work
        # The reader's slots are gone again; the stalled stream's remain.
        # (The budget comes back when the reader's call has ended, a little
        # after the engine let go of the stream.)
        def only_stalled_left():
            st = conveyor.stats(d.unix)
            return (st.streams_open == 1 and
                    stalled.region_bytes <= st.slot_bytes_in_use
                    < stalled.region_bytes + reader_region)
        assert wait_until(only_stalled_left, 10), conveyor.stats(d.unix)
        assert wait_until(lambda: len(d.memfd_mappings()) == 1, 10), d.memfd_mappings()
        if not skip_rss_check_if_sanitized():
            # Generous: both streams' slots twice over plus 64 MiB for gRPC and
            # the allocator. A stalled stream that kept producing, or a reader
            # whose memory grew with its batches, would leave it far behind.
            bound = baseline_rss + 2 * (stalled.region_bytes + reader_region) + 64 * MiB
            print("daemon RSS baseline %.1f MiB, peak %.1f MiB, bound %.1f MiB"
                  % (baseline_rss / MiB, peak[0] / MiB, bound / MiB))
            assert peak[0] <= bound
        for b in held:
            assert b.images.shape[1:] == (3, 224, 224)  # still valid: never released
            assert b.images.shape[0] == b.num_samples > 0
    finally:
        stalled.close()
        loader.close()
    assert wait_until(d.idle, 10), conveyor.stats(d.unix)
    assert wait_until(lambda: d.memfd_mappings() == [], 10), d.memfd_mappings()
