"""A daemon that runs out of file descriptors: started under a low
RLIMIT_NOFILE, its fds are used up by connections to its data socket that
never send a handshake, and one more connection waits on each side socket
(data socket and fd hand-over socket). Pinned here: while it cannot accept,
the daemon burns next to no CPU (its accept loops back off instead of
retrying at once, which used whole cores), it says so in its log once per
episode rather than per attempt, and once the connections go it serves
streams again on both side sockets (a SHARED_MEMORY stream over the unix
socket, a DATA_SOCKET stream over TCP).

The daemon is started here rather than through the shared fixtures: it
needs its fd limit set in the child before exec."""

import errno
import os
import re
import socket
import time

import grpc
import numpy as np
import pytest

import conveyor
from conveyor_integration import (daemon_config, fd_limited_daemon, pb, pb_grpc, wait_until)

# Enough for the daemon to start (gRPC, epoll sets, eventfds, the worker
# pool) with a few dozen to spare for the flood.
FD_LIMIT = 96


def _cpu_seconds(pid):
    """User + system CPU time of every thread of process `pid` so far."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # Fields 14 and 15 of the file; the split starts at field 3.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _fd_count(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def _connect_nonblocking(family, address):
    """A connection that may still be in the listener's queue (connect does
    not wait for the server to accept it)."""
    s = socket.socket(family, socket.SOCK_STREAM)
    s.setblocking(False)
    err = s.connect_ex(address)
    if err not in (0, errno.EINPROGRESS, errno.EAGAIN):
        s.close()
        return None
    return s


@pytest.fixture
def low_fd_daemon(dataset, tmp_path):
    """(process, unix address, tcp address, fd socket path, log path)."""
    root, _ = dataset
    with fd_limited_daemon(tmp_path, daemon_config(root), FD_LIMIT) as (proc, unix, port, log_path):
        yield proc, unix, "127.0.0.1:%d" % port, str(tmp_path / "conveyor.sock") + ".fd", log_path


def _data_port(tcp):
    channel = grpc.insecure_channel(tcp)
    try:
        req = pb.OpenStream(pipeline="train", batch_size=8, credits=2, num_epochs=1,
                            accept_data_socket=True)
        call = pb_grpc.ConveyorStub(channel).StreamBatches(iter([pb.ClientMessage(open=req)]))
        opened = next(call).opened
        call.cancel()
        assert opened.transport == pb.DATA_SOCKET
        return opened.data_socket.data_port
    finally:
        channel.close()


def _first_batch(address, transport):
    loader = conveyor.Loader(address, pipeline="train", batch_size=8, credits=2,
                             transport=transport)
    try:
        with loader.epoch(0) as stream:
            assert stream.transport == transport
            batch = next(stream)
            images = np.array(batch.images, copy=True)
            batch.release()
    finally:
        loader.close()
    return images


def test_out_of_fds_the_daemon_backs_off_and_recovers(low_fd_daemon):
    proc, unix, tcp, fd_socket, log_path = low_fd_daemon
    data_port = _data_port(tcp)
    # The reference batch, read before the daemon was ever short of fds.
    before = _first_batch(unix, "shared_memory")

    flood = []
    try:
        # Silent connections to the data socket: each one the daemon
        # accepts holds one of its fds while it waits for the handshake.
        for _ in range(FD_LIMIT + 16):
            s = _connect_nonblocking(socket.AF_INET, ("127.0.0.1", data_port))
            if s is not None:
                flood.append(s)
        assert wait_until(lambda: _fd_count(proc.pid) >= FD_LIMIT, 10.0), \
            "the daemon holds %d fds of %d" % (_fd_count(proc.pid), FD_LIMIT)
        # One more connection waits on the fd hand-over socket too.
        s = _connect_nonblocking(socket.AF_UNIX, fd_socket)
        assert s is not None
        flood.append(s)

        # Both side sockets have connections waiting that the daemon cannot
        # accept. Retrying at once would keep a core busy per socket.
        cpu0, t0 = _cpu_seconds(proc.pid), time.monotonic()
        time.sleep(2.0)  # the measured window
        used, elapsed = _cpu_seconds(proc.pid) - cpu0, time.monotonic() - t0
        assert used < 0.1 * elapsed, \
            "the daemon used %.2f s of CPU in %.2f s while out of fds" % (used, elapsed)
        assert proc.poll() is None
    finally:
        for s in flood:
            s.close()

    # The connections are gone: streams work again on both side sockets.
    def serves():
        try:
            return [_first_batch(unix, "shared_memory")]
        except conveyor.ConveyorError:
            return None

    after = wait_until(serves, 30.0, interval=0.2)
    assert after, "no SHARED_MEMORY stream after the flood:\n" + log_path.read_text()
    assert np.array_equal(after[0], before)
    assert _first_batch(tcp, "data_socket").shape == before.shape

    log = log_path.read_text(errors="replace")
    # Logged once per episode (an episode ends when a connection is
    # accepted again), not once per failed attempt: a loop that retried at
    # once logged thousands of lines a second.
    assert re.search(r"(data socket|fd hand-over): cannot accept connections", log), log
    assert "accepting connections again" in log
    assert log.count("Too many open files") < 20, log[-5000:]
