"""DeviceStream: the client-side device= path - batches of a pinned
SHARED_MEMORY stream copied to a CUDA device by the loader's copier
(conveyor/_cuda_copy.py), yielded as DeviceBatch objects whose images are
device tensors.

The rules (the bug this guards against: a slot released while the GPU
still reads it, so the daemon overwrites a batch mid-copy):
  - a slot is released only once its copy's event completed (Copy.done()
    is asked before every Release; close() waits for copies in flight
    before the stream - and its pinned mapping - goes);
  - the copy of batch n is started when batch n-1 is handed to the user,
    so it overlaps the user's step on n-1; the consumer's current stream
    waits on the event of the batch it gets (Copy.hand_over());
  - at most `credits` slots are held: when every credit is in a copy, the
    oldest copy is waited for before the next batch is taken;
  - the host stream's region is never unpinned (nor unmapped) under a copy:
    when the stream ends by itself (StreamEnd, an error) it calls this
    feed's hook (Stream.before_transport_close) first, which waits for the
    copies in flight.
The underlying Stream is opened with auto_release=False and
lifetime="fast": this class is what releases its batches. A DeviceBatch's
images are the user's own device memory: releasing it gives nothing back
(its slot went back when its copy completed).

Thread-safety: iterate from one thread; close() from the iterating thread
(or after it stopped).
"""

from __future__ import annotations

import collections
import weakref
from typing import Any, Callable, Deque, Dict, Optional, Tuple

from ._closing import ClosesOnExit

_END = object()


class DeviceBatch:
    """A batch whose images are a device tensor (the user's: never
    overwritten). Labels and indices are numpy arrays, as in Batch; the
    other attributes (fields included) are the host batch's."""

    __slots__ = ("images", "labels", "indices", "sequence", "epoch", "batch_in_epoch", "position",
                 "offset", "epoch_samples", "end_of_epoch", "num_samples", "slot", "failures",
                 "fields")

    def __init__(self, host: Any, images: Any) -> None:
        self.images = images
        self.labels = host.labels
        self.indices = host.indices
        self.sequence: int = host.sequence
        self.epoch: int = host.epoch
        self.batch_in_epoch: int = host.batch_in_epoch
        self.position: int = host.position
        self.offset: int = host.offset
        self.epoch_samples: int = host.epoch_samples
        self.end_of_epoch: bool = host.end_of_epoch
        self.num_samples: int = host.num_samples
        self.slot: int = host.slot
        self.failures = host.failures
        self.fields: Dict[str, Any] = getattr(host, "fields", None) or {}

    @property
    def released(self) -> bool:
        return False

    def release(self) -> None:
        """Nothing to give back: the slot went back once the copy completed."""

    def copy(self) -> DeviceBatch:
        return self

    def __len__(self) -> int:
        return self.num_samples

    def __enter__(self) -> DeviceBatch:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass

    def __repr__(self) -> str:
        return ("DeviceBatch(sequence=%d, epoch=%d, batch_in_epoch=%d, num_samples=%d, images=%s)"
                % (self.sequence, self.epoch, self.batch_in_epoch, self.num_samples,
                   getattr(self.images, "shape", None)))


class DeviceStream(ClosesOnExit):
    """Iterates DeviceBatch objects over `stream` (a Stream or
    RetryingStream opened with auto_release=False, lifetime="fast", on a
    pinned shared-memory region). on_batch(host_batch) is called when a
    batch is handed to the user (the loader's resume position)."""

    _exit_order = 0

    def __init__(self, stream: Any, copier: Any, credits: int,
                 on_batch: Optional[Callable[[Any], None]] = None) -> None:
        self._stream = stream
        self._copier = copier
        self._credits = max(1, int(credits))
        self._on_batch = on_batch
        self._inflight: Deque[Tuple[Any, Any]] = collections.deque()  # (host batch, Copy), oldest first
        self._ahead: Any = None    # (host batch, Copy) started for the next __next__, or _END
        self._error: Optional[BaseException] = None  # raised at the next __next__
        self._closed = False
        self.copies_started = 0
        ref = weakref.ref(self)  # no cycle: an abandoned feed is collected at once

        def wait_for_copies() -> None:
            feed = ref()
            if feed is not None:
                feed._wait_all()

        if hasattr(stream, "before_transport_close"):
            stream.before_transport_close = wait_for_copies

    # --- slots ------------------------------------------------------------
    def _wait_all(self) -> None:
        """Blocks until every copy in flight completed (their slots are
        released by the next _reap)."""
        for _batch, copy in list(self._inflight):
            copy.wait()

    def _reap(self) -> None:
        """Releases the slots whose copies completed (and only those)."""
        for item in list(self._inflight):
            batch, copy = item
            if copy.done():
                self._inflight.remove(item)
                batch.release()

    def _make_room(self) -> None:
        """Waits for the oldest copies while every credit is in one."""
        self._reap()
        while len(self._inflight) >= self._credits:
            batch, copy = self._inflight.popleft()
            copy.wait()
            batch.release()

    def _start_next(self) -> Any:
        """Takes the next host batch and starts its copy; _END at the end."""
        self._make_room()
        try:
            batch = next(self._stream)
        except StopIteration:
            return _END
        try:
            copy = self._copier.start(batch.images)
        except BaseException:
            batch.release()  # nothing reads it
            raise
        self.copies_started += 1
        self._inflight.append((batch, copy))
        return (batch, copy)

    # --- iteration --------------------------------------------------------
    def __iter__(self) -> DeviceStream:
        return self

    def __next__(self) -> DeviceBatch:
        if self._closed:
            raise StopIteration
        if self._ahead is None and self._error is None:
            self._ahead = self._start_next()
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        current, self._ahead = self._ahead, None
        if current is _END:
            self._ahead = _END
            self._reap()
            raise StopIteration
        # Overlap: the next copy starts now, before the user's step on this one.
        try:
            self._ahead = self._start_next()
        except Exception as e:  # surfaces at the next call; this batch is fine
            self._error = e
        self._reap()
        batch, copy = current
        images = copy.hand_over()
        if self._on_batch is not None:
            self._on_batch(batch)
        return DeviceBatch(batch, images)

    # --- lifetime ---------------------------------------------------------
    def __getattr__(self, name: str) -> Any:
        # stream_id, transport, credits, epoch_ends, end, ... of the host stream.
        stream = self.__dict__.get("_stream")
        if stream is None:
            raise AttributeError(name)
        return getattr(stream, name)

    @property
    def in_flight(self) -> int:
        """Slots held by copies not yet known to be complete."""
        return len(self._inflight)

    def close(self) -> None:
        """Waits for the copies in flight, releases their slots, closes the
        stream (and so unpins and unmaps its region). Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            while self._inflight:
                batch, copy = self._inflight.popleft()
                copy.wait()
                batch.release()
        finally:
            self._ahead = _END
            self._stream.close()
