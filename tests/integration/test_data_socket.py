"""The data socket of TCP streams (DATA_SOCKET transport): the batch images
arrive on a plain TCP connection beside the gRPC call. Pinned here: the
handshake refuses wrong secrets without harming the stream, the client's
buffers behave like slots (writable, invalid after release), a client that
closes its data socket or never connects it gets its stream ended with a
status saying so, and a daemon without a data socket serves TCP inline."""

import socket
import struct
import time

import grpc
import numpy as np
import pytest

import conveyor
from conveyor_integration import (IMAGE_SIZE, daemon_config, pb, pb_grpc, read_epoch, scaled,
                                  wait_until)


def _open_raw(address, **fields):
    """A StreamBatches call made by hand: (channel, call, StreamOpened)."""
    channel = grpc.insecure_channel(address)
    req = pb.OpenStream(pipeline="train", batch_size=8, credits=2, num_epochs=1, **fields)
    call = pb_grpc.ConveyorStub(channel).StreamBatches(iter([pb.ClientMessage(open=req)]))
    first = next(call)
    assert first.WhichOneof("kind") == "opened"
    return channel, call, first.opened


def _handshake(port, stream_id, secret):
    """Connects to the data socket and returns (socket, status byte or b'')."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(struct.pack("<Q", stream_id) + secret)
    return s, s.recv(1)


def test_auto_over_tcp_picks_the_data_socket(daemon):
    channel, call, opened = _open_raw(daemon.tcp, accept_data_socket=True)
    try:
        assert opened.transport == pb.DATA_SOCKET
        assert 0 < opened.data_socket.data_port < 65536 and len(opened.data_socket.secret) == 32
    finally:
        call.cancel()
        channel.close()
    # A client that does not say it reads data sockets keeps getting INLINE.
    channel, call, opened = _open_raw(daemon.tcp)
    try:
        assert opened.transport == pb.INLINE
    finally:
        call.cancel()
        channel.close()


def test_wrong_secret_or_unknown_stream_is_refused_and_the_stream_goes_on(daemon, dataset):
    _, samples = dataset
    loader = conveyor.Loader(daemon.tcp, pipeline="train", batch_size=8, seed=2, credits=2)
    with loader.epoch(0) as stream:
        assert stream.transport == "data_socket"
        port = stream.opened.data_socket.data_port
        first = next(stream)
        wrong = bytes(32) if stream.opened.data_socket.secret != bytes(32) else b"\x01" * 32
        for stream_id, secret in [(stream.stream_id, wrong), (stream.stream_id + 1000, wrong),
                                  (stream.stream_id, stream.opened.data_socket.secret)]:  # already connected
            s, status = _handshake(port, stream_id, secret)
            try:
                assert status == b"\x01", "handshake of stream %d answered %r" % (stream_id, status)
                assert s.recv(1) == b"", "a refused connection is closed"
            finally:
                s.close()
        n = first.num_samples + sum(b.num_samples for b in stream)
    loader.close()
    assert n == len(samples)
    assert "refused" in daemon.log()


def test_images_land_in_writable_per_slot_buffers_invalidated_on_release(daemon):
    loader = conveyor.Loader(daemon.tcp, pipeline="train", batch_size=8, seed=1, credits=2)
    with loader.epoch(0) as stream:
        assert stream.transport == "data_socket"
        batch = next(stream)
        images = batch.images
        assert images.shape == (8, 3, IMAGE_SIZE, IMAGE_SIZE) and images.dtype == np.uint8
        assert images.flags.writeable
        kept = batch.copy()
        second = next(stream)  # releases the first
        with pytest.raises(conveyor.BatchReleasedError):
            batch.images
        assert kept.images.shape == images.shape
        assert not np.shares_memory(kept.images, second.images)
    loader.close()


def test_client_closing_its_data_socket_ends_the_stream_unavailable(daemon):
    before = conveyor.stats(daemon.tcp).streams_total
    stream = conveyor.open_stream(daemon.tcp, "train", 8, num_epochs=0, credits=2)
    try:
        assert stream.transport == "data_socket"
        next(stream)
        stream._transport._sock.shutdown(socket.SHUT_RDWR)  # the connection goes away
        with pytest.raises(conveyor.Unavailable):
            for _ in range(100):
                next(stream)
    finally:
        stream.close()
    assert wait_until(lambda: conveyor.stats(daemon.tcp).streams_open == 0, 10)
    assert conveyor.stats(daemon.tcp).streams_total == before + 1


def test_client_that_never_connects_gets_failed_precondition(daemon):
    channel, call, opened = _open_raw(daemon.tcp, accept_data_socket=True)
    t0 = time.monotonic()
    try:
        with pytest.raises(grpc.RpcError) as info:
            for _ in call:
                pass
        assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "did not connect its data socket" in info.value.details()
        assert 8 < time.monotonic() - t0 < scaled(30)
    finally:
        channel.close()
    assert wait_until(lambda: conveyor.stats(daemon.tcp).streams_open == 0, 10)


def test_data_socket_over_the_unix_socket_is_failed_precondition(daemon):
    with pytest.raises(conveyor.InvalidRequest) as info:
        conveyor.open_stream(daemon.unix, "train", 8, transport="data_socket", data_host="127.0.0.1")
    assert info.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert "TCP" in str(info.value)


def test_daemon_without_data_socket_serves_tcp_inline(daemon_factory, dataset):
    root, samples = dataset
    d = daemon_factory(daemon_config(root), name="nodata", extra_args=["--data-tcp", "none"])
    got = read_epoch(d.tcp, batch_size=16, seed=5)
    assert got.transport == "inline"
    assert sorted(got.indices.tolist()) == list(range(len(samples)))
    with pytest.raises(conveyor.InvalidRequest) as info:
        conveyor.open_stream(d.tcp, "train", 8, transport="data_socket")
    assert info.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert "data socket" in str(info.value)


def test_held_batches_keep_their_own_buffers_until_released(daemon, dataset):
    """With auto_release=False a client holds several batches at once: each
    sits in its own slot's buffer, and every one of them equals what the
    shared-memory transport delivers for the same stream."""
    _, samples = dataset
    kw = dict(num_epochs=1, credits=3, seed=13, auto_release=False)
    unix = conveyor.open_stream(daemon.unix, "train", 8, **kw)
    tcp = conveyor.open_stream(daemon.tcp, "train", 8, **kw)
    try:
        assert tcp.transport == "data_socket"
        seen = 0
        while True:
            held_tcp = [b for b in (next(tcp, None) for _ in range(3)) if b is not None]
            held_unix = [b for b in (next(unix, None) for _ in range(3)) if b is not None]
            assert len(held_tcp) == len(held_unix)
            if not held_tcp:
                break
            for a, b in zip(held_tcp, held_unix):
                assert a.sequence == b.sequence
                np.testing.assert_array_equal(a.labels, b.labels)
                assert a.images.tobytes() == b.images.tobytes()
            for a in reversed(held_tcp):  # out of order
                a.release()
            for b in held_unix:
                b.release()
            seen += sum(b.num_samples for b in held_tcp)
        assert seen == len(samples)
    finally:
        unix.close()
        tcp.close()
