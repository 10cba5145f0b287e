"""PoolStream: one rank's batches drawn from several daemons at once (the
node's own and any number of remote ones), in order and exactly once, with
no dispatcher: the client pulls.

Why it works: a rank's batches are a pure function of (seed, epoch, rank,
world_size, position), so any daemon serving the same dataset and pipeline
can produce any run of them byte for byte. The client cuts its rank's
stream into ranges of `range_batches` batches; the range from batch k of
epoch e is a stream opened at epoch e with resume {e, base + k × batch_size
× world_size} (base: the resume offset of the stream's first epoch, else 0)
and max_batches n, which runs on into the next epochs when the range does.
Each daemon has `streams_per_daemon` worker threads (2: the next range's
stream fills while the last batches of the current one are made, so the
daemon never idles between ranges); each takes the lowest range nobody
holds, reads it whole and takes the next, so a faster daemon serves more
ranges. The trainer takes batches in their global order from a reorder
buffer.

Memory: a range's stream has `range_batches` credits, so a daemon fills a
whole range without waiting for the trainer; a daemon holds at most
`ranges_ahead` ranges not yet consumed (more only to redo a range that comes
before them, after a failure). The buffer therefore holds at most
daemons × ranges_ahead × range_batches batches, in the daemons' slots
(shared memory on this host, the data socket's buffers in this process for
remote ones). A range's stream never reuses a slot, so arrays kept after
their batch was released are never overwritten (the guarantee of
lifetime="safe", without its leases or copies). By default range_batches
is chosen so that one daemon's share stays within `buffer_bytes` (512 MiB):
batch bytes × ranges_ahead × range_batches, range_batches between 1 and 16.

Failures: a daemon whose stream fails (killed, drained, unreachable), or
that delivers nothing for `stall_timeout` seconds while the trainer waits
for it (stopped, partitioned), loses its unfinished ranges to the others
from the first batch it did not deliver: no batch is lost and none comes
twice. Batches it delivered stay readable. It is tried again after a backoff
(0.5 s doubling to 10 s). A daemon whose pipeline differs from the first
daemon's (PipelineInfo.fingerprint, or its size and shape) is refused for
the stream's life, with a RuntimeWarning naming the part that differs; so is
one that refuses the request (unknown pipeline, access denied, a size,
dtype or field its pipeline does not allow, or a daemon that ignores such
a choice). Once every daemon of a servers= list without DNS names refused,
the stream raises the first one's refusal, naming each. Otherwise it
raises Unavailable only when no batch came from any daemon for
`unavailable_timeout` seconds while the trainer waited, naming each
daemon's state.

Policies: "local_first" (default): the first entry of servers= (the node's
daemon) takes ranges whenever it can; the others take ranges only while the
trainer waited for a batch in the last 2 seconds (the local daemon alone is
too slow) or the local daemon is unusable. "balanced": every daemon takes
ranges whenever it can.

Thread-safety: iterate from one thread; close() and stats() from any.
"""

from __future__ import annotations

import copy
import heapq
import threading
import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import grpc

from ._batch import Batch
from ._choices import StreamChoices
from ._channel import make_channel
from ._closing import ClosesOnExit
from ._datasock import tcp_host
from ._pool_servers import Endpoint, ServerSet
from ._stubs import pb, pb_grpc
from .errors import (AccessDenied, ConveyorError, DataError, InvalidRequest, NotFound,
                     Unavailable, from_rpc_error)

POLICIES = ("local_first", "balanced")
_STARVED_RECENTLY_S = 2.0   # local_first: remote daemons help this long after a wait
_BACKOFF_FIRST_S = 0.5
_BACKOFF_MAX_S = 10.0
_CHECK_TIMEOUT_S = 5.0      # ListPipelines when a worker (re)connects


