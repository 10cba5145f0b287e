"""The conveyor Python client: streams of batches from conveyord.

    loader = conveyor.Loader("unix:///run/conveyor/conveyor.sock",
                             pipeline="imagenet-train", batch_size=256, seed=0)
    for batch in loader.epoch(0):
        x = torch.from_numpy(batch.images)   # no copy: a view of the daemon's slot
        y = torch.from_numpy(batch.labels)

How a stream works (see proto/conveyor/v1/conveyor.proto): the client opens a
bidirectional StreamBatches call, the daemon answers StreamOpened, then sends
Batch messages. The client grants `credits` batches: the daemon never has more
than that many batches of the stream unreleased. A batch is released when the
next batch is taken, when `batch.release()` is called, or when the stream is
closed (`with` block exit, `close()`, end of iteration); afterwards
`batch.images` raises BatchReleasedError.

Lifetimes (the `lifetime` argument):
  "safe" (default): the images array leases the batch's slot (conveyor._lease).
      The Release message goes back only once the batch is released AND no
      array, tensor or DLPack capsule views the images any more, so a kept
      `torch.from_numpy(batch.images)` is never overwritten. When arrays of
      released batches hold all credits but one, later batches are handed out
      as private copies (their slots go back at once; `stream.copied_batches`
      counts them, a RuntimeWarning says so once per stream), so the stream
      never waits for a slot the user holds. With credits=1 that cannot help:
      taking a batch while the previous one's array is kept raises
      ConveyorError.
  "fast": the explicit zero-copy fast path. The Release goes back when the
      batch is released, whatever still views it: arrays kept past that view
      a slot the daemon overwrites with later batches (keep data with
      `batch.copy()`).

Transports: on a unix socket the daemon hands over a memfd that holds every
slot of the stream; the client maps it once and `batch.images` is a numpy view
at the batch's offset (writable, so torch.from_numpy shares it without a
warning; writes go to the daemon's slot). Over TCP the daemon writes each
batch's images on a data socket beside the gRPC call, straight into a client
buffer per slot (reused after release, like a slot), and `batch.images` views
that buffer; with transport="inline" (or a daemon without a data socket) the
image bytes come inside the Batch message and `batch.images` is a read-only
view of them (use `batch.copy()` for a writable array).

Threads: one gRPC call per stream; the request side is fed by a queue
(Release messages), the responses are read by the thread that iterates.
`batch.release()` may be called from any thread.
"""

from __future__ import annotations

import collections
import gc
import math
import os
import queue
import threading
import warnings
from typing import (Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple,
                    Union)

import grpc
import numpy as np

from ._stubs import pb, pb_grpc
from . import _exit
from ._closing import ClosesOnExit
from ._datasock import DataSocket, tcp_host
from ._lease import LeaseBook, leased_array
from ._security import Security
from ._shm import SharedRegion
from .errors import (BatchReleasedError, ConveyorError, InvalidRequest, NotFound, ProtocolError,
                     Unavailable, from_rpc_error)
from .retry import RetryingStream, RetryPolicy, resume_point

MAX_MESSAGE_BYTES = 1 << 30  # 1 GiB: inline batches travel in one message
DEFAULT_ADDRESS = "unix:///run/conveyor/conveyor.sock"

_DTYPES: Dict[int, np.dtype] = {pb.UINT8: np.dtype(np.uint8), pb.FLOAT32: np.dtype(np.float32),
           pb.FLOAT16: np.dtype(np.float16)}
_TRANSPORTS = {"auto": pb.TRANSPORT_AUTO, "shm": pb.SHARED_MEMORY, "shared_memory": pb.SHARED_MEMORY,
               "inline": pb.INLINE, "data_socket": pb.DATA_SOCKET}
_TRANSPORT_NAMES = {pb.TRANSPORT_AUTO: "auto", pb.SHARED_MEMORY: "shared_memory", pb.INLINE: "inline",
                    pb.DATA_SOCKET: "data_socket"}

SampleFailure = collections.namedtuple("SampleFailure", "sample_index path reason")

LIFETIMES = ("safe", "fast")


