"""Opt-in reconnection of Loader streams when the daemon goes away.

    loader = conveyor.Loader(address, pipeline="train", batch_size=256,
                             retry=conveyor.RetryPolicy(max_wait_s=60))
    for batch in loader.stream(num_epochs=90):   # survives a daemon restart
        ...

Without a policy (the default) an Unavailable error surfaces at once. With
one, an Unavailable error while a Loader stream is iterated (the daemon was
killed, restarted, or is shutting down) makes the stream wait for the daemon
- it polls ListPipelines on a fresh channel, backing off from
initial_backoff_s to max_backoff_s - and reopen itself at the position the
trainer reached (the epoch and offset after the last batch it took; batches
the daemon had sent but the trainer had not taken are produced again). Then
it goes on yielding batches as if nothing happened: the result is
byte-identical to an uninterrupted run. After max_wait_s without a daemon
the original Unavailable error is raised.

Only Unavailable is retried: a refused request (InvalidRequest, NotFound,
ResourceExhausted on the reopen, DataError) surfaces as usual. The
lower-level conveyor.open_stream never retries.

Batches the trainer still holds from the dead daemon stay readable: the
client's mapping of the shared memory keeps the memfd alive after the daemon
is gone (nothing writes to it any more). They count as released once the
next batch is taken, as usual.

Thread-safety: a RetryPolicy is immutable. A RetryingStream, like a Stream,
is iterated from one thread at a time.
"""

import time

import grpc

from ._closing import ClosesOnExit
from ._stubs import pb, pb_grpc
from .errors import InvalidRequest, Unavailable


class RetryPolicy:
    """How long and how often a Loader stream waits for its daemon to come
    back: at most max_wait_s seconds from the failure, probing after
    initial_backoff_s, then doubling the pause up to max_backoff_s."""

    __slots__ = ("max_wait_s", "initial_backoff_s", "max_backoff_s")

    def __init__(self, max_wait_s=60.0, initial_backoff_s=0.1, max_backoff_s=2.0):
        for name, value in (("max_wait_s", max_wait_s), ("initial_backoff_s", initial_backoff_s),
                            ("max_backoff_s", max_backoff_s)):
            if not isinstance(value, (int, float)) or value < 0:
                raise InvalidRequest("RetryPolicy.%s must be a number >= 0, got %r" % (name, value))
        if initial_backoff_s <= 0 or max_backoff_s < initial_backoff_s:
            raise InvalidRequest("RetryPolicy needs 0 < initial_backoff_s <= max_backoff_s, got "
                                 "%r and %r" % (initial_backoff_s, max_backoff_s))
        object.__setattr__(self, "max_wait_s", float(max_wait_s))
        object.__setattr__(self, "initial_backoff_s", float(initial_backoff_s))
        object.__setattr__(self, "max_backoff_s", float(max_backoff_s))

    def __setattr__(self, name, value):
        raise AttributeError("RetryPolicy is immutable")

    def backoffs(self):
        """The pauses between probes: initial, 2x, 4x ... capped at max."""
        delay = self.initial_backoff_s
        while True:
            yield delay
            delay = min(self.max_backoff_s, delay * 2)

    def __repr__(self):
        return "RetryPolicy(max_wait_s=%g, initial_backoff_s=%g, max_backoff_s=%g)" % (
            self.max_wait_s, self.initial_backoff_s, self.max_backoff_s)


def resume_point(batch):
    """(epoch, offset) to resume at once the trainer consumed `batch`."""
    if batch.end_of_epoch:
        return batch.epoch + 1, 0
    return batch.epoch, batch.offset


def daemon_answers(channel, timeout):
    """True when the daemon behind `channel` answers ListPipelines."""
    try:
        pb_grpc.ConveyorStub(channel).ListPipelines(pb.ListPipelinesRequest(), timeout=timeout)
        return True
    except grpc.RpcError:
        return False


