"""Daemon loss: a client whose daemon dies gets a clear error promptly (no
hang); with the opt-in RetryPolicy its Loader stream waits for the daemon to
come back on the same socket and resumes exactly where the trainer was,
byte-identical to an uninterrupted run."""

import threading
import time

import pytest

import conveyor
from conveyor_integration import collect, daemon_config, pipeline_entry, scaled, wait_until

SEED = 9
BATCH = 8   # 48 samples: 6 batches per epoch


def _reference(address, epochs=2):
    loader = conveyor.Loader(address, pipeline="train", batch_size=BATCH, seed=SEED, rank=0,
                             world_size=1)
    with loader.stream(num_epochs=epochs, first_epoch=0) as stream:
        ref = [b.copy() for b in stream]
    loader.close()
    return ref


def _same_batches(got, ref):
    # (batch_in_epoch and position count within a resumed stream; the offset
    # is the epoch-wide resume point and must match.)
    assert ([(b.epoch, b.offset, b.end_of_epoch) for b in got]
            == [(b.epoch, b.offset, b.end_of_epoch) for b in ref])
    gi, gl, gx = collect(got)
    ri, rl, rx = collect(ref)
    assert gi.tolist() == ri.tolist()
    assert gl.tolist() == rl.tolist()
    assert gx.tobytes() == rx.tobytes(), "pixels differ from the uninterrupted run"


class _SignallingPolicy(conveyor.RetryPolicy):
    """A RetryPolicy that tells the test when a stream starts waiting for
    its daemon (the first pause it asks for): the daemon is restarted only
    then, so the stream really finds it gone, however slow the machine."""

    def __init__(self, **kw):
        super().__init__(**kw)
        object.__setattr__(self, "waiting", threading.Event())

    def backoffs(self):
        self.waiting.set()
        yield from super().backoffs()


def _kill(d):
    """SIGKILL, and wait until the process is gone."""
    d.proc.kill()
    d.proc.wait()


def test_daemon_killed_mid_stream_client_errors_within_seconds(daemon_factory, large_dataset):
    """The trainer is blocked in next() (the daemon is the bottleneck: large
    images) when the daemon is SIGKILLed: the error must come at once, not
    after a timeout, and it must be Unavailable."""
    root, _ = large_dataset
    d = daemon_factory(daemon_config(root, pipelines={"big": pipeline_entry(root, size=224)}),
                       name="loss", tcp=False)
    loader = conveyor.Loader(d.unix, pipeline="big", batch_size=8, seed=1, rank=0, world_size=1,
                             credits=2)
    outcome = {}

    def train():
        try:
            with loader.stream(num_epochs=0) as stream:
                for _ in stream:
                    outcome["batches"] = outcome.get("batches", 0) + 1
        except conveyor.ConveyorError as e:
            outcome["error"] = e
            outcome["t_error"] = time.monotonic()

    t = threading.Thread(target=train, daemon=True)
    t.start()
    assert wait_until(lambda: outcome.get("batches", 0) >= 3, 60), outcome
    t_kill = time.monotonic()
    _kill(d)
    t.join(timeout=30)
    assert not t.is_alive(), "the client hangs after its daemon died"
    latency = outcome["t_error"] - t_kill
    print("daemon SIGKILL -> client error in %.3f s: %s" % (latency, outcome["error"]))
    assert isinstance(outcome["error"], conveyor.Unavailable), outcome["error"]
    assert latency < scaled(10.0)
    loader.close()


def test_without_retry_policy_the_error_surfaces_at_once(daemon_factory, dataset):
    root, _ = dataset
    d = daemon_factory(daemon_config(root), name="noretry", tcp=False)
    loader = conveyor.Loader(d.unix, pipeline="train", batch_size=BATCH, seed=SEED, rank=0,
                             world_size=1)
    assert loader.retry is None
    stream = loader.stream(num_epochs=2)
    next(stream)
    _kill(d)
    t0 = time.monotonic()
    with pytest.raises(conveyor.Unavailable):
        for _ in stream:
            pass
    assert time.monotonic() - t0 < scaled(10.0)
    # Opening without a daemon is refused at once too.
    t0 = time.monotonic()
    with pytest.raises(conveyor.Unavailable):
        loader.epoch(0)
    assert time.monotonic() - t0 < scaled(10.0)
    loader.close()


