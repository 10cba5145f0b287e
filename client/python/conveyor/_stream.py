"""Stream: one StreamBatches call, an iterator of Batch objects (the
protocol, credits, releases and the "safe" lifetime's leases; the module
docstring of conveyor.loader tells the rules as users see them).

The request side of the call is fed by a queue (the open message, then
Release messages), which gRPC's request thread drains; the responses are
read by the thread that iterates. The batch images come through the
stream's transport object (conveyor/_transport.py), one per kind. Thread
safety: iterate from one thread; Batch.release(), close() and the counters
may be used from any.
"""

from __future__ import annotations

import gc
import math
import queue
import threading
import warnings
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, Union

import grpc
import numpy as np

from . import _exit, _fork
from ._batch import Batch, SampleFailure, check_lifetime, dtype_of
from ._channel import stub_for
from ._closing import ClosesOnExit
from ._fields import FieldColumn, build_fields
from ._lease import LeaseBook, SlotReturn, leased_array
from ._security import Security
from ._shm import HandOverRefused
from ._stubs import pb
from ._transport import NAMES, open_transport
from .errors import ConveyorError, ProtocolError, Unavailable, from_rpc_error


_CLOSE = object()  # ends the request iterator (half-close)


def _release_message(slot: int, sequence: int) -> Any:
    # The batch's sequence lets the daemon refuse a stale Release.
    return pb.ClientMessage(release=pb.Release(slots=[slot], sequences=[sequence]))


def _drain(requests: "queue.SimpleQueue[Any]") -> Iterator[Any]:
    """The request iterator of a StreamBatches call: messages put on the
    queue, until _CLOSE."""
    while True:
        msg = requests.get()
        if msg is _CLOSE:
            return
        yield msg