@dataclass
class PoolOptions:
    """How a Loader with servers= spreads a rank's batches (see conveyor._pool).

    policy: "local_first" or "balanced".
    range_batches: batches per range (1 … 64): each range is one stream with
        that many credits. None (default): the most, up to 16, that keeps
        ranges_ahead ranges of a daemon within buffer_bytes.
    ranges_ahead: ranges a daemon may hold that the trainer has not consumed
        (at least streams_per_daemon, else they cannot all work).
    buffer_bytes: with range_batches None, the batch bytes one daemon may
        hold for the trainer.
    stall_timeout: seconds without a batch from a daemon the trainer waits
        on before its ranges go to others.
    unavailable_timeout: seconds the trainer may wait with no batch coming
        from any daemon before the stream raises Unavailable.
    resolve_every: seconds between DNS resolutions of named servers.
    streams_per_daemon: ranges a daemon serves at once (one worker thread
        each): with 2 the next range's stream opens and fills while the last
        batches of the current one are made, so the daemon never idles
        between ranges.
    """
    policy: str = "local_first"
    range_batches: Optional[int] = None
    ranges_ahead: int = 4
    buffer_bytes: int = 512 << 20
    stall_timeout: float = 30.0
    unavailable_timeout: float = 60.0
    resolve_every: float = 5.0
    streams_per_daemon: int = 2

    def check(self) -> "PoolOptions":
        if self.policy not in POLICIES:
            raise InvalidRequest("pool policy must be one of %s, got %r"
                                 % (", ".join(POLICIES), self.policy))
        if self.range_batches is not None and not 1 <= int(self.range_batches) <= 64:
            raise InvalidRequest("range_batches must be within [1, 64] (the credits of a range's "
                                 "stream), got %r" % (self.range_batches,))
        if int(self.streams_per_daemon) < 1:
            raise InvalidRequest("streams_per_daemon must be at least 1, got %r"
                                 % (self.streams_per_daemon,))
        if int(self.ranges_ahead) < int(self.streams_per_daemon):
            raise InvalidRequest("ranges_ahead must be at least streams_per_daemon (%d), got %r"
                                 % (self.streams_per_daemon, self.ranges_ahead))
        if not int(self.buffer_bytes) > 0:
            raise InvalidRequest("buffer_bytes must be positive, got %r" % (self.buffer_bytes,))
        for name in ("stall_timeout", "unavailable_timeout", "resolve_every"):
            if not float(getattr(self, name)) > 0:
                raise InvalidRequest("%s must be a positive number of seconds, got %r"
                                     % (name, getattr(self, name)))
        return self


