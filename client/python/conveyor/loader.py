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

GPU hosts (the daemon on the same host, unix socket):
  pin_memory=True      the stream's mapped memfd is page-locked once for this
      process's CUDA context (cudaHostRegister through PyTorch; unregistered
      at close), so torch.from_numpy(batch.images).cuda(non_blocking=True)
      is an asynchronous copy. SHARED_MEMORY streams only.
  device="cuda:N"      batches come as DeviceBatch objects whose images are
      CUDA tensors: each batch is copied from its pinned slot on a CUDA
      stream of the loader's own; the slot goes back to the daemon only once
      that copy's event completed; the copy of batch n starts when batch n-1
      is handed out (it overlaps the step on n-1); the consumer's current
      stream waits on the event (conveyor/_device_feed.py).
  transport="device_memory", device="cuda:N"   the daemon lands the batches
      in GPU memory itself (a ring of device buffers on the GPU whose UUID
      the client sends, converted there to the pipeline's dtype);
      batch.images is a DeviceArray with __cuda_array_interface__ and
      __dlpack__ (torch.from_dlpack, cupy.asarray, jax.dlpack.from_dlpack
      read it without a copy). It stays valid until the batch is released
      (lifetime="safe": until no array or capsule views it either).
  Without PyTorch/CUDA (device=, pin_memory) or a CUDA driver
  (device_memory) these raise FailedPrecondition saying what is missing; a
  daemon without a usable GPU answers FAILED_PRECONDITION with its reason.

Threads: one gRPC call per stream; the request side is fed by a queue
(Release messages), the responses are read by the thread that iterates.
`batch.release()` may be called from any thread.

Where things are: this module holds Loader and open_stream; Batch is in
conveyor/_batch.py, Stream in conveyor/_stream.py, the transports in
conveyor/_transport.py (one module per kind: _shm, _datasock, _inline,
_device), the device= copies in conveyor/_device_feed.py and _cuda_copy.py, the
resume position and state_dict in conveyor/_position.py, addresses and
channels in conveyor/_channel.py. All are importable from here as before.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Callable, Dict, Optional, Sequence, Tuple, Union

import grpc

import re

from . import _cuda_copy, _exit, _fork, _pinning
from ._device_feed import DeviceStream
from ._batch import (LIFETIMES, Batch, SampleFailure, check_lifetime,  # noqa: F401  (re-exported)
                     dtype_of)
from ._choices import StreamChoices
from ._channel import (DEFAULT_ADDRESS, MAX_MESSAGE_BYTES, default_address,  # noqa: F401
                       grpc_target, list_pipelines, make_channel, stats)
from ._datasock import tcp_host
from ._pool import PoolOptions, PoolStream
from ._pool_servers import ServerSet
from ._position import Position
from ._security import Security
from ._stream import Stream
from ._stubs import pb, pb_grpc  # noqa: F401  (conveyor.loader.pb: the messages, for callers)
from ._transport import BY_NAME as _TRANSPORTS
from .errors import FailedPrecondition, InvalidRequest, NotFound
from .retry import RetryingStream, RetryPolicy, resume_point


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise InvalidRequest("environment variable %s=%r is not an integer" % (name, value)) from None


_FROM_ADDRESS = object()

_IMPORT_PID = os.getpid()  # a loader in another process runs in a fork of this one


def _cuda_ordinal(device: Any) -> int:
    """N of "cuda:N" (or a torch.device; "cuda" is device 0)."""
    m = re.fullmatch(r"cuda(?::(\d+))?", str(device).strip())
    if m is None:
        raise InvalidRequest("device must be \"cuda\" or \"cuda:N\", got %r" % (device,))
    return int(m.group(1) or 0)


def _gpu_uuid(ordinal: int) -> str:
    """The UUID of this process's CUDA device `ordinal`, from the driver."""
    from ._cuda_driver import Driver  # noqa: PLC0415
    try:
        return Driver().uuid(ordinal)
    except FailedPrecondition as e:
        raise FailedPrecondition("transport=\"device_memory\" needs a CUDA device in this "
                                 "process: %s" % e) from None


def open_stream(address: Union[str, grpc.Channel], pipeline: str, batch_size: int, *,
                seed: int = 0, first_epoch: int = 0, num_epochs: int = 1, rank: int = 0,
                world_size: int = 1, credits: int = 3, shuffle: bool = True,
                drop_last: bool = False, transport: Union[str, int] = "auto",
                resume: Optional[Tuple[int, int, int]] = None, auto_release: bool = True,
                on_batch: Optional[Callable[[Batch], None]] = None,
                data_host: Any = _FROM_ADDRESS, security: Optional[Security] = None,
                lifetime: str = "safe", pin_memory: bool = False, device: Any = None,
                gpu_uuid: Optional[str] = None, copier: Any = None, max_batches: int = 0,
                size: Union[None, int, Tuple[int, int]] = None, dtype: Optional[str] = None,
                fields: Optional[Sequence[str]] = None) -> Any:
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
    pin_memory, device: see the module docstring (GPU hosts). With device=
    and a transport other than "device_memory" the result is a
    DeviceStream of DeviceBatch objects (copier: the loader's, default a new
    one). gpu_uuid: with transport="device_memory", the GPU by UUID instead
    of device= (the client then maps the GPU of that UUID).
    max_batches: > 0 ends the stream after that many batches (with resume=,
    any range of a rank's batches; see OpenStream.max_batches).
    size, dtype, fields: this stream's choices within the pipeline's bounds
    (its allowed_sizes / allowed_dtypes; conveyor/_choices.py): size an int
    (square) or (height, width), dtype "uint8", "float32" or "float16",
    fields a list of the pipeline's field names ([]: none); None: the
    pipeline's. stream.pipeline then describes the stream's samples. A
    choice the daemon does not allow is InvalidRequest naming the allowed
    values; one it ignores (a daemon older than the choices) is
    FailedPrecondition.
    """
    check_lifetime(lifetime)
    choices = StreamChoices.of(size, dtype, fields)
    try:
        tcode = _TRANSPORTS[transport.lower()] if isinstance(transport, str) else int(transport)
    except KeyError:
        raise InvalidRequest("transport must be one of auto, shared_memory, data_socket, inline, "
                             "device_memory; got %r" % transport) from None
    ordinal = None
    registrar = None
    if tcode == pb.DEVICE_MEMORY:
        if pin_memory:
            raise InvalidRequest("pin_memory=True is for shared_memory streams; a device_memory "
                                 "stream's batches are in GPU memory already")
        if device is not None:
            ordinal = _cuda_ordinal(device)
            if gpu_uuid is None:
                gpu_uuid = _gpu_uuid(ordinal)
        if not gpu_uuid:
            raise InvalidRequest("transport=\"device_memory\" needs device=\"cuda:N\" (or "
                                 "gpu_uuid=): the GPU the batches land in")
    elif device is not None:
        # The client-side copy: from pinned shared-memory slots.
        _cuda_ordinal(device)
        if tcode not in (pb.TRANSPORT_AUTO, pb.SHARED_MEMORY):
            raise InvalidRequest("device=%r copies from pinned shared memory: use transport="
                                 "\"auto\" or \"shared_memory\" (or \"device_memory\"), not %r"
                                 % (device, transport))
        tcode = pb.SHARED_MEMORY
        if copier is None:
            copier = _cuda_copy.make_copier(str(device))
        registrar = _pinning.make_registrar()
    elif gpu_uuid is not None:
        raise InvalidRequest("gpu_uuid= is for transport=\"device_memory\"")
    if pin_memory and registrar is None:
        if tcode not in (pb.TRANSPORT_AUTO, pb.SHARED_MEMORY):
            raise InvalidRequest("pin_memory=True is for shared_memory streams, not transport=%r"
                                 % (transport,))
        registrar = _pinning.make_registrar()
    if data_host is _FROM_ADDRESS:
        data_host = tcp_host(address)
    req = pb.OpenStream(pipeline=pipeline, batch_size=batch_size, seed=seed, first_epoch=first_epoch,
                        num_epochs=num_epochs, rank=rank, world_size=world_size, credits=credits,
                        shuffle=shuffle, drop_last=drop_last, transport=tcode,
                        accept_data_socket=data_host is not None, max_batches=max_batches)
    choices.apply(req)
    if resume is not None:
        r_epoch, r_offset, r_world = resume
        req.first_epoch = r_epoch
        req.resume.CopyFrom(pb.ResumePosition(epoch=r_epoch, offset=r_offset,
                                              world_size=r_world))
    if gpu_uuid:
        req.device.gpu_uuid = gpu_uuid
    if device is not None and tcode != pb.DEVICE_MEMORY:
        host = _honoured(choices, Stream(address, req, auto_release=False, on_batch=None,
                                         data_host=data_host, security=security, lifetime="fast",
                                         registrar=registrar))
        return DeviceStream(host, copier, credits, on_batch)
    return _honoured(choices, Stream(address, req, auto_release=auto_release, on_batch=on_batch,
                                     data_host=data_host, security=security, lifetime=lifetime,
                                     registrar=registrar, device_ordinal=ordinal))


def _honoured(choices: StreamChoices, stream: Stream) -> Stream:
    """`stream`, once its StreamOpened.pipeline shows the choices applied;
    a daemon older than the choices ignores them (it drops the request's
    fields unread): FailedPrecondition then, rather than batches of another
    shape than asked for."""
    if choices.empty:
        return stream
    why = choices.unhonoured(stream.pipeline)
    if why is None:
        return stream
    stream.close()
    raise FailedPrecondition(
        "the daemon opened stream %d of pipeline %r without the choice of %s: a conveyord "
        "without per-stream choices (older than this client)?"
        % (stream.stream_id, stream.pipeline.name, why))


class Loader:
    """Batches of one pipeline for one rank, epoch after epoch.

    Loader(address, pipeline=..., batch_size=..., rank=None, world_size=None,
           seed=0, credits=3, shuffle=True, drop_last=False, transport="auto",
           first_epoch=0, retry=None, local_rank=None, pin_memory=False, device=None,
           size=None, dtype=None, fields=None)

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
    pin_memory / device: GPU hosts (the module's docstring): pin_memory=True
    page-locks shared-memory slots; device="cuda:N" yields batches with
    CUDA tensors copied on the loader's own CUDA stream; with
    transport="device_memory" the daemon lands them on that GPU itself.
    servers=[...]: draw this rank's batches from several daemons at once,
    the node's own first: unix sockets, "host:port", and DNS names that
    resolve to several daemons (re-resolved while the epoch runs). Batches
    come in the same order with the same bytes as from one daemon, exactly
    once, whatever daemons fail, stall, join or leave; pool= (a
    conveyor.PoolOptions) sets the policy ("local_first" or "balanced"),
    range size and deadlines (conveyor/_pool.py). address is then
    servers[0]; retry=, device= and pin_memory are for one daemon.
    size / dtype / fields: the choices of this loader's streams within the
    pipeline's bounds (open_stream): an output size (an int or (height,
    width)), "uint8" / "float32" / "float16", a list of the pipeline's
    field names ([]: none); None: the pipeline's.

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
    loader.set_size(s)     the output size of the streams opened from now on
                           (progressive resizing: small early epochs, then
                           set_size(None), the pipeline's); the order of the
                           samples and state_dict do not depend on it
    loader.stream_info()   the PipelineInfo of this loader's streams (shape,
                           dtype and fields after the choices)
    """

    _exit_order = 1  # closed at interpreter exit after streams (conveyor/_exit.py)

    def __init__(self, address: Optional[str] = None, pipeline: Optional[str] = None,
                 batch_size: Optional[int] = None,
                 rank: Optional[int] = None, world_size: Optional[int] = None, seed: int = 0,
                 credits: int = 3, shuffle: bool = True, drop_last: bool = False,
                 transport: Union[str, int] = "auto", first_epoch: int = 0,
                 retry: Optional[RetryPolicy] = None, local_rank: Optional[int] = None,
                 security: Optional[Security] = None, token: Optional[str] = None,
                 token_file: Optional[str] = None, tls_ca: Optional[str] = None,
                 client_cert: Optional[str] = None, client_key: Optional[str] = None,
                 tls_server_name: Optional[str] = None, lifetime: str = "safe",
                 pin_memory: bool = False, device: Any = None,
                 servers: Optional[Sequence[str]] = None,
                 pool: Optional[PoolOptions] = None,
                 size: Union[None, int, Tuple[int, int]] = None, dtype: Optional[str] = None,
                 fields: Optional[Sequence[str]] = None) -> None:
        if pipeline is None or batch_size is None:
            raise TypeError("Loader needs pipeline= and batch_size=")
        self._choices = StreamChoices.of(size, dtype, fields)
        self.lifetime = check_lifetime(lifetime)
        self._servers: Optional[ServerSet] = None
        self.pool_options: Optional[PoolOptions] = None
        if servers is not None:
            self._servers = ServerSet(servers)
            self.pool_options = (pool if pool is not None else PoolOptions()).check()
            if address is not None and address != self._servers.entries[0]:
                raise InvalidRequest("give address or servers=, not both: with servers= the "
                                     "first entry is the node's daemon")
            if retry is not None:
                raise InvalidRequest("retry= is for one daemon: with servers= the ranges of a "
                                     "failed daemon go to the others (conveyor.PoolOptions sets "
                                     "the deadlines)")
            if device is not None or pin_memory:
                raise InvalidRequest("device= and pin_memory are for one daemon on this host, "
                                     "not servers=; copy batches to the GPU yourself")
            address = self._servers.entries[0]
        elif pool is not None:
            raise InvalidRequest("pool= sets how servers= are used: give servers= too")
        self.pin_memory = bool(pin_memory)
        self.device = device
        self._copier: Any = None  # the loader's own CUDA stream (device=, client-side copy)
        client_copy = device is not None and not (
            isinstance(transport, str) and transport.lower() == "device_memory"
            or transport == pb.DEVICE_MEMORY)
        if client_copy:
            _cuda_ordinal(device)
            if retry is not None:
                raise InvalidRequest("device=%r with retry= is not supported: the device copies "
                                     "hold slots across a reconnect; use transport="
                                     "\"device_memory\" or pin_memory=True with retry" % (device,))
            self._copier = _cuda_copy.make_copier(str(device))
        elif self.pin_memory:
            _pinning.make_registrar()  # a clear error now, not at the first stream
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
        self._position = Position(first_epoch, self.world_size)  # the resume point, state_dict
        self._channel = None
        self._data_host = tcp_host(grpc_target(self.address))  # None on a unix socket
        self._dataset_size: Optional[int] = None  # cached by batches_per_epoch()

    def _check_fork(self) -> None:
        """After a fork (a DataLoader worker, multiprocessing) the parent's
        channel is not this process's: its sockets and gRPC's threads stayed
        behind. The child leaves it alone (never closes or collects it: that
        would touch the parent's connection state) and opens its own."""
        if self._pid != os.getpid():
            self._detach_after_fork()

    def _detach_after_fork(self) -> None:
        # Also called by conveyor/_fork.py's at-fork hook in the child. The
        # inherited channel stays referenced there for good (conveyor/_fork.py).
        if self._pid == os.getpid():
            return
        self._lock = threading.Lock()  # the parent may have held it while forking
        self._position.after_fork()
        _fork.keep(self._channel)
        self._channel = None
        self._pid = os.getpid()

    def __getstate__(self) -> Dict[str, Any]:
        # Pickled for a spawned worker: everything but the lock and the
        # channel (the new process opens its own).
        state = self.__dict__.copy()
        state["_lock"] = None
        state["_channel"] = None
        state["_pid"] = None
        state["_copier"] = None  # a CUDA stream of this process; the new one makes its own
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
        epoch, offset = resume_point(batch)
        self._position.advance(epoch, offset, self.world_size)

    def _open_stream(self, first_epoch: int, num_epochs: int,
                     resume: Optional[Tuple[int, int, int]],
                     on_batch: Optional[Callable[[Batch], None]],
                     choices: Optional[StreamChoices] = None) -> Stream:
        # choices: a retried stream's own (what it was opened with), else the loader's.
        c = self._choices if choices is None else choices
        return open_stream(self.channel, self.pipeline, self.batch_size, seed=self.seed,
                           first_epoch=first_epoch, num_epochs=num_epochs, rank=self.rank,
                           world_size=self.world_size, credits=self.credits, shuffle=self.shuffle,
                           drop_last=self.drop_last, transport=self.transport, resume=resume,
                           on_batch=on_batch, data_host=self._data_host, security=self.security,
                           lifetime=self.lifetime, pin_memory=self.pin_memory,
                           device=self.device, copier=self._copier, size=c.size,
                           dtype=c.dtype, fields=c.fields)

    def _open(self, first_epoch: int, num_epochs: int,
              resume: Optional[Tuple[int, int, int]]) -> Union[Stream, RetryingStream, PoolStream]:
        if self._servers is not None:
            self._check_fork()
            assert self.pool_options is not None
            return PoolStream(self._servers, self.pool_options, pipeline=self.pipeline,
                              batch_size=self.batch_size, seed=self.seed, rank=self.rank,
                              world_size=self.world_size, shuffle=self.shuffle,
                              drop_last=self.drop_last, transport=self.transport,
                              security=self.security,
                              first_epoch=first_epoch, num_epochs=num_epochs, resume=resume,
                              on_batch=self._on_batch, open_stream=open_stream,
                              choices=self._choices)
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
        return self._position.resume_for(epoch, use_progress)

    def epoch(self, e: int) -> Union[Stream, RetryingStream, PoolStream]:
        """A Stream over epoch e. Starts at the beginning of e, or at the
        position restored by load_state_dict if that lies in epoch e."""
        return self._open(e, 1, self._resume_for(e, use_progress=False))

    def stream(self, num_epochs: int = 0,
               first_epoch: Optional[int] = None) -> Union[Stream, RetryingStream, PoolStream]:
        """A Stream over num_epochs epochs (0: endless) from first_epoch
        (default: the loader's current epoch, resuming mid-epoch if needed)."""
        if first_epoch is None:
            first_epoch = self._position.epoch
            resume = self._resume_for(first_epoch, use_progress=True)
        else:
            resume = self._resume_for(first_epoch, use_progress=False)
        return self._open(first_epoch, num_epochs, resume)

    def __iter__(self) -> Union[Stream, RetryingStream, PoolStream]:
        return self.stream(num_epochs=1)

    @property
    def current_epoch(self) -> int:
        return self._position.epoch

    def set_epoch(self, epoch: int) -> None:
        """The epoch iter(loader) / stream() reads next. The position inside
        the current epoch (a loaded state, a loop left mid-way) is kept when
        `epoch` is that epoch, else reading starts at the epoch's beginning."""
        self._check_fork()
        self._position.set_epoch(int(epoch), self.world_size)

    @property
    def size(self) -> Optional[Tuple[int, int]]:
        """(height, width) the loader's streams ask for; None: the pipeline's."""
        return self._choices.size

    @property
    def dtype(self) -> Optional[str]:
        """The dtype name the loader's streams ask for; None: the pipeline's."""
        return self._choices.dtype

    @property
    def fields(self) -> Optional[Tuple[str, ...]]:
        """The field names the loader's streams ask for; None: every field."""
        return self._choices.fields

    def set_size(self, size: Union[None, int, Tuple[int, int]]) -> None:
        """The output size of the streams opened from now on (epoch(),
        stream(), iter(loader)): an int (square), (height, width), or None
        for the pipeline's own. Streams already open keep theirs (a retried
        stream too). The daemon must allow it (the pipeline's allowed_sizes).
        The samples' order and the resume position do not depend on it, so
        progressive resizing is a set_size() between epochs."""
        self._choices = self._choices.with_size(size)

    def stream_info(self) -> Any:
        """The PipelineInfo of the streams this loader opens now: the
        pipeline's (pipeline_info()) with the loader's size, dtype and fields,
        as StreamOpened.pipeline will describe them (the daemon still judges
        whether the pipeline allows them)."""
        return self._choices.stream_info(self.pipeline_info())

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

    def __getitem__(self, index: Any) -> Any:
        # What DataLoader(Loader(...)) reaches first (its sampler indexes the
        # "dataset"): say what to do instead of "not subscriptable".
        raise TypeError(
            "a Loader is the loader, not a dataset: iterate it directly (for batch in loader), "
            "or under torch wrap it in a DataLoader as "
            "DataLoader(conveyor.torch.ConveyorDataset(loader), batch_size=None)")

    def state_dict(self) -> Dict[str, Any]:
        self._check_fork()
        return self._position.state_dict(self.pipeline, self.seed)

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self._check_fork()
        seed = self._position.load(state, self.pipeline, self.world_size)
        if seed is not None:
            self.seed = seed

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
