"""The client-side device= path's logic (conveyor/_device_feed.py
DeviceStream) against a host model of the CUDA copies: a copy runs later on
a thread of the model and its event completes after it, so releasing a slot
on hand-over (the bug: the daemon then overwrites a batch the GPU still
reads) is caught. No GPU, no daemon: the host stream is a model too, whose
slots record every read and release.
"""

import threading
import time

import numpy as np
import pytest

from conveyor._device_feed import DeviceStream
from conveyor.errors import Unavailable


class Slot:
    """One pinned slot of the model's host stream."""

    def __init__(self, index):
        self.index = index
        self.data = np.zeros(16, dtype=np.uint8)


class HostBatch:
    """What a Stream yields (the attributes DeviceStream copies)."""

    def __init__(self, stream, sequence, slot):
        self._stream = stream
        self.sequence = sequence
        self.slot = slot.index
        self._slot = slot
        slot.data[:] = sequence % 251  # the daemon wrote this batch into the slot
        self.images = slot.data
        self.labels = np.array([sequence], dtype=np.int64)
        self.indices = np.array([sequence], dtype=np.int64)
        self.epoch = 0
        self.batch_in_epoch = sequence
        self.position = sequence + 1
        self.offset = sequence + 1
        self.epoch_samples = 1
        self.end_of_epoch = False
        self.num_samples = 1
        self.failures = []
        self.released = False

    def release(self):
        self._stream.on_release(self)


class HostStream:
    """A Stream model: `n` batches over `credits` slots; a batch is only
    produced into a free slot (as the daemon does), and a release while the
    slot's copy has not completed is recorded as a violation."""

    def __init__(self, n, credits, fail_after=None):
        self.n = n
        self.credits = credits
        self.fail_after = fail_after
        self.free = [Slot(i) for i in range(credits)]
        self.next_seq = 0
        self.log = []          # ("take", seq) / ("release", seq), in order
        self.violations = []
        self.closed = False
        self.copies = {}       # seq -> HostCopy (set by the copier)
        self.lock = threading.Lock()
        self.before_transport_close = None  # as conveyor.Stream's
        self.unpinned_under_a_copy = []     # copies in flight when the region went

    def __iter__(self):
        return self

    def __next__(self):
        if self.fail_after is not None and self.next_seq == self.fail_after:
            raise Unavailable("the daemon went away (model)")
        if self.next_seq >= self.n:
            self._finish()  # StreamEnd: the stream closes its transport itself
            raise StopIteration
        if not self.free:
            raise AssertionError("taken with every credit held: the feed overdrew its credits")
        b = HostBatch(self, self.next_seq, self.free.pop(0))
        self.next_seq += 1
        self.log.append(("take", b.sequence))
        return b

    def on_release(self, batch):
        with self.lock:
            if batch.released:
                return
            batch.released = True
            copy = self.copies.get(batch.sequence)
            if copy is None or not copy.completed.is_set():
                self.violations.append(batch.sequence)
            self.log.append(("release", batch.sequence))
            batch._slot.data[:] = 255  # the daemon reuses the slot at once
            self.free.append(batch._slot)

    def _finish(self):
        if self.closed:
            return
        self.closed = True
        if self.before_transport_close is not None:
            self.before_transport_close()
        # The transport closes now: the pinned region is unregistered.
        self.unpinned_under_a_copy = [s for s, c in self.copies.items()
                                      if not c.completed.is_set()]

    def close(self):
        self._finish()


class HostCopy:
    def __init__(self, source, delay):
        self.source = source
        self.delay = delay
        self.completed = threading.Event()  # the event, recorded after the copy
        self.result = None
        self.handed_over = False

    def run(self):
        time.sleep(self.delay)
        self.result = np.array(self.source, copy=True)  # the GPU reads the pinned slot now
        self.completed.set()

    def done(self):
        return self.completed.is_set()

    def wait(self):
        self.completed.wait()

    def hand_over(self):
        self.handed_over = True
        return self  # the "tensor": the test reads .result after wait()


class HostCopier:
    """Copies complete `delay` s after start, on a thread of the model."""

    device = "model:0"

    def __init__(self, stream, delay=0.02):
        self.stream = stream
        self.delay = delay
        self.started = []  # sequences, in start order

    def start(self, images):
        seq = int(images[0]) if images.size else -1
        # The model's batches write their sequence into the slot: find the batch.
        batch_seq = self.stream.next_seq - 1
        copy = HostCopy(images, self.delay)
        self.stream.copies[batch_seq] = copy
        self.started.append(batch_seq)
        threading.Thread(target=copy.run, daemon=True).start()
        assert seq == batch_seq % 251
        return copy