def check_lifetime(lifetime: str) -> str:
    """lifetime must be "safe" (default: a batch's slot goes back when the
    batch is released and no array views it any more) or "fast" (the slot
    goes back when the batch is released, whatever still views it)."""
    if lifetime not in LIFETIMES:
        raise InvalidRequest("lifetime must be \"safe\" or \"fast\", got %r" % (lifetime,))
    return lifetime


def default_address() -> str:
    """$CONVEYOR_SERVER, else the daemon's default unix socket."""
    return os.environ.get("CONVEYOR_SERVER") or DEFAULT_ADDRESS


def grpc_target(address: str) -> str:
    """The gRPC target for an address: "unix:///path.sock", "unix:path",
    an absolute socket path, or "host:port"."""
    if not address:
        raise InvalidRequest("empty server address")
    if address.startswith("/"):
        return "unix://" + address
    return address


def make_channel(address: str, options: Sequence[Tuple[str, Any]] = (),
                 security: Optional[Security] = None) -> grpc.Channel:
    """A gRPC channel to the daemon with 1 GiB message limits. `security`
    (a conveyor.Security; default Security.from_env()): TLS for TCP
    addresses when it names a CA, its bearer token on every call."""
    opts = [("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES)]
    opts.extend(options)
    if security is None:
        security = Security.from_env()
    return security.channel(grpc_target(address), opts)


def _stub(channel_or_address: Union[str, grpc.Channel],
          security: Optional[Security] = None) -> Tuple[grpc.Channel, Any, bool]:
    if isinstance(channel_or_address, str):
        ch = make_channel(channel_or_address, security=security)
        return ch, pb_grpc.ConveyorStub(ch), True
    return channel_or_address, pb_grpc.ConveyorStub(channel_or_address), False


def list_pipelines(address: Union[str, grpc.Channel, None] = None, timeout: float = 10.0,
                   security: Optional[Security] = None) -> List[Any]:
    """The daemon's pipelines (those this client may open): a list of
    conveyor_pb2.PipelineInfo."""
    ch, stub, owned = _stub(address or default_address(), security)
    try:
        return list(stub.ListPipelines(pb.ListPipelinesRequest(), timeout=timeout).pipelines)
    except grpc.RpcError as e:
        raise from_rpc_error(e, "ListPipelines") from None
    finally:
        if owned:
            ch.close()


def stats(address: Union[str, grpc.Channel, None] = None, timeout: float = 10.0,
          security: Optional[Security] = None) -> Any:
    """The daemon's per-stage and per-stream figures: conveyor_pb2.GetStatsResponse."""
    ch, stub, owned = _stub(address or default_address(), security)
    try:
        return stub.GetStats(pb.GetStatsRequest(), timeout=timeout)
    except grpc.RpcError as e:
        raise from_rpc_error(e, "GetStats") from None
    finally:
        if owned:
            ch.close()


def dtype_of(enum_value: int) -> np.dtype:
    """numpy dtype of a conveyor_pb2.DType value."""
    try:
        return _DTYPES[enum_value]
    except KeyError:
        raise ConveyorError("unknown dtype %r from the daemon" % enum_value) from None


class Batch:
    """One batch of a stream.

    Attributes: images (numpy, shaped [num_samples, ...sample_shape]), labels
    and indices (int64 numpy, owned by the batch), sequence, epoch,
    batch_in_epoch, position (this rank's samples of the epoch through this
    batch), offset (samples of the epoch's global order consumed once every
    rank took this batch: the resume point), epoch_samples, end_of_epoch,
    num_samples, slot,
    failures (list of SampleFailure(sample_index, path, reason)).

    `images` views the daemon's slot without a copy until the batch is
    released; afterwards it raises BatchReleasedError. `copy()` returns a batch
    that owns its arrays and never needs releasing.
    """

    __slots__ = ("_stream", "_images", "_released", "_returns", "labels", "indices", "sequence", "epoch",
                 "batch_in_epoch", "position", "offset", "epoch_samples", "end_of_epoch", "num_samples",
                 "slot", "failures", "__weakref__")

    def __init__(self, stream: Optional[Stream], images: np.ndarray, labels: np.ndarray,
                 indices: np.ndarray, *, sequence: int = 0, epoch: int = 0,
                 batch_in_epoch: int = 0, position: int = 0, offset: int = 0,
                 epoch_samples: int = 0, end_of_epoch: bool = False, slot: int = 0,
                 failures: Sequence[SampleFailure] = ()) -> None:
        self._stream = stream
        self._images: Optional[np.ndarray] = images
        self._released = stream is None
        # How the slot goes back on release: "now" (a Release message),
        # "lease" (when the images' SlotLease dies), "sent" (already returned:
        # the images are a private copy).
        self._returns = "now"
        self.labels = labels
        self.indices = indices
        self.sequence = sequence
        self.epoch = epoch
        self.batch_in_epoch = batch_in_epoch
        self.position = position
        self.offset = offset
        self.epoch_samples = epoch_samples
        self.end_of_epoch = end_of_epoch
        self.num_samples = int(labels.shape[0])
        self.slot = slot
        self.failures = list(failures)

    @property
    def images(self) -> np.ndarray:
        images = self._images
        if images is None or (self._released and self._stream is not None):
            raise BatchReleasedError(
                "batch %d (epoch %d) was released: its slot belongs to the daemon again and may "
                "hold another batch; call batch.copy() before releasing to keep the data"
                % (self.sequence, self.epoch))
        return images

    @property
    def released(self) -> bool:
        """True once the batch's slot went back to the daemon (copies: False)."""
        return self._released and self._stream is not None

    def release(self) -> None:
        """Gives the slot back to the daemon (one credit). Idempotent; thread-safe."""
        if self._stream is not None:
            self._stream._release(self)

    def copy(self) -> Batch:
        """An independent batch owning copies of images, labels and indices."""
        return Batch(None, np.array(self.images, copy=True), self.labels.copy(), self.indices.copy(),
                     sequence=self.sequence, epoch=self.epoch, batch_in_epoch=self.batch_in_epoch,
                     position=self.position, offset=self.offset,
                     epoch_samples=self.epoch_samples,
                     end_of_epoch=self.end_of_epoch, slot=self.slot, failures=self.failures)

    def __len__(self) -> int:
        return self.num_samples

    def __enter__(self) -> Batch:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def __repr__(self) -> str:
        shape = tuple(self._images.shape) if self._images is not None else None
        return ("Batch(sequence=%d, epoch=%d, batch_in_epoch=%d, position=%d, num_samples=%d, "
                "shape=%s, dtype=%s, failures=%d%s)"
                % (self.sequence, self.epoch, self.batch_in_epoch, self.position, self.num_samples,
                   shape, self._images.dtype if self._images is not None else None,
                   len(self.failures), ", released" if self.released else ""))


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
    "data_socket" or "inline"), credits, samples_per_epoch, batches_per_epoch, pipeline (the
    PipelineInfo), region_bytes, slot_bytes, num_slots, epoch_ends (EpochEnd
    messages seen), end (the StreamEnd message once the stream finished).
    """

    _exit_order = 0  # closed at interpreter exit before loaders (conveyor/_exit.py)

    def __init__(self, channel_or_address: Union[str, grpc.Channel], request: Any, *,
                 auto_release: bool = True, on_batch: Optional[Callable[[Batch], None]] = None,
                 fd_timeout: float = 10.0, data_host: Optional[str] = None,
                 security: Optional[Security] = None, lifetime: str = "safe") -> None:
        self.lifetime = check_lifetime(lifetime)
        if security is None:
            security = Security.from_env()
        self._channel, stub, self._owns_channel = _stub(channel_or_address, security)
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
        self._region: Optional[SharedRegion] = None
        self._data: Optional[DataSocket] = None
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
        self.transport = _TRANSPORT_NAMES.get(opened.transport, str(opened.transport))
        self.samples_per_epoch = opened.samples_per_epoch
        self.batches_per_epoch = opened.batches_per_epoch
        self.pipeline = opened.pipeline
        self.region_bytes = opened.region_bytes
        self.slot_bytes = opened.slot_bytes
        self.num_slots = opened.num_slots
        if opened.transport == pb.SHARED_MEMORY:
            try:
                self._region = SharedRegion.receive(opened.fd_socket, opened.stream_id, opened.secret,
                                                    opened.region_bytes, timeout=fd_timeout)
            except BaseException:
                self._finish(cancel=True)
                raise
        elif opened.transport == pb.DATA_SOCKET:
            if data_host is None:
                self._finish(cancel=True)
                raise ConveyorError("protocol error: DATA_SOCKET chosen but this client knows no "
                                    "host for it (pass data_host, or ask for transport='inline')")
            try:
                self._data = DataSocket(data_host, opened.data_port, opened.stream_id, opened.secret,
                                        timeout=fd_timeout,
                                        ssl_context=security.data_socket_context(),
                                        server_name=security.tls_server_name or data_host)
            except BaseException:
                self._finish(cancel=True)
                raise
        elif opened.transport != pb.INLINE:
            self._finish(cancel=True)
            raise ConveyorError("protocol error: the daemon chose transport %r" % opened.transport)

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
        dtype = dtype_of(m.dtype)
        shape = tuple(m.shape)
        nbytes = math.prod(shape) * dtype.itemsize if shape else 0
        if (self._region is not None or self._data is not None) and m.images_bytes != nbytes:
            raise ConveyorError("batch %d: images_bytes %d does not match shape %s of %s"
                                % (m.sequence, m.images_bytes, shape, dtype))
        returns = "now"
        if self._region is not None or self._data is not None:
            if nbytes == 0:
                images = np.empty(shape, dtype)
            elif self._region is not None:
                images = self._region.view(m.images_offset, nbytes, dtype, shape)
            else:
                assert self._data is not None
                images = self._data.read(m.slot, nbytes).view(dtype).reshape(shape)
            if nbytes and self.lifetime == "safe":
                images, returns = self._lease_or_copy(m, images)
        else:
            data = m.images  # each read of a bytes field copies it: read it once
            if len(data) != nbytes:
                raise ConveyorError("batch %d: %d inline bytes do not match shape %s of %s"
                                    % (m.sequence, len(data), shape, dtype))
            images = np.frombuffer(data, dtype=dtype).reshape(shape)
        labels = np.array(m.labels, dtype=np.int64)
        indices = np.array(m.sample_indices, dtype=np.int64)
        failures = [SampleFailure(f.sample_index, f.path, f.reason) for f in m.failures]
        batch = Batch(self, images, labels, indices, sequence=m.sequence, epoch=m.epoch,
                      batch_in_epoch=m.batch_in_epoch, position=m.position, offset=m.offset,
                      epoch_samples=m.epoch_samples, end_of_epoch=m.end_of_epoch, slot=m.slot,
                      failures=failures)
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
        if self._region is not None:
            self._region.close()  # deferred while numpy views of it live
        if self._data is not None:
            self._data.close()  # buffers live on while views of them do
        if self._owns_channel:
            self._channel.close()

    def close(self) -> None:
        """Cancels the call if it is still running and releases every batch
        still held (their `images` raise from now on). Idempotent.

        When the stream ends by itself (StreamEnd or an error), batches still
        held stay readable until released: the daemon writes nothing more to
        a finished stream's region, and the mapping lives as long as any view
        of it does."""
        self._finish(cancel=True, release_held=True)


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise InvalidRequest("environment variable %s=%r is not an integer" % (name, value)) from None


_FROM_ADDRESS = object()

# Channels a forked child inherited from its parent's loaders: kept referenced
# so that the child never runs their destructors (see Loader._check_fork).
_FORKED_CHANNELS: List[grpc.Channel] = []
_IMPORT_PID = os.getpid()  # a loader in another process runs in a fork of this one


def open_stream(address: Union[str, grpc.Channel], pipeline: str, batch_size: int, *,
                seed: int = 0, first_epoch: int = 0, num_epochs: int = 1, rank: int = 0,
                world_size: int = 1, credits: int = 3, shuffle: bool = True,
                drop_last: bool = False, transport: Union[str, int] = "auto",
                resume: Optional[Tuple[int, int, int]] = None, auto_release: bool = True,
                on_batch: Optional[Callable[[Batch], None]] = None,
                data_host: Any = _FROM_ADDRESS, security: Optional[Security] = None,
                lifetime: str = "safe") -> Stream:
    """Opens one StreamBatches call (the lower-level API under Loader).

    address: "unix:///path.sock", "host:port" or a grpc.Channel.
    num_epochs: 0 means endless. resume: None or (epoch, offset, world_size)
    - offset is Batch.offset of the last batch consumed at that epoch: samples
      of the epoch's global order all ranks consumed. It may have been saved
      at another world size (elastic resume); world_size is informational.
    transport: "auto" (shared memory on a unix socket; on TCP the data
    socket when the daemon has one, else inline), "shared_memory",
    "data_socket" or "inline".
    data_host: the host to connect a data socket to; by default the host of
    `address` (None when `address` is a unix socket or a grpc.Channel: such
    a stream is never given a data socket).
    security: a conveyor.Security (token, TLS); default Security.from_env().
    lifetime: "safe" (default) or "fast"; see Loader.
    """
    check_lifetime(lifetime)
    try:
        tcode = _TRANSPORTS[transport.lower()] if isinstance(transport, str) else int(transport)
    except KeyError:
        raise InvalidRequest("transport must be one of auto, shared_memory, data_socket, inline; "
                             "got %r" % transport) from None
    if data_host is _FROM_ADDRESS:
        data_host = tcp_host(address)
    req = pb.OpenStream(pipeline=pipeline, batch_size=batch_size, seed=seed, first_epoch=first_epoch,
                        num_epochs=num_epochs, rank=rank, world_size=world_size, credits=credits,
                        shuffle=shuffle, drop_last=drop_last, transport=tcode,
                        accept_data_socket=data_host is not None)
    if resume is not None:
        r_epoch, r_offset, r_world = resume
        req.first_epoch = r_epoch
        req.resume.CopyFrom(pb.ResumePosition(epoch=r_epoch, offset=r_offset,
                                              world_size=r_world))
    return Stream(address, req, auto_release=auto_release, on_batch=on_batch, data_host=data_host,
                  security=security, lifetime=lifetime)


class Loader:
    """Batches of one pipeline for one rank, epoch after epoch.

    Loader(address, pipeline=..., batch_size=..., rank=None, world_size=None,
           seed=0, credits=3, shuffle=True, drop_last=False, transport="auto",
           first_epoch=0, retry=None, local_rank=None)

    address None means default_address() ($CONVEYOR_SERVER, else the node's
    default socket). rank / world_size default to $RANK / $WORLD_SIZE (set by
    torchrun), else 0 / 1: the global rank and world size, which the daemon
    uses for sharding. local_rank defaults to $LOCAL_RANK, else 0: the rank's
    index on its node, informational (every local rank of a node talks to the
    node's one daemon). credits is the prefetch depth: batches the daemon may
    have sent and the client not yet released. drop_last is the remainder
    rule (pad by wrapping, or drop), the same on every rank. security, or
    its parts token / token_file / tls_ca / client_cert / client_key /
    tls_server_name: how to authenticate and whom to trust (conveyor.Security;
    default: Security.from_env(), from $CONVEYOR_TOKEN_FILE and friends). retry: None
    (errors surface at once) or a RetryPolicy: streams of this loader then
    wait for a lost daemon and resume where the trainer was (conveyor.retry).
    lifetime: "safe" (default: kept arrays keep their batch's slot) or
    "fast" (slots go back on release; see the module's docstring).

    loader.epoch(e)        a Stream over epoch e (one gRPC call)
    loader.stream(n)       a Stream over n epochs from the current epoch (0: endless)
    iter(loader)           the current epoch: the first_epoch at first, the next
                           one after a completed epoch, the rest of an epoch
                           left mid-way
    loader.state_dict()    {"pipeline", "epoch", "offset", "world_size", "seed"}:
                           the resume point after the last batch taken (offset:
                           samples of the epoch's global order consumed by
                           all ranks; loadable at any world size)
    loader.load_state_dict(state)  the next stream of that epoch starts there
                           (InvalidRequest if the state is of another pipeline)
    """

    _exit_order = 1  # closed at interpreter exit after streams (conveyor/_exit.py)

    def __init__(self, address: Optional[str], pipeline: str, batch_size: int,
                 rank: Optional[int] = None, world_size: Optional[int] = None, seed: int = 0,
                 credits: int = 3, shuffle: bool = True, drop_last: bool = False,
                 transport: Union[str, int] = "auto", first_epoch: int = 0,
                 retry: Optional[RetryPolicy] = None, local_rank: Optional[int] = None,
                 security: Optional[Security] = None, token: Optional[str] = None,
                 token_file: Optional[str] = None, tls_ca: Optional[str] = None,
                 client_cert: Optional[str] = None, client_key: Optional[str] = None,
                 tls_server_name: Optional[str] = None, lifetime: str = "safe") -> None:
        self.lifetime = check_lifetime(lifetime)
        given = dict(token=token, token_file=token_file, tls_ca=tls_ca, client_cert=client_cert,
                     client_key=client_key, tls_server_name=tls_server_name)
        given = {k: v for k, v in given.items() if v is not None}
        if security is not None and given:
            raise InvalidRequest("give security or its parts (%s), not both" % ", ".join(given))
        self.security = security or (Security(**given) if given else Security.from_env())
        self.address = address if address is not None else default_address()
        self.pipeline = pipeline
        self.batch_size = int(batch_size)
        self.world_size = _env_int("WORLD_SIZE", 1) if world_size is None else int(world_size)
        self.rank = _env_int("RANK", 0) if rank is None else int(rank)
        self.local_rank = _env_int("LOCAL_RANK", 0) if local_rank is None else int(local_rank)
        self.seed = int(seed)
        self.credits = int(credits)
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        self.transport = transport
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise InvalidRequest("retry must be None or a conveyor.RetryPolicy, got %r" % (retry,))
        self.retry = retry
        self._lock = threading.Lock()
        self._pid = os.getpid()          # the process whose channel _channel is
        _exit.track(self)
        self._epoch = int(first_epoch)   # epoch of the resume point
        self._offset = 0                 # samples of _epoch's global order consumed
        self._pending_resume = False     # set by load_state_dict
        self._resume_world = self.world_size  # world size when the offset was saved
        self._channel = None
        self._data_host = tcp_host(grpc_target(self.address))  # None on a unix socket
        self._dataset_size: Optional[int] = None  # cached by batches_per_epoch()

    def _check_fork(self) -> None:
        """After a fork (a DataLoader worker, multiprocessing) the parent's
        channel is not this process's: its sockets and gRPC's threads stayed
        behind. The child leaves it alone (never closes or collects it: that
        would touch the parent's connection state) and opens its own."""
        if self._pid != os.getpid():
            self._lock = threading.Lock()  # the parent may have held it while forking
            if self._channel is not None:
                _FORKED_CHANNELS.append(self._channel)
            self._channel = None
            self._pid = os.getpid()

    def __getstate__(self) -> Dict[str, Any]:
        # Pickled for a spawned worker: everything but the lock and the
        # channel (the new process opens its own).
        state = self.__dict__.copy()
        state["_lock"] = None
        state["_channel"] = None
        state["_pid"] = None
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._pid = os.getpid()
        _exit.track(self)

    @property
    def channel(self) -> grpc.Channel:
        self._check_fork()
        with self._lock:
            if self._channel is None:
                # A channel of its own (local subchannel pool): a retry's fresh
                # channel must not inherit the reconnect backoff of a shared one,
                # and a forked child's must not reuse the parent's connection
                # from gRPC's global pool (its fd is not the child's socket).
                own = self.retry is not None or self._pid != _IMPORT_PID
                self._channel = make_channel(
                    self.address, options=[("grpc.use_local_subchannel_pool", 1)]
                    if own else (), security=self.security)
            return self._channel

    def _on_batch(self, batch: Batch) -> None:
        with self._lock:
            self._epoch, self._offset = resume_point(batch)
            self._resume_world = self.world_size

    def _open_stream(self, first_epoch: int, num_epochs: int,
                     resume: Optional[Tuple[int, int, int]],
                     on_batch: Optional[Callable[[Batch], None]]) -> Stream:
        return open_stream(self.channel, self.pipeline, self.batch_size, seed=self.seed,
                           first_epoch=first_epoch, num_epochs=num_epochs, rank=self.rank,
                           world_size=self.world_size, credits=self.credits, shuffle=self.shuffle,
                           drop_last=self.drop_last, transport=self.transport, resume=resume,
                           on_batch=on_batch, data_host=self._data_host, security=self.security,
                           lifetime=self.lifetime)

    def _open(self, first_epoch: int, num_epochs: int,
              resume: Optional[Tuple[int, int, int]]) -> Union[Stream, RetryingStream]:
        if self.retry is not None:
            return RetryingStream(self, first_epoch, num_epochs, resume)
        return self._open_stream(first_epoch, num_epochs, resume, self._on_batch)

    def _reset_channel(self, stale: Optional[grpc.Channel]) -> None:
        """Drops the channel if it is still `stale` (the retry path: a fresh
        one skips gRPC's reconnect backoff of the old one). A channel another
        stream of this loader already replaced is left alone."""
        with self._lock:
            if self._channel is not stale or stale is None:
                return
            self._channel = None
        stale.close()

    def _resume_for(self, epoch: int, use_progress: bool) -> Optional[Tuple[int, int, int]]:
        self._check_fork()
        with self._lock:
            if (use_progress or self._pending_resume) and epoch == self._epoch and self._offset > 0:
                self._pending_resume = False
                return (self._epoch, self._offset, self._resume_world)
            return None

    def epoch(self, e: int) -> Union[Stream, RetryingStream]:
        """A Stream over epoch e. Starts at the beginning of e, or at the
        position restored by load_state_dict if that lies in epoch e."""
        return self._open(e, 1, self._resume_for(e, use_progress=False))

    def stream(self, num_epochs: int = 0,
               first_epoch: Optional[int] = None) -> Union[Stream, RetryingStream]:
        """A Stream over num_epochs epochs (0: endless) from first_epoch
        (default: the loader's current epoch, resuming mid-epoch if needed)."""
        if first_epoch is None:
            first_epoch = self._epoch
            resume = self._resume_for(first_epoch, use_progress=True)
        else:
            resume = self._resume_for(first_epoch, use_progress=False)
        return self._open(first_epoch, num_epochs, resume)

    def __iter__(self) -> Union[Stream, RetryingStream]:
        return self.stream(num_epochs=1)

    @property
    def current_epoch(self) -> int:
        return self._epoch

    def set_epoch(self, epoch: int) -> None:
        """The epoch iter(loader) / stream() reads next. The position inside
        the current epoch (a loaded state, a loop left mid-way) is kept when
        `epoch` is that epoch, else reading starts at the epoch's beginning."""
        epoch = int(epoch)
        self._check_fork()
        with self._lock:
            if epoch != self._epoch:
                self._epoch = epoch
                self._offset = 0
                self._pending_resume = False
                self._resume_world = self.world_size

    def batches_per_epoch(self) -> int:
        """Batches of a full epoch for this rank: what StreamOpened's
        batches_per_epoch will say (the dataset's size from the daemon,
        split as the daemon's sampler splits it)."""
        if self._dataset_size is None:
            self._dataset_size = int(self.pipeline_info().dataset_size)
        n, w = self._dataset_size, self.world_size
        per_rank = n // w if self.drop_last else -(-n // w)
        return -(-per_rank // self.batch_size)

    def __len__(self) -> int:
        return self.batches_per_epoch()

    def state_dict(self) -> Dict[str, Any]:
        self._check_fork()
        with self._lock:
            return {"pipeline": self.pipeline, "epoch": self._epoch, "offset": self._offset,
                    "world_size": self._resume_world, "seed": self.seed}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self._check_fork()
        saved = state.get("pipeline")
        if saved is not None and saved != self.pipeline:
            raise InvalidRequest(
                "load_state_dict: the state was saved by a loader of pipeline %r, this loader reads "
                "%r; a position in one pipeline's epoch means nothing in another's (use a loader "
                "of pipeline %r, or start %r afresh)" % (saved, self.pipeline, saved, self.pipeline))
        with self._lock:
            self._epoch = int(state["epoch"])
            self._offset = int(state.get("offset", 0))
            self._pending_resume = self._offset > 0
            if "seed" in state:
                self.seed = int(state["seed"])
            self._resume_world = int(state.get("world_size", self.world_size))

    def pipeline_info(self) -> Any:
        """The PipelineInfo of this loader's pipeline (NotFound if unknown)."""
        for p in list_pipelines(self.channel):
            if p.name == self.pipeline:
                return p
        raise NotFound("the daemon has no pipeline %r" % self.pipeline)

    def close(self) -> None:
        self._check_fork()
        if self._channel is not None:
            self._channel.close()
            self._channel = None

    def __enter__(self) -> Loader:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
