"""A finite stream whose client leaves early leaks nothing (issue 9, defect 1).

When the engine has produced every batch of a finite stream (the batches not
yet taken fit in the client's credits) and the client closes the stream
without taking them, the daemon must still unregister the stream and unmap
its slot memory: GetStats' streams_open and slot_bytes_in_use return to 0,
the daemon's stream memfds (/memfd:conveyor-stream-N in /proc/PID/maps;
shared-memory streams) are all unmapped, its fd count returns to the
baseline and its RSS does not keep the slots (skipped for sanitized
daemons). On every transport: shared memory and inline over the unix socket,
data socket and inline over TCP; the client takes one batch, or stops inside
the stream's last `credits` batches. Each close is repeated, so a leak
accumulates.

Before the fix (Scheduler::Cancel left a finished stream registered until a
consumer took its ready batches) the INLINE cases kept every stream open:
their 224 px messages cannot all be written to a client that stopped reading.
"""

import math

import pytest

import conveyor
from conveyor_integration import (daemon_config, pb, pipeline_entry, skip_rss_check_if_sanitized,
                                  wait_until)

MiB = 1 << 20
REPEATS = 3

# via, transport, batch size, credits, epochs, batches taken before closing;
# all on 224 px batches (48 x 3 x 224 x 224 bytes = 7.2 MB at batch 48), whose
# INLINE messages cannot all be flushed to a client that stopped reading. The
# dataset has 48 images: batches per epoch = ceil(48 / batch size).
CASES = {
    "shm-take-one": ("unix", "shared_memory", 48, 8, 8, 1),          # 8 batches
    "shm-last-credits": ("unix", "shared_memory", 32, 4, 4, 5),      # 8 batches
    "inline-unix-take-one": ("unix", "inline", 48, 8, 8, 1),         # the case
    "inline-unix-last-credits": ("unix", "inline", 32, 4, 4, 5),     # 8 batches
    "datasock-take-one": ("tcp", "data_socket", 48, 8, 8, 1),        # 8 batches
    "datasock-last-credits": ("tcp", "data_socket", 32, 5, 5, 6),    # 10 batches
    "inline-tcp-take-one": ("tcp", "inline", 40, 6, 3, 1),           # 6 batches
    "inline-tcp-last-credits": ("tcp", "inline", 32, 5, 3, 2),       # 6 batches
}


def _stream_stats(address, stream_id):
    for s in conveyor.stats(address).streams:
        if s.stream_id == stream_id:
            return s
    return None


def _emitted(address, stream_id):
    s = _stream_stats(address, stream_id)
    return s.batches_emitted if s is not None else None


def _open_take_close(address, transport, pipeline, batch, credits, epochs, take, seed):
    """Opens a finite stream, takes `take` batches, waits until the engine
    has produced every batch of the stream, and closes it. Returns the
    stream's slot memory in bytes."""
    stream = conveyor.open_stream(address, pipeline, batch, seed=seed, num_epochs=epochs,
                                  credits=credits, transport=transport)
    try:
        for _ in range(take):
            b = next(stream)
            assert b.num_samples > 0
        assert stream.transport == transport
        total = epochs * stream.batches_per_epoch
        assert total - take < credits, "the case must leave only what fits in the credits"
        # The engine produced everything: the stream is finished but for
        # the client's reading, which it abandons now.
        # (A stream whose every batch was sent has left GetStats already.)
        assert wait_until(lambda: _emitted(address, stream.stream_id) in (None, total), 20), \
            _stream_stats(address, stream.stream_id)
        # The daemon's slots, for every transport (only shared memory tells
        # the client their geometry): `credits` batches of samples.
        itemsize = {pb.FLOAT32: 4, pb.FLOAT16: 2}.get(stream.pipeline.dtype, 1)
        region = credits * batch * math.prod(stream.pipeline.sample_shape) * itemsize
    finally:
        stream.close()
    return region


def _settled(d, base_fds):
    # fds: 2 of slack for gRPC's own (REPEATS streams leaking one each exceed it).
    return d.idle() and not d.memfd_mappings() and d.fd_count() <= base_fds + 2


def _state(d, base_fds):
    st = conveyor.stats(d.unix)
    return ("streams_open %d (ids %s), slot_bytes_in_use %d, memfd mappings %s, fds %d "
            "(baseline %d)" % (st.streams_open, [s.stream_id for s in st.streams],
                               st.slot_bytes_in_use, d.memfd_mappings(), d.fd_count(), base_fds))


@pytest.mark.parametrize("case", sorted(CASES))
def test_abandoned_finished_stream_is_freed(daemon_factory, dataset, case):
    root, _ = dataset
    d = daemon_factory(daemon_config(root, pipelines={"big": pipeline_entry(root, size=224)},
                                     memory_budget="512MiB"), name="leak")
    via, transport, batch, credits, epochs, take = CASES[case]
    address = getattr(d, via)
    # A complete stream of the same shape first: threads, connections and
    # allocator pools exist from now on.
    with conveyor.open_stream(address, "big", batch, seed=99, num_epochs=1, credits=credits,
                              transport=transport) as s:
        assert sum(b.num_samples for b in s) >= 48
    assert wait_until(lambda: _settled(d, 10 ** 6), 20), _state(d, -1)
    base_fds = d.fd_count()
    base_rss = d.rss_bytes()

    region = 0
    for i in range(REPEATS):
        region = _open_take_close(address, transport, "big", batch, credits, epochs, take, seed=i)

    assert wait_until(lambda: _settled(d, base_fds), 10), \
        "%d abandoned finished streams (%s) left behind: %s" % (REPEATS, case, _state(d, base_fds))
    assert conveyor.stats(d.unix).streams_total == REPEATS + 1
    if not skip_rss_check_if_sanitized():
        # Generous: one stream's slots of slack; a leak keeps REPEATS of them.
        grown = d.rss_bytes() - base_rss
        print("daemon RSS %.1f MiB before, %+.1f MiB after %d abandoned streams of %.1f MiB slots"
              % (base_rss / MiB, grown / MiB, REPEATS, region / MiB))
        assert grown < region + 32 * MiB, "RSS grew by %.1f MiB" % (grown / MiB)