class RetryingStream(ClosesOnExit):
    """A Loader stream that reopens itself after Unavailable errors (see the
    module doc). It iterates like conveyor.Stream and forwards its other
    attributes (transport, batches_per_epoch, held, ...) to the current
    underlying Stream.

    reconnects: how many times it reopened after a failure.
    epoch_ends: the EpochEnd markers seen over all underlying streams.
    """

    def __init__(self, loader, first_epoch, num_epochs, resume):
        self._loader = loader
        self._policy = loader.retry
        # Its reopens keep the size, dtype and fields it was opened with,
        # whatever the loader's set_size() says meanwhile.
        self._choices = getattr(loader, "_choices", None)
        self._end_epoch = None if num_epochs == 0 else first_epoch + num_epochs  # exclusive
        # The position the trainer reached: where a reopen starts.
        if resume is not None:
            self._epoch, self._offset, self._world = resume
        else:
            self._epoch, self._offset, self._world = first_epoch, 0, loader.world_size
        self._stream = None
        self._dead = []          # failed streams whose batches the trainer may still hold
        self._past_epoch_ends = []
        self._closed = False
        self.reconnects = 0
        self.end = None
        channel = self._loader.channel
        try:
            self._stream = self._open()
        except Unavailable as e:
            self._stream = self._reopen(e, channel)

    # --- position ---------------------------------------------------------
    def _on_batch(self, batch):
        self._epoch, self._offset = resume_point(batch)
        self._world = self._loader.world_size
        self._loader._on_batch(batch)

    def _open(self):
        """Opens the underlying stream at the trainer's position; None when
        the stream's epochs are all consumed."""
        if self._end_epoch is None:
            num_epochs = 0
        else:
            num_epochs = self._end_epoch - self._epoch
            if num_epochs <= 0:
                return None
        resume = (self._epoch, self._offset, self._world) if self._offset > 0 else None
        return self._loader._open_stream(self._epoch, num_epochs, resume, self._on_batch,
                                         choices=self._choices)

    def _reopen(self, error, stale):
        """Waits for the daemon and reopens; raises `error` after max_wait_s."""
        deadline = time.monotonic() + self._policy.max_wait_s
        for delay in self._policy.backoffs():
            if self._closed:
                raise error
            left = deadline - time.monotonic()
            if left <= 0:
                break
            time.sleep(min(delay, left))
            # A fresh channel: the old one may sit in gRPC's reconnect backoff.
            self._loader._reset_channel(stale)
            stale = self._loader.channel
            if not daemon_answers(stale, max(0.05, min(2.0, deadline - time.monotonic()))):
                continue
            try:
                stream = self._open()
            except Unavailable:
                continue  # went away again, or shutting down: keep waiting
            self.reconnects += 1
            return stream
        try:
            error.add_note("conveyor: gave up after waiting %.1f s for the daemon to come back "
                           "(RetryPolicy.max_wait_s)" % self._policy.max_wait_s)
        except AttributeError:  # Python < 3.11
            pass
        raise error

    # --- iteration --------------------------------------------------------
    def __iter__(self):
        return self

    def __next__(self):
        while True:
            stream = self._stream
            if stream is None:
                raise StopIteration
            try:
                batch = next(stream)
            except StopIteration:
                self.end = stream.end
                raise
            except Unavailable as e:
                if self._closed:
                    raise
                self._past_epoch_ends.extend(stream.epoch_ends)
                self._dead.append(stream)
                self._stream = None
                self._stream = self._reopen(e, stream._channel)
                continue
            if self._dead:
                # Taking the next batch releases the previous one, as usual.
                for dead in self._dead:
                    dead.close()
                self._dead.clear()
            return batch

    @property
    def epoch_ends(self):
        current = self._stream.epoch_ends if self._stream is not None else []
        return self._past_epoch_ends + list(current)

    @property
    def done(self):
        return self._stream is None or self._stream.done

    def __getattr__(self, name):
        # Only called for attributes not found on the wrapper itself.
        stream = self.__dict__.get("_stream")
        if stream is None:
            raise AttributeError(name)
        return getattr(stream, name)

    # --- lifetime ---------------------------------------------------------
    def close(self):
        self._closed = True
        for s in self._dead + ([self._stream] if self._stream is not None else []):
            s.close()
        self._dead.clear()
