"""A client that holds every slot of its stream without releasing, or that
stops reading altogether, is cut off after stream_idle_timeout_seconds: its
stream ends with DEADLINE_EXCEEDED naming the setting, its slots and budget
are given back, and whoever was locked out (max_streams 1 here) can open a
stream again."""

import threading

import grpc
import pytest

import conveyor
from conveyor_integration import daemon_config, pb, pb_grpc, scaled, wait_until

IDLE_S = 1


def config(root):
    return daemon_config(root, max_streams=1, stream_idle_timeout_seconds=IDLE_S)


def raw_open(address, batch_size, credits, **call_kwargs):
    """A raw StreamBatches call that opens an endless INLINE stream of
    `train` and then sends nothing (no Release) until the returned event is
    set: (channel, call, event)."""
    channel = grpc.insecure_channel(address)
    done = threading.Event()

    def requests():
        yield pb.ClientMessage(open=pb.OpenStream(pipeline="train", batch_size=batch_size,
                                                  credits=credits, num_epochs=0,
                                                  transport=pb.INLINE))
        done.wait()

    call = pb_grpc.ConveyorStub(channel).StreamBatches(requests(), **call_kwargs)
    return channel, call, done


def test_client_holding_every_slot_is_cut_off_and_the_owner_opens_again(daemon_factory, dataset):
    root, _ = dataset
    d = daemon_factory(config(root), name="idle-hold")
    # A raw client: it reads what it is sent but never releases (the
    # client library would refuse to read past its credits).
    # The deadline only keeps a daemon without the watchdog from hanging the test.
    channel, replies, done = raw_open(d.unix, 8, 2, timeout=scaled(30))
    try:
        kinds = [next(replies).WhichOneof("kind") for _ in range(3)]
        assert kinds == ["opened", "batch", "batch"], kinds
        with pytest.raises(conveyor.ResourceExhausted):
            conveyor.open_stream(d.unix, "train", 8, num_epochs=0, credits=2)
        with pytest.raises(grpc.RpcError) as cut:
            next(replies)  # waits until the daemon gives up on it
        assert cut.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED, cut.value
        assert "stream_idle_timeout_seconds is %d" % IDLE_S in cut.value.details()
        assert "held 2 of its 2 slots" in cut.value.details()
    finally:
        done.set()
        channel.close()
    assert wait_until(d.idle, scaled(10)), "the cut-off stream's place was not given back"
    s = conveyor.open_stream(d.unix, "train", 8, num_epochs=0, credits=2)
    with s:
        assert next(s).num_samples == 8
    assert "released none for" in d.log()


def test_client_that_stops_reading_is_cut_off(daemon_factory, dataset):
    root, _ = dataset
    d = daemon_factory(config(root), name="idle-deaf")
    # INLINE batches of 64 x 64 x 64 x 3 bytes (768 KiB), 32 credits: more
    # than gRPC's flow control lets through to a client that reads nothing,
    # so the daemon's write waits on it.
    channel, call, done = raw_open(d.tcp, 64, 32)  # never read
    try:
        assert wait_until(lambda: conveyor.stats(d.unix).streams_open == 1, scaled(10))
        with pytest.raises(conveyor.ResourceExhausted):
            conveyor.open_stream(d.unix, "train", 8, num_epochs=0, credits=2)
        # Idle timeout, then the hand-over grace (10 s) for its last write:
        # the call is cancelled and its place given back.
        assert wait_until(d.idle, scaled(40)), d.log_tail()
        s = conveyor.open_stream(d.unix, "train", 8, num_epochs=0, credits=2)
        with s:
            assert next(s).num_samples == 8
        assert "still reads nothing after the idle timeout" in d.log()
    finally:
        done.set()
        call.cancel()
        channel.close()