def test_retry_policy_resumes_byte_identical_after_daemon_restarts(daemon_factory, dataset,
                                                                    restart_daemon):
    """Two outages (mid epoch 0, early in epoch 1), each with the daemon started
    again on the same socket once the stream waits for it: the stream goes on by itself and
    delivers exactly the uninterrupted run's batches, pixels included. The
    batch the trainer held when the daemon died stays readable."""
    root, _ = dataset
    d = daemon_factory(daemon_config(root), name="retry", tcp=False)
    ref = _reference(d.unix)
    assert len(ref) == 12

    policy = _SignallingPolicy(max_wait_s=60, initial_backoff_s=0.05, max_backoff_s=0.5)
    loader = conveyor.Loader(d.unix, pipeline="train", batch_size=BATCH, seed=SEED, rank=0,
                             world_size=1, credits=4, retry=policy)
    current = [d]
    restarters = []
    got = []
    outage_s = []

    def restart_later():
        # Once the stream waits for the daemon (it found it gone), start it again.
        assert policy.waiting.wait(scaled(60)), "the stream never noticed the daemon was gone"
        current[0] = restart_daemon(current[0])

    try:
        with loader.stream(num_epochs=2) as stream:
            for i, b in enumerate(stream):
                got.append(b.copy())
                if i in (4, 7):
                    for r in restarters:
                        r.join(timeout=60)  # current[0] is the daemon now serving
                    # The daemon had sent more batches (credits 4) than the
                    # trainer took: those are produced again, not lost. (At
                    # least 4 batches are left after each kill, so the daemon
                    # cannot have sent them all: the stream must reconnect.)
                    policy.waiting.clear()
                    _kill(current[0])
                    t_kill = time.monotonic()
                    # Batches held from the dead daemon's shared memory stay readable.
                    assert b.images.tobytes() == ref[i].images.tobytes()
                    r = threading.Thread(target=restart_later, daemon=True)
                    r.start()
                    restarters.append(r)
                elif i in (5, 8):
                    outage_s.append(time.monotonic() - t_kill)
            assert stream.reconnects == 2
            assert [e.epoch for e in stream.epoch_ends] == [0, 1]
            assert stream.end is not None
    finally:
        for r in restarters:
            r.join(timeout=60)
    print("outages (kill -> next batch, daemon restarted once the stream waits): %s s"
          % ", ".join("%.2f" % s for s in outage_s))
    _same_batches(got, ref)
    state = loader.state_dict()
    assert (state["epoch"], state["offset"]) == (2, 0)
    loader.close()


def test_retry_policy_waits_for_the_daemon_when_opening(daemon_factory, dataset, restart_daemon):
    root, _ = dataset
    d = daemon_factory(daemon_config(root), name="retryopen", tcp=False)
    ref = _reference(d.unix, epochs=1)
    _kill(d)
    policy = _SignallingPolicy(max_wait_s=60)
    # Restarted once the loader found no daemon and waits for one.
    r = threading.Thread(target=lambda: policy.waiting.wait(scaled(60)) and restart_daemon(d),
                         daemon=True)
    r.start()
    try:
        loader = conveyor.Loader(d.unix, pipeline="train", batch_size=BATCH, seed=SEED, rank=0,
                                 world_size=1, retry=policy)
        with loader.epoch(0) as stream:
            got = [b.copy() for b in stream]
        assert stream.reconnects == 1
    finally:
        r.join(timeout=60)
    _same_batches(got, ref)
    loader.close()


def test_retry_policy_gives_up_with_the_original_error(daemon_factory, dataset):
    root, _ = dataset
    d = daemon_factory(daemon_config(root), name="giveup", tcp=False)
    loader = conveyor.Loader(d.unix, pipeline="train", batch_size=BATCH, seed=SEED, rank=0,
                             world_size=1,
                             retry=conveyor.RetryPolicy(max_wait_s=1.5, initial_backoff_s=0.1,
                                                        max_backoff_s=0.5))
    stream = loader.stream(num_epochs=0)
    next(stream)
    _kill(d)
    t0 = time.monotonic()
    with pytest.raises(conveyor.Unavailable) as info:
        for _ in stream:
            pass
    waited = time.monotonic() - t0
    assert 1.4 <= waited < scaled(10.0), waited
    assert "UNAVAILABLE" in str(info.value) or "without StreamEnd" in str(info.value)
    stream.close()
    loader.close()


def test_retry_policy_is_validated():
    with pytest.raises(conveyor.InvalidRequest):
        conveyor.RetryPolicy(initial_backoff_s=0)
    with pytest.raises(conveyor.InvalidRequest):
        conveyor.RetryPolicy(initial_backoff_s=3, max_backoff_s=2)
    with pytest.raises(conveyor.InvalidRequest, match="RetryPolicy"):
        conveyor.Loader("unix:///nonexistent.sock", pipeline="train", batch_size=8, retry=5)