class Stream(ClosesOnExit):
    """One StreamBatches call: an iterator of Batch objects.

    Usually made by Loader.epoch / Loader.stream or open_stream(). Iterate it
    (or call next()); use it as a context manager so that the call is
    cancelled and slots are returned if the loop ends early.

    auto_release=True (default): taking the next batch releases the previous
    one, so the caller holds one batch at a time. auto_release=False: the
    caller releases each batch itself (batch.release()) and may hold up to
    `credits` batches; asking for more raises ConveyorError instead of
    waiting forever for a batch the daemon may not send.

    Attributes after opening: stream_id, transport ("shared_memory",
    "data_socket", "inline" or "device_memory": images are then
    conveyor DeviceArrays in GPU memory), credits, samples_per_epoch,
    batches_per_epoch, pipeline (the PipelineInfo), region_bytes, slot_bytes,
    num_slots (the geometry of the region the client maps: shared_memory and
    device_memory streams; 0 for the others, whose slots stay in the
    daemon), epoch_ends (EpochEnd messages seen), end (the StreamEnd message
    once the stream finished).
    """

    _exit_order = 0  # closed at interpreter exit before loaders (conveyor/_exit.py)

    def __init__(self, channel_or_address: Union[str, grpc.Channel], request: Any, *,
                 auto_release: bool = True, on_batch: Optional[Callable[[Batch], None]] = None,
                 fd_timeout: float = 10.0, data_host: Optional[str] = None,
                 security: Optional[Security] = None, lifetime: str = "safe",
                 registrar: Optional[Any] = None, device_ordinal: Optional[int] = None) -> None:
        self.lifetime = check_lifetime(lifetime)
        # Called once the call is over and before the transport closes (its
        # pinned region unregistered): DeviceStream waits for its copies there.
        self.before_transport_close: Optional[Callable[[], None]] = None
        if security is None:
            security = Security.from_env()
        self._channel, stub, self._owns_channel = stub_for(channel_or_address, security)
        self._request = request
        self.credits = request.credits
        self._auto_release = auto_release
        self._on_batch = on_batch
        self._lock = threading.Lock()
        self._requests: "queue.SimpleQueue[Any]" = queue.SimpleQueue()  # C-level put/get: one Release per batch
        self._book = LeaseBook(self._requests, _release_message)
        self.copied_batches = 0  # batches handed out as private copies (see _wrap_fields)
        self._held: Dict[int, Batch] = {}  # sequence -> Batch taken and not released
        self._current: Optional[Batch] = None  # auto-released when the next batch is taken
        self._done = False
        self._transport: Any = None  # conveyor/_transport.py, once StreamOpened chose it
        self.epoch_ends: List[Any] = []
        self.end: Any = None
        self._requests.put(pb.ClientMessage(open=request))
        # The request iterator holds only the queue, not the Stream: gRPC's
        # request thread keeps it alive, and an abandoned Stream must still be
        # collectable (its __del__ cancels the call and frees the slots).
        self._call: Any = stub.StreamBatches(_drain(self._requests))
        _exit.track(self)
        try:
            first = next(self._call)
        except grpc.RpcError as e:
            self._finish(cancel=True)
            name = request.pipeline
            if len(name) > 100:  # the daemon's part of the message names it capped too
                name = "%s…(%d characters)" % (name[:100], len(name))
            raise from_rpc_error(e, "opening a stream of pipeline %r" % name) from None
        except StopIteration:
            self._finish(cancel=True)
            raise Unavailable("the daemon closed the stream before answering StreamOpened") from None
        if first.WhichOneof("kind") != "opened":
            self._finish(cancel=True)
            raise ConveyorError("protocol error: first server message is %r, not StreamOpened"
                                % first.WhichOneof("kind"))
        opened = first.opened
        self.opened = opened
        self.stream_id = opened.stream_id
        self.transport = NAMES.get(opened.transport, str(opened.transport))
        self.samples_per_epoch = opened.samples_per_epoch
        self.batches_per_epoch = opened.batches_per_epoch
        self.pipeline = opened.pipeline
        # The region's geometry (SHARED_MEMORY, DEVICE_MEMORY); 0 for the others.
        region = getattr(opened, opened.WhichOneof("details") or "shared_memory")
        self.region_bytes = getattr(region, "region_bytes", 0)
        self.slot_bytes = getattr(region, "slot_bytes", 0)
        self.num_slots = getattr(region, "num_slots", 0)
        try:
            self._transport = open_transport(opened, data_host=data_host, security=security,
                                             timeout=fd_timeout, registrar=registrar,
                                             device_ordinal=device_ordinal)
        except HandOverRefused:
            # The daemon forgets a stream's memory when the stream ends: one
            # that failed before its first batch (a bad first sample under
            # fail_fast) is refused here, and its call holds the real error.
            ended = self._call_error(fd_timeout)
            self._finish(cancel=True)
            if ended is not None:
                raise ended from None
            raise
        except BaseException:
            self._finish(cancel=True)
            raise

    def _call_error(self, timeout: float) -> Optional[ConveyorError]:
        """The error the call ended with, if it ends within `timeout` s
        with one before sending anything else (None otherwise). Waits on a
        helper thread: the call's iterator has no timeout of its own, and
        the caller's _finish(cancel=True) ends a wait still under way."""
        call = self._call
        if call is None:
            return None
        got: List[Any] = []

        def take() -> None:
            try:
                got.append(next(call))
            except grpc.RpcError as e:
                got.append(e)
            except BaseException:  # StopIteration, a cancel: nothing to report
                got.append(None)

        t = threading.Thread(target=take, name="conveyor-stream-end", daemon=True)
        t.start()
        t.join(timeout)
        if not got or not isinstance(got[0], grpc.RpcError):
            return None
        return from_rpc_error(got[0], "stream %d of pipeline %r"
                              % (self.stream_id, self._request.pipeline))

    # --- requests -------------------------------------------------------
    def _release(self, batch: Batch) -> None:
        with self._lock:
            if batch._released:
                return
            batch._released = True
            self._held.pop(batch.sequence, None)
            if self._current is batch:
                self._current = None
            if batch._returns != "now":
                # "lease": the Release goes when the last view of the images
                # is gone (maybe right here); "sent": it went at arrival.
                batch._images = None
                return
            if not self._done:
                # The batch's sequence lets the daemon refuse a stale Release.
                self._requests.put(pb.ClientMessage(release=pb.Release(
                    slots=[batch.slot], sequences=[batch.sequence])))

    # --- responses ------------------------------------------------------
    def __iter__(self) -> Stream:
        return self

    def __next__(self) -> Batch:
        cur = self._current
        if cur is not None and self._auto_release:
            cur.release()
        if self._done:
            raise StopIteration
        if not self._auto_release and self._held_slots() >= self.credits:
            raise ConveyorError("holding all %d credits: release a batch before taking another"
                                % self.credits)
        if len(self._book.leased) >= self.credits:
            gc.collect()  # views caught in a reference cycle
            lingering = len(self._book.leased) - self._held_leases()
            if len(self._book.leased) >= self.credits:
                raise ConveyorError(
                    "all %d credits are held: arrays (tensors, DLPack capsules) of %d released "
                    "batches are still referenced, so the daemon cannot send another batch; drop "
                    "them, keep copies (batch.copy()), or open the stream with more credits"
                    % (self.credits, lingering))
        while True:
            call = self._call
            if call is None:  # closed meanwhile by another thread
                raise StopIteration
            try:
                msg = next(call)
            except grpc.RpcError as e:
                self._finish(cancel=False)
                raise from_rpc_error(e, "stream %d of pipeline %r" % (self.stream_id, self._request.pipeline)) from None
            except StopIteration:
                self._finish(cancel=False)
                raise Unavailable("the daemon ended stream %d without StreamEnd" % self.stream_id) from None
            kind = msg.WhichOneof("kind")
            if kind == "batch":
                try:
                    batch = self._wrap(msg.batch)
                except ConveyorError as e:
                    self._finish(cancel=True, release_held=True)
                    if isinstance(e, Unavailable):  # the data socket broke
                        raise Unavailable("stream %d of pipeline %r: %s"
                                          % (self.stream_id, self._request.pipeline, e)) from None
                    raise
                with self._lock:
                    self._held[batch.sequence] = batch
                    if self._auto_release:
                        self._current = batch
                if self._on_batch is not None:
                    self._on_batch(batch)
                return batch
            if kind == "epoch_end":
                self.epoch_ends.append(msg.epoch_end)
                continue
            if kind == "end":
                self.end = msg.end
                self._finish(cancel=False)
                raise StopIteration
            self._finish(cancel=True)
            raise ConveyorError("protocol error: unexpected server message %r" % kind)

    def _wrap(self, m: Any) -> Batch:
        try:
            return self._wrap_fields(m)
        except (ValueError, TypeError, OverflowError, IndexError, KeyError) as e:
            # Fields that do not fit together (a shape numpy refuses, ...):
            # the daemon's fault, never an unhandled exception of the client.
            raise ProtocolError("protocol error: batch %d does not fit together: %s: %s"
                                % (m.sequence, type(e).__name__, e)) from None

    def _wrap_fields(self, m: Any) -> Batch:
        labels = np.array(m.labels, dtype=np.int64)
        # The sample fields, checked against the batch and the pipeline's
        # declared ones before the images are touched (a refused batch
        # leases nothing); they own their bytes (conveyor/_fields.py).
        declared = getattr(getattr(self, "pipeline", None), "fields", None)
        fields: Dict[str, FieldColumn] = {}
        if m.fields or declared:
            if m.num_samples != labels.shape[0]:
                raise ProtocolError("protocol error: batch %d has num_samples %d but %d labels"
                                    % (m.sequence, m.num_samples, labels.shape[0]))
            fields = build_fields(m.fields, labels.shape[0], declared,
                                  where="batch %d" % m.sequence)
        transport = self._transport
        on_device = getattr(transport, "on_device", False)
        dtype = transport.dtype_of(m.dtype) if on_device else dtype_of(m.dtype)
        shape = tuple(m.shape)
        nbytes = math.prod(shape) * dtype.itemsize if shape else 0
        returns = "now"
        if on_device:
            # Device arrays lease their slot themselves (no copy fallback:
            # copying device memory is the user's choice, batch.copy() says so).
            if m.images_bytes != nbytes:
                raise ConveyorError("batch %d: images_bytes %d does not match shape %s of %s"
                                    % (m.sequence, m.images_bytes, shape, dtype))
            lease = None
            if self.lifetime == "safe":
                lease = SlotReturn(self._book, m.slot, m.sequence)
                returns = "lease"
            images = transport.images(m, dtype, shape, nbytes, lease)
        elif transport.slot_backed:
            if m.images_bytes != nbytes:
                raise ConveyorError("batch %d: images_bytes %d does not match shape %s of %s"
                                    % (m.sequence, m.images_bytes, shape, dtype))
            if nbytes == 0:
                images = np.empty(shape, dtype)
            else:
                images = transport.images(m, dtype, shape, nbytes)
                if self.lifetime == "safe":
                    images, returns = self._lease_or_copy(m, images)
        else:
            images = transport.images(m, dtype, shape, nbytes)
        indices = np.array(m.sample_indices, dtype=np.int64)
        failures = [SampleFailure(f.sample_index, f.path, f.reason) for f in m.failures]
        batch = Batch(self, images, labels, indices, sequence=m.sequence, epoch=m.epoch,
                      batch_in_epoch=m.batch_in_epoch, position=m.position, offset=m.offset,
                      epoch_samples=m.epoch_samples, end_of_epoch=m.end_of_epoch, slot=m.slot,
                      failures=failures, fields=fields)
        batch._returns = returns
        return batch

    def _held_leases(self) -> int:
        return sum(1 for b in list(self._held.values()) if b._returns == "lease")

    def _held_slots(self) -> int:
        """Unreleased batches that hold a slot (copies gave theirs back)."""
        return sum(1 for b in list(self._held.values()) if b._returns != "sent")

    def _lease_or_copy(self, m: Any, view: np.ndarray) -> Tuple[np.ndarray, str]:
        """lifetime="safe": the images of batch `m` as an array leasing its
        slot - or, when arrays of released batches already hold all credits
        but this one, a private copy whose slot goes back at once (leasing
        it would leave the daemon no credit to send the next batch)."""
        leased = len(self._book.leased)
        lingering = leased - self._held_leases()
        if lingering >= 1 and leased >= self.credits - 1:
            images = np.array(view, copy=True)
            self._book.send_release(m.slot, m.sequence)
            self.copied_batches += 1
            if self.copied_batches == 1:
                warnings.warn(
                    "conveyor: arrays of %d released batches of stream %d are still referenced "
                    "(all but one of its %d credits); further batches are copied out of the "
                    "slots until they are dropped (more credits avoid the copies)"
                    % (lingering, self.stream_id, self.credits), RuntimeWarning, stacklevel=5)
            return images, "sent"
        return leased_array(self._book, m.slot, m.sequence, view), "lease"

    # --- lifetime -------------------------------------------------------
    @property
    def done(self) -> bool:
        return self._done

    @property
    def held(self) -> int:
        """Batches taken and not yet released."""
        return len(self._held)

    @property
    def leased(self) -> int:
        """Slots the client holds through leases (lifetime="safe"): batches
        not released, and released ones whose arrays are still referenced."""
        return len(self._book.leased)

    def _finish(self, cancel: bool, release_held: bool = False) -> None:
        with self._lock:
            if release_held:
                # close(): every batch still held counts as released from now on.
                for b in self._held.values():
                    b._released = True
                self._held.clear()
                self._current = None
            if self._done:
                return
            self._done = True
            self._book.done = True
        self._requests.put(_CLOSE)
        # The call's finalizer takes a gRPC lock: let it run now, while
        # gRPC's threads run, not at interpreter exit (conveyor/_exit.py).
        call, self._call = self._call, None
        if cancel and call is not None:
            call.cancel()
        del call
        hook = self.before_transport_close
        try:
            if hook is not None:
                hook()
        finally:
            if self._transport is not None:
                self._transport.close()  # mappings and buffers live on while views of them do
            if self._owns_channel:
                self._channel.close()

    def _detach_after_fork(self) -> None:
        """In a forked child (conveyor/_fork.py): the parent's call, channel
        and transport are kept, never cancelled, closed or collected here
        (that can hang, or end the parent's data socket); the stream is
        over for this process. Batches already taken stay readable."""
        _fork.keep(self._call, self._channel, self._transport, self._requests)
        self._lock = threading.Lock()
        self._call = None
        self._transport = None
        self._owns_channel = False
        self._done = True
        self._book.done = True

    def close(self) -> None:
        """Cancels the call if it is still running and releases every batch
        still held (their `images` raise from now on). Idempotent.

        When the stream ends by itself (StreamEnd or an error), batches still
        held stay readable until released: the daemon writes nothing more to
        a finished stream's region, and the mapping lives as long as any view
        of it does."""
        self._finish(cancel=True, release_held=True)