def auto_range_batches(info: Any, batch_size: int, ranges_ahead: int, buffer_bytes: int) -> int:
    """The most batches per range, 1 … 16, such that ranges_ahead ranges of
    batch_size samples of `info`'s shape and dtype fit in buffer_bytes."""
    sample = _DTYPE_BYTES.get(info.dtype, 4)
    for d in info.sample_shape:
        sample *= max(int(d), 1)
    batch = max(sample * batch_size, 1)
    return max(1, min(16, buffer_bytes // (ranges_ahead * batch)))


_DTYPE_BYTES = {pb.UINT8: 1, pb.FLOAT16: 2, pb.BFLOAT16: 2, pb.FLOAT32: 4}


# --- what a daemon must agree on --------------------------------------------

_SHAPE_FIELDS = ("dataset_size", "sample_shape", "dtype", "layout", "kind")


def fingerprint_difference(reference: Any, other: Any) -> Optional[str]:
    """None when two PipelineInfos promise the same batches, else the part
    that differs in words ("transform (mode: 0 vs 1)")."""
    for field in _SHAPE_FIELDS:
        a, b = getattr(reference, field), getattr(other, field)
        if list(a) != list(b) if field == "sample_shape" else a != b:
            return "%s (%s vs %s)" % (field, list(a) if field == "sample_shape" else a,
                                      list(b) if field == "sample_shape" else b)
    ref, oth = dict(reference.fingerprint), dict(other.fingerprint)
    if not oth and ref:
        return "fingerprint (the daemon reports none: an older conveyord)"
    for part in sorted(set(ref) | set(oth)):
        a, b = ref.get(part), oth.get(part)
        if a == b:
            continue
        if a is None or b is None:
            return "%s (present on one daemon only)" % part
        # Parts written as name=value; pairs: name the first field that differs.
        fa = dict(kv.partition("=")[::2] for kv in a.split(";") if "=" in kv)
        fb = dict(kv.partition("=")[::2] for kv in b.split(";") if "=" in kv)
        if fa and fb:
            for name in list(fa) + [n for n in fb if n not in fa]:
                if fa.get(name) != fb.get(name):
                    return "%s (%s: %s vs %s)" % (part, name, fa.get(name), fb.get(name))
        return "%s (%s vs %s)" % (part, a, b)
    return None


# --- ranges -----------------------------------------------------------------

@dataclass(order=True)
class _Range:
    """Batches g … g+count-1 of the pool stream: a stream opened at `epoch`
    (resumed at `offset` when that is not 0) with max_batches `count`; it
    runs on into the next epochs when the range does."""
    g: int                  # global index (over the pool stream) of its first batch
    count: int = 0
    epoch: int = 0          # the epoch of its first batch
    first: int = 0          # its first batch's index in that epoch (as the pool counts)
    offset: int = 0         # the resume offset of its first batch
    epoch_samples: int = 0  # this rank's samples of that epoch (Batch.epoch_samples)
    position0: int = 0      # this rank's samples of that epoch before the range


class _Epochs:
    """The stream's batches cut into ranges (endless streams too). The
    first epoch starts at the resume offset (it may be shorter); every
    later epoch has the same number of batches."""

    def __init__(self, dataset_size: int, batch_size: int, world_size: int, drop_last: bool,
                 first_epoch: int, num_epochs: int, resume_offset: int, range_batches: int) -> None:
        self.n, self.b, self.w = dataset_size, batch_size, world_size
        self.drop_last = drop_last
        self.first_epoch, self.num_epochs = first_epoch, num_epochs
        self.resume_offset = resume_offset
        self.range_batches = range_batches
        self._g = 0
        self.total: Optional[int] = None  # batches of the whole stream (None: endless)
        if self.samples_of(first_epoch) == 0 or self.samples_of(first_epoch + 1) == 0:
            raise InvalidRequest(
                "epoch %d from offset %d leaves no samples for rank's %d-way share (dataset of %d "
                "samples, drop_last=%s)" % (first_epoch, resume_offset, world_size, dataset_size,
                                            drop_last))
        self._first_batches = self.batches_of(first_epoch)
        self._later_batches = self.batches_of(first_epoch + 1)
        if num_epochs > 0:
            self.total = self._first_batches + (num_epochs - 1) * self._later_batches

    def base(self, epoch: int) -> int:
        return self.resume_offset if epoch == self.first_epoch else 0

    def samples_of(self, epoch: int) -> int:
        left = self.n - self.base(epoch)
        if left <= 0:
            return 0
        return left // self.w if self.drop_last else -(-left // self.w)

    def batches_of(self, epoch: int) -> int:
        return -(-self.samples_of(epoch) // self.b)

    def epochs_left(self, epoch: int) -> int:
        """num_epochs for a stream starting at `epoch` (0: endless)."""
        return 0 if self.num_epochs == 0 else self.first_epoch + self.num_epochs - epoch

    def range_at(self, g: int, count: int) -> _Range:
        """The range of `count` batches from global batch g."""
        if g < self._first_batches:
            epoch, k = self.first_epoch, g
        else:
            later = g - self._first_batches
            epoch = self.first_epoch + 1 + later // self._later_batches
            k = later % self._later_batches
        return _Range(g, count, epoch, k, self.base(epoch) + k * self.b * self.w,
                      self.samples_of(epoch), k * self.b)

    def next_range(self) -> Optional[_Range]:
        count = self.range_batches
        if self.total is not None:
            count = min(count, self.total - self._g)
            if count <= 0:
                return None
        r = self.range_at(self._g, count)
        self._g += count
        return r


# --- daemons ----------------------------------------------------------------

class _Job:
    """A range being read from one daemon."""

    def __init__(self, worker: "_Worker", rng: _Range, now: float) -> None:
        self.worker = worker
        self.range = rng
        self.stream: Any = None
        self.received = 0
        self.consumed = 0
        self.finished = False   # all of its batches were received
        self.abandoned = False  # its rest went to other daemons
        self.progress = now     # when it last delivered a batch (or was claimed)

    @property
    def over(self) -> bool:
        return self.finished or self.abandoned


class _Worker:
    """One daemon of the pool and the thread that reads its ranges."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self.channel: Optional[grpc.Channel] = None
        self.jobs: List[_Job] = []
        self.failures = 0
        self.usable_at = 0.0
        self.state = "connecting"  # connecting, ready, backoff, refused, retired
        self.last_error: Optional[str] = None
        self.refused: Optional[str] = None
        self.refusal: Optional[BaseException] = None  # the error that refused it
        self.retired = False
        self.ranges = 0
        self.batches = 0
        self.threads: List[threading.Thread] = []
        self.connect_lock = threading.Lock()  # one (re)connection at a time

    def describe(self) -> Dict[str, Any]:
        return {"address": self.endpoint.address, "name": self.endpoint.server_name,
                "local": self.endpoint.is_local, "state": self.state, "ranges": self.ranges,
                "batches": self.batches, "in_flight": sum(not j.over for j in self.jobs),
                "last_error": self.last_error}


def _classify(e: BaseException) -> str:
    """'data': the batches themselves fail (any daemon would fail them);
    'refuse': this daemon will never serve the request; 'retry': a failure
    of the daemon or the network."""
    if isinstance(e, DataError):
        return "data"
    if isinstance(e, (NotFound, AccessDenied, InvalidRequest)):
        return "refuse"
    return "retry"


class PoolStream(ClosesOnExit):
    """An iterator of one rank's Batch objects from several daemons.

    Made by Loader(servers=[...]).epoch() / .stream(). Batches come in the
    order, with the bytes, of a single daemon's stream of the same request.
    Each batch is released when the next is taken (or by batch.release());
    Batch.batch_in_epoch, position and epoch_samples count the whole epoch
    as one stream would, Batch.sequence numbers the batch in the range's
    stream that carried it.

    Attributes: pipeline (the PipelineInfo of the stream's samples: the
    reference's, with the stream's size, dtype and fields), reference (the
    first daemon's PipelineInfo of the pipeline, ListPipelines'), batches_per_epoch,
    samples_per_epoch (of the first epoch), total_batches (None: endless),
    starved_seconds (how long the trainer waited for batches), refused
    ({address: reason}). stats(): per daemon, its state and what it served.
    """

    _exit_order = 0

    def __init__(self, servers: ServerSet, options: PoolOptions, *, pipeline: str,
                 batch_size: int, seed: int, rank: int, world_size: int, shuffle: bool,
                 drop_last: bool, transport: Any, security: Any,
                 first_epoch: int, num_epochs: int, resume: Optional[Tuple[int, int, int]],
                 on_batch: Optional[Callable[[Batch], None]],
                 open_stream: Callable[..., Any],
                 choices: Optional[StreamChoices] = None) -> None:
        self._servers = servers
        # Every range's stream, on every daemon, asks for the same choices;
        # open_stream refuses a stream that does not honour them (an older
        # daemon), which refuses that daemon (_classify).
        self._choices = choices if choices is not None else StreamChoices()
        self._opt = options
        self._request = dict(pipeline=pipeline, batch_size=batch_size, seed=seed, rank=rank,
                             world_size=world_size, shuffle=shuffle, drop_last=drop_last,
                             transport=transport)
        self._security = security
        self._on_batch = on_batch
        self._open_stream = open_stream
        self._cond = threading.Condition()
        self._closed = False
        self._workers: Dict[str, _Worker] = {}
        self._ready: Dict[int, Tuple[Batch, _Job]] = {}
        self._errors: Dict[int, BaseException] = {}
        self._pending: List[_Range] = []   # ranges given back, lowest first
        self._next = 0                     # global index of the next batch to hand out
        self._current: Optional[Tuple[Batch, _Job]] = None
        self._last_wait_end = 0.0
        self._last_batch_at = time.monotonic()
        self.starved_seconds = 0.0
        self.refused: Dict[str, str] = {}
        self._warned: set = set()
        self._waiting = False              # the trainer waits for a batch now
        self._requeued = 0                 # ranges (rests of ranges) given to others
        self._to_close: List[Any] = []     # streams and channels to close outside the lock

        if servers.has_names:
            servers.resolve()
        # Daemons are compared by their pipelines' own PipelineInfos (the
        # same choices then give the same stream); the range size by the
        # stream's samples.
        self.reference = self._reference(servers.current())
        self.pipeline = self._choices.stream_info(self.reference)
        if resume is not None:
            first_epoch, offset = int(resume[0]), int(resume[1])
        else:
            offset = 0
        self.range_batches = int(options.range_batches or auto_range_batches(
            self.pipeline, batch_size, options.ranges_ahead, options.buffer_bytes))
        self._epochs = _Epochs(int(self.reference.dataset_size), batch_size, world_size, drop_last,
                               first_epoch, num_epochs, offset, self.range_batches)
        self.total_batches = self._epochs.total
        self.samples_per_epoch = self._epochs.samples_of(first_epoch)
        self.batches_per_epoch = self._epochs.batches_of(first_epoch)
        self._fresh: Optional[_Range] = self._epochs.next_range()
        with self._cond:
            for ep in servers.current():
                self._add_worker(ep)
        self._resolver: Optional[threading.Thread] = None
        if servers.has_names:
            self._resolver = threading.Thread(target=self._resolve_loop, daemon=True,
                                              name="conveyor-pool-resolve")
            self._resolver.start()

    # --- set-up -------------------------------------------------------------
    def _reference(self, endpoints: List[Endpoint]) -> Any:
        """The PipelineInfo every daemon must match: the first daemon's
        that answers (the local one when it is up)."""
        why = []
        name = self._request["pipeline"]
        for ep in endpoints:
            ch = make_channel(ep.address, security=self._security_for(ep))
            try:
                infos = pb_grpc.ConveyorStub(ch).ListPipelines(pb.ListPipelinesRequest(),
                                                               timeout=_CHECK_TIMEOUT_S).pipelines
            except grpc.RpcError as e:
                why.append("%s: %s" % (ep.address, from_rpc_error(e, "ListPipelines")))
                continue
            finally:
                ch.close()
            for info in infos:
                if info.name == name:
                    return info
            why.append("%s: no pipeline %r" % (ep.address, name))
        if not endpoints:
            why.append("no address (names: %s)" % (self._servers.errors or "none"))
        raise Unavailable("no daemon of servers=%r serves pipeline %r: %s"
                          % (self._servers.entries, name, "; ".join(why)))

    def _security_for(self, ep: Endpoint) -> Any:
        sec = self._security
        if ep.server_name and sec is not None and sec.tls and not sec.tls_server_name:
            sec = copy.copy(sec)
            sec.tls_server_name = ep.server_name
        return sec

    def _add_worker(self, ep: Endpoint) -> None:
        w = _Worker(ep)
        self._workers[ep.address] = w
        for lane in range(self._opt.streams_per_daemon):
            t = threading.Thread(target=self._run, args=(w,), daemon=True,
                                 name="conveyor-pool-%s-%d" % (ep.address, lane))
            w.threads.append(t)
            t.start()

    def _resolve_loop(self) -> None:
        while True:
            with self._cond:
                if self._cond.wait_for(lambda: self._closed, timeout=self._opt.resolve_every):
                    return
            self._servers.resolve()
            now_set = {ep.address: ep for ep in self._servers.current()}
            with self._cond:
                if self._closed:
                    return
                for addr, ep in now_set.items():
                    w = self._workers.get(addr)
                    if w is None or (w.retired and not w.jobs and addr not in self.refused):
                        self._add_worker(ep)
                for addr, w in self._workers.items():
                    if addr not in now_set and not w.retired:
                        w.retired = True  # finishes the range it reads, takes no more
                        w.state = "retired"
                self._cond.notify_all()

    # --- the workers ----------------------------------------------------------
    def _local_usable(self) -> bool:
        return any(w.endpoint.is_local and w.state in ("ready", "connecting")
                   for w in self._workers.values())

    def _claimable(self, w: _Worker, now: float) -> Optional[_Range]:
        """The range w may take now, if any (REQUIRES: the lock)."""
        if w.retired or w.refused or now < w.usable_at:
            return None
        rng = self._pending[0] if self._pending else self._fresh
        if rng is None:
            return None
        # Every job in w.jobs holds (or will hold) batches the trainer has
        # not consumed; a range that comes before all of them is taken anyway
        # (the rest of a failed range: the trainer needs it first).
        if (len(w.jobs) >= self._opt.ranges_ahead
                and not all(rng.g < j.range.g for j in w.jobs)):
            return None
        if self._opt.policy == "local_first" and not w.endpoint.is_local:
            starved = self._waiting or now - self._last_wait_end <= _STARVED_RECENTLY_S
            if not starved and self._local_usable():
                return None
        return rng

    def _take(self, rng: _Range) -> None:
        if self._pending and self._pending[0] is rng:
            heapq.heappop(self._pending)
        else:
            self._fresh = self._epochs.next_range()

    def _run(self, w: _Worker) -> None:
        while True:
            with self._cond:
                rng = None
                while not self._closed and not w.refused and not w.retired:
                    now = time.monotonic()
                    rng = self._claimable(w, now)
                    if rng is not None:
                        break
                    self._cond.wait(0.1 if now >= w.usable_at else min(w.usable_at - now, 0.5))
                if rng is None:
                    return
                self._take(rng)
                job = _Job(w, rng, time.monotonic())
                w.jobs.append(job)
            self._serve(w, job)

    def _connect(self, w: _Worker) -> None:
        """A channel to w's daemon, whose pipeline is checked against the
        reference (raises: refused, or a failure to retry)."""
        ch = make_channel(w.endpoint.address, options=[("grpc.use_local_subchannel_pool", 1)],
                          security=self._security_for(w.endpoint))
        try:
            infos = pb_grpc.ConveyorStub(ch).ListPipelines(pb.ListPipelinesRequest(),
                                                           timeout=_CHECK_TIMEOUT_S).pipelines
        except grpc.RpcError as e:
            ch.close()
            raise from_rpc_error(e, "ListPipelines on %s" % w.endpoint.address) from None
        name = self._request["pipeline"]
        info = next((i for i in infos if i.name == name), None)
        if info is None:
            ch.close()
            raise NotFound("%s has no pipeline %r" % (w.endpoint.address, name))
        diff = fingerprint_difference(self.reference, info)
        if diff is not None:
            ch.close()
            raise InvalidRequest("pipeline %r on %s differs from the first daemon's in %s"
                                 % (name, w.endpoint.address, diff))
        w.channel = ch

    def _serve(self, w: _Worker, job: _Job) -> None:
        rng = job.range
        req = self._request
        try:
            with w.connect_lock:
                if w.channel is None:
                    self._connect(w)
                channel = w.channel  # another lane's failure may drop w.channel meanwhile
            with self._cond:
                w.state = "ready"
            resume = (rng.epoch, rng.offset, req["world_size"]) if rng.offset else None
            stream = self._open_stream(
                channel, req["pipeline"], req["batch_size"], seed=req["seed"],
                first_epoch=rng.epoch, num_epochs=self._epochs.epochs_left(rng.epoch),
                rank=req["rank"],
                world_size=req["world_size"], credits=rng.count, shuffle=req["shuffle"],
                drop_last=req["drop_last"], transport=req["transport"], resume=resume,
                auto_release=False, data_host=tcp_host(w.endpoint.address),
                # A range's stream never reuses a slot (as many credits as
                # batches), so arrays kept past a release are never
                # overwritten whatever the lifetime: no leases, no copies.
                security=self._security_for(w.endpoint), lifetime="fast",
                max_batches=rng.count, size=self._choices.size, dtype=self._choices.dtype,
                fields=self._choices.fields)
            with self._cond:
                job.stream = stream
                job.progress = time.monotonic()
                if job.abandoned:
                    self._forget(job)
                    return
            for i in range(rng.count):
                batch = next(stream)
                if batch.epoch == rng.epoch:
                    # Counted from the range's start by its stream; from
                    # the epoch's start (or the pool's resume point) here.
                    # Later epochs of the range start at 0 on both.
                    batch.batch_in_epoch = rng.first + i
                    batch.position = rng.position0 + batch.position
                    batch.epoch_samples = rng.epoch_samples
                with self._cond:
                    if job.abandoned:
                        break
                    self._ready[rng.g + i] = (batch, job)
                    job.received += 1
                    w.batches += 1
                    job.progress = self._last_batch_at = time.monotonic()
                    self._cond.notify_all()
            with self._cond:
                job.finished = True
                w.ranges += 1
                w.failures = 0
                self._forget(job)
                self._cond.notify_all()
            self._close_dropped()
        except StopIteration:
            self._failed(w, job, Unavailable("%s ended the range's stream after %d of %d batches"
                                             % (w.endpoint.address, job.received, rng.count)))
        except ConveyorError as e:
            self._failed(w, job, e)
        except Exception as e:  # noqa: BLE001 - any failure of a worker is the daemon's
            self._failed(w, job, Unavailable("%s: %s: %s" % (w.endpoint.address,
                                                             type(e).__name__, e)))

    def _failed(self, w: _Worker, job: _Job, e: BaseException) -> None:
        kind = _classify(e)
        warn = None
        with self._cond:
            if job.abandoned or self._closed:
                self._forget(job)
                return
            if kind == "data":
                # The batch at this position fails on every daemon: the
                # trainer gets the error there, in order.
                self._errors[job.range.g + job.received] = e
                job.finished = True
            else:
                self._abandon(job, str(e))
                if kind == "refuse":
                    w.refused = str(e)
                    w.refusal = e
                    w.state = "refused"
                    self.refused[w.endpoint.address] = str(e)
                    if w.endpoint.address not in self._warned:
                        self._warned.add(w.endpoint.address)
                        warn = "conveyor pool: daemon %s refused: %s" % (w.endpoint.address, e)
            self._cond.notify_all()
        self._close_dropped()
        if warn is not None:
            warnings.warn(warn, RuntimeWarning, stacklevel=2)

    def _abandon(self, job: _Job, why: str) -> None:
        """Gives the rest of job's range to others and backs its daemon off
        (REQUIRES: the lock)."""
        w = job.worker
        job.abandoned = True
        rest = self._epochs.range_at(job.range.g + job.received,
                                     job.range.count - job.received)
        if rest.count > 0:
            heapq.heappush(self._pending, rest)
            self._requeued += 1
        w.failures += 1
        w.usable_at = time.monotonic() + min(_BACKOFF_FIRST_S * 2 ** (w.failures - 1),
                                             _BACKOFF_MAX_S)
        w.last_error = why
        if w.state != "refused":
            w.state = "backoff"
        # Its channel goes: that cancels every call on it (a stream or an
        # open stuck on a stopped daemon) without unmapping batches already
        # delivered; the next range connects afresh.
        if w.channel is not None:
            self._to_close.append(w.channel)
            w.channel = None
        self._forget(job)

    def _forget(self, job: _Job) -> None:
        """Drops job once the trainer holds none of its batches (REQUIRES: the lock)."""
        if job.over and job.consumed >= job.received and job in job.worker.jobs:
            job.worker.jobs.remove(job)
            if job.stream is not None:
                self._to_close.append(job.stream)
                job.stream = None

    def _close_dropped(self) -> None:
        """Closes the streams and channels dropped under the lock (closing
        cancels calls, which must not happen while holding it)."""
        with self._cond:
            dropped, self._to_close = self._to_close, []
        for thing in dropped:
            thing.close()

    # --- the trainer's side -------------------------------------------------
    def __iter__(self) -> Iterator[Batch]:
        return self

    def _check_stalls(self, now: float) -> None:
        for w in self._workers.values():
            for job in w.jobs:
                r = job.range
                if (not job.over and r.g <= self._next < r.g + r.count
                        and now - job.progress > self._opt.stall_timeout):
                    self._abandon(job, "stalled: no batch for %.1f s" % (now - job.progress))
                    return

    def _all_refused(self) -> Optional[BaseException]:
        """When every daemon refused the stream and no other can join (no
        DNS names in servers=), the first daemon's refusal naming them all
        (an unknown pipeline, a choice no daemon allows): no need to wait
        for unavailable_timeout (REQUIRES: the lock)."""
        workers = list(self._workers.values())
        if self._servers.has_names or not workers or not all(w.refused for w in workers):
            return None
        first = workers[0].refusal
        why = "; ".join("%s: %s" % (w.endpoint.address, w.refused) for w in workers)
        message = "every daemon of the pool refused the stream: %s" % why
        if isinstance(first, ConveyorError):
            return type(first)(message, code=first.code, details=first.details)
        return InvalidRequest(message)

    def _unavailable(self) -> Unavailable:
        states = "; ".join("%s: %s%s" % (w.endpoint.address, w.state,
                                          " (%s)" % w.last_error if w.last_error else "")
                           for w in self._workers.values())
        names = "; unresolved names: %s" % self._servers.errors if self._servers.errors else ""
        return Unavailable("no batch came from any daemon of the pool for %.0f s (batch %d "
                           "awaited): %s%s" % (self._opt.unavailable_timeout, self._next,
                                               states or "no daemon", names))

    def __next__(self) -> Batch:
        self._release_current()
        if self.total_batches is not None and self._next >= self.total_batches:
            self.close()
            raise StopIteration
        g = self._next
        try:
            batch = self._wait_for(g)
        except StopIteration:
            raise
        except BaseException:
            self.close()  # an error ends the stream, as a single daemon's does
            raise
        finally:
            self._close_dropped()
        if self._on_batch is not None:
            self._on_batch(batch)
        return batch

    def _wait_for(self, g: int) -> Batch:
        with self._cond:
            if self._closed:
                raise StopIteration
            start = time.monotonic()
            waited = False
            self._waiting = True
            try:
                while g not in self._ready:
                    if g in self._errors:
                        err = self._errors.pop(g)
                        raise err
                    if self._closed:
                        raise StopIteration
                    now = time.monotonic()
                    waited = True
                    self._check_stalls(now)
                    if self._to_close:
                        # A stalled daemon's channel: closed now, so that its
                        # worker's blocked call returns (not under the lock).
                        dropped, self._to_close = self._to_close, []
                        self._cond.release()
                        try:
                            for thing in dropped:
                                thing.close()
                        finally:
                            self._cond.acquire()
                        continue
                    if now - max(self._last_batch_at, start) > self._opt.unavailable_timeout:
                        raise self._unavailable()
                    refusal = self._all_refused()
                    if refusal is not None:
                        raise refusal
                    self._cond.notify_all()  # local_first: remote workers may help now
                    self._cond.wait(0.05)
            finally:
                self._waiting = False
            if waited:
                self._last_wait_end = time.monotonic()
                self.starved_seconds += self._last_wait_end - start
            batch, job = self._ready.pop(g)
            job.consumed += 1
            self._next = g + 1
            self._current = (batch, job)
            return batch

    def _release_current(self) -> None:
        cur, self._current = self._current, None
        if cur is None:
            return
        batch, job = cur
        batch.release()
        with self._cond:
            self._forget(job)
            self._cond.notify_all()
        self._close_dropped()

    def stats(self) -> Dict[str, Any]:
        """{"starved_seconds", "next_batch", "requeued" (rests of ranges a
        failed or stalled daemon gave back), "daemons": [per daemon: address,
        name (the DNS name it came from), local, state (connecting, ready,
        backoff, refused, retired), ranges and batches served, in_flight
        (ranges being read), last_error]}"""
        with self._cond:
            return {"starved_seconds": self.starved_seconds, "next_batch": self._next,
                    "requeued": self._requeued,
                    "daemons": [w.describe() for w in self._workers.values()]}

    def close(self) -> None:
        """Stops every daemon's work; batches not taken are dropped. Idempotent."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            ready, self._ready = self._ready, {}
            streams = self._to_close
            self._to_close = []
            channels = []
            for w in self._workers.values():
                for job in w.jobs:
                    if job.stream is not None:
                        streams.append(job.stream)
                w.jobs = []
                if w.channel is not None:
                    channels.append(w.channel)
                    w.channel = None
            self._cond.notify_all()
        cur, self._current = self._current, None
        if cur is not None:
            cur[0].release()
        for batch, _ in ready.values():
            batch.release()
        for s in streams:
            s.close()
        for ch in channels:
            ch.close()