def run_all(feed):
    out = []
    for b in feed:
        b.images.wait()
        out.append((b.sequence, b.images.result.copy()))
    return out


@pytest.mark.parametrize("credits", [1, 2, 3])
def test_slots_go_back_only_after_the_copy_completed(credits):
    host = HostStream(n=12, credits=credits)
    copier = HostCopier(host, delay=0.01)
    feed = DeviceStream(host, copier, credits)
    got = run_all(feed)
    feed.close()
    assert [s for s, _ in got] == list(range(12))
    # The copied bytes are the batch's own, never those of a reused slot.
    for seq, data in got:
        assert (data == seq % 251).all(), "batch %d copied after its slot was reused" % seq
    assert host.violations == [], "slots released before their copy's event: %s" % host.violations
    assert sorted(s for k, s in host.log if k == "release") == list(range(12))
    assert host.closed
    assert host.unpinned_under_a_copy == []


def test_a_stream_that_ends_by_itself_waits_for_the_copies_first():
    """StreamEnd arrives while the last copies still run: the host stream
    closes its transport (unpins the region) only after they completed."""
    host = HostStream(n=3, credits=3)
    feed = DeviceStream(host, HostCopier(host, delay=0.2), 3)
    got = [next(feed) for _ in range(3)]  # the third: StreamEnd came while copying
    assert host.closed
    assert host.unpinned_under_a_copy == [], "region unpinned under copies in flight"
    with pytest.raises(StopIteration):
        next(feed)
    assert [b.sequence for b in got] == [0, 1, 2]
    feed.close()
    assert host.violations == []


def test_the_check_catches_a_release_on_hand_over():
    """The detector above is not vacuous: a feed that releases a batch's
    slot when it hands the batch over (not after its event) is caught."""

    class EagerFeed(DeviceStream):
        def __next__(self):
            b = super().__next__()
            for host_batch, _ in list(self._inflight):
                if host_batch.sequence == b.sequence:
                    host_batch.release()
            return b

    host = HostStream(n=4, credits=2)
    feed = EagerFeed(host, HostCopier(host, delay=0.05), 2)
    got = run_all(feed)
    feed.close()
    assert host.violations, "a release before the event went unnoticed"
    assert any(not (data == seq % 251).all() for seq, data in got), \
        "the model should show the overwritten slot"


def test_copy_of_the_next_batch_starts_when_this_one_is_handed_over():
    host = HostStream(n=6, credits=3)
    copier = HostCopier(host, delay=0.005)
    feed = DeviceStream(host, copier, 3)
    for n, b in enumerate(feed):
        # Before the user asks for n+1, its copy is already under way.
        expected = min(n + 2, 6)
        assert copier.started == list(range(expected)), (n, copier.started)
        assert b.sequence == n
    feed.close()


def test_consumer_waits_on_the_event_of_each_batch():
    host = HostStream(n=3, credits=2)
    copier = HostCopier(host, delay=0.0)
    feed = DeviceStream(host, copier, 2)
    batches = list(feed)
    feed.close()
    assert all(b.images.handed_over for b in batches)


def test_close_with_copies_in_flight_waits_for_them():
    host = HostStream(n=10, credits=3)
    copier = HostCopier(host, delay=0.2)
    feed = DeviceStream(host, copier, 3)
    first = next(feed)  # batch 0 handed over, the copy of 1 started
    assert first.sequence == 0
    assert feed.in_flight >= 1
    t0 = time.monotonic()
    feed.close()
    assert time.monotonic() - t0 > 0.05, "close() did not wait for the copies in flight"
    assert host.violations == []
    assert feed.in_flight == 0
    assert host.closed
    taken = [s for k, s in host.log if k == "take"]
    released = [s for k, s in host.log if k == "release"]
    assert sorted(released) == taken  # every slot went back, each after its copy
    with pytest.raises(StopIteration):
        next(feed)


def test_on_batch_follows_the_user_not_the_prefetch():
    host = HostStream(n=4, credits=2)
    seen = []
    feed = DeviceStream(host, HostCopier(host, delay=0.0), 2, on_batch=lambda b: seen.append(b.sequence))
    b0 = next(feed)
    assert b0.sequence == 0 and seen == [0]  # batch 1 was taken, not yet handed over
    assert host.next_seq == 2
    next(feed)
    assert seen == [0, 1]
    feed.close()


def test_an_error_after_a_batch_surfaces_at_the_next_call():
    host = HostStream(n=10, credits=2, fail_after=3)
    feed = DeviceStream(host, HostCopier(host, delay=0.0), 2)
    got = [next(feed).sequence for _ in range(3)]
    assert got == [0, 1, 2]
    with pytest.raises(Unavailable):
        next(feed)
    feed.close()
    assert host.violations == []
