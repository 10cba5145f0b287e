"""TCP connections that never complete their handshake cannot take the
daemon's file descriptors (issue 26, item 4).

The daemon runs under a low RLIMIT_NOFILE (so that a flood of 1,100
connections is far past it) and is flooded on its gRPC TCP port:

- with connections that never send a byte, from one peer address and from
  a few hundred (the test binds them to 127.0.0.x): the daemon's fds stay
  below its limit, a real TCP client still opens a stream and reads
  batches, a local (unix socket) pipeline reads a whole epoch under
  fail_fast, so no sample read failed for want of fds, and the metrics and
  the log say what was closed, the log once per reason;
- with connections that did complete their HTTP/2 preface (gRPC holds
  those): past the fd high-water mark new ones are refused, health says
  NOT_SERVING, sample reads still work, and once they go health says
  SERVING again.

Before the fix gRPC accepted each connection and held it for 120 s: the
daemon reached its fd limit, new clients were refused and sample reads
failed with "Too many open files" while health said SERVING.

The daemon is started by fd_limited_daemon (conftest.py), which sets its
fd limit in the child before exec."""

import errno
import os
import re
import resource
import socket
import urllib.request

import grpc
import numpy as np
import pytest

import conveyor
from conveyor._proto.grpc.health.v1 import health_pb2, health_pb2_grpc
from conveyor_integration import (daemon_config, fd_limited_daemon, pipeline_entry, require_daemon,
                                  scaled, wait_until)

FD_LIMIT = 256
FLOOD = 1100
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
EMPTY_SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def _fd_count(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


@pytest.fixture
def flood_daemon(dataset, tmp_path):
    """(process, unix address, tcp port, metrics url, log path)."""
    require_daemon()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < FLOOD + 256:
        pytest.skip("the test needs %d fds of its own (hard limit %d)" % (FLOOD + 256, hard))
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, FLOOD + 256), hard))
    root, _ = dataset
    cfg = daemon_config(root, pipelines={
        "train": pipeline_entry(root, error_policy="fail_fast")},
        metrics={"listen": "127.0.0.1:0"})
    try:
        with fd_limited_daemon(tmp_path, cfg, FD_LIMIT) as (proc, unix, port, log_path):
            m = re.search(r"Prometheus metrics on (http://[0-9.]+:\d+/metrics)",
                          log_path.read_text())
            assert m, log_path.read_text()
            yield proc, unix, port, m.group(1), log_path
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _connect(port, source=None):
    """A non-blocking connection to 127.0.0.1:port from `source` (an
    address in 127.0.0.0/8; None: any), or None if the kernel refused."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if source is not None:
        s.bind((source, 0))
    s.setblocking(False)
    err = s.connect_ex(("127.0.0.1", port))
    if err not in (0, errno.EINPROGRESS, errno.EAGAIN):
        s.close()
        return None
    return s


def _tcp_batches(port, n=2):
    """Images of the first `n` batches of a stream over TCP (INLINE)."""
    loader = conveyor.Loader("127.0.0.1:%d" % port, pipeline="train", batch_size=8, credits=2,
                             transport="inline")
    out = []
    try:
        with loader.epoch(0) as stream:
            for _ in range(n):
                batch = next(stream)
                out.append(np.array(batch.images, copy=True))
                batch.release()
    finally:
        loader.close()
    return out


def _local_epoch(unix):
    """A whole epoch over the unix socket (fail_fast: a failed sample read
    ends the stream with an error)."""
    loader = conveyor.Loader(unix, pipeline="train", batch_size=8, credits=2,
                             transport="shared_memory")
    samples = 0
    try:
        with loader.epoch(0) as stream:
            for batch in stream:
                assert not batch.failures, batch.failures
                samples += batch.num_samples
                batch.release()
    finally:
        loader.close()
    return samples


def _metric(url, name, **labels):
    text = urllib.request.urlopen(url, timeout=scaled(10)).read().decode()
    want = name + ("{%s}" % ",".join('%s="%s"' % kv for kv in sorted(labels.items()))
                   if labels else "")
    for line in text.splitlines():
        if line.startswith(want + " "):
            return float(line.split()[-1])
    raise AssertionError("no %s in the metrics:\n%s" % (want, text))


def _health(unix):
    channel = grpc.insecure_channel(unix)
    try:
        reply = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=""), timeout=scaled(5))
        return reply.status
    finally:
        channel.close()


def test_silent_connections_cannot_take_the_fds(flood_daemon, dataset):
    proc, unix, port, metrics, log_path = flood_daemon
    _, samples = dataset
    before = _tcp_batches(port)
    flood = []
    try:
        # Half from one peer (the per-peer cap), half from 200 others (the
        # cap of all pending connections and the fd reserve).
        for i in range(FLOOD):
            s = _connect(port, None if i % 2 == 0 else "127.0.0.%d" % (2 + i % 200))
            if s is not None:
                flood.append(s)
        assert len(flood) >= FLOOD - 10

        def refused():
            return sum(_metric(metrics, "conveyor_tcp_connections_refused_total", reason=r)
                       for r in ("peer_pending_cap", "pending_cap", "fd_reserve"))

        # The daemon has accepted (and closed) nearly all of them.
        assert wait_until(lambda: refused() >= FLOOD - 300, 30.0, interval=0.1), refused()
        held = _fd_count(proc.pid)
        assert held < FD_LIMIT - 16, "the daemon holds %d fds of %d" % (held, FD_LIMIT)
        # Real clients get through, over TCP and over the unix socket, and
        # no sample read fails for want of an fd.
        during = _tcp_batches(port)
        assert [b.shape for b in during] == [b.shape for b in before]
        assert _local_epoch(unix) == len(samples)
        assert _health(unix) == health_pb2.HealthCheckResponse.SERVING
        assert proc.poll() is None
        assert _metric(metrics, "conveyor_tcp_connections_refused_total",
                       reason="peer_pending_cap") > 0
    finally:
        for s in flood:
            s.close()
    log = log_path.read_text(errors="replace")
    assert "Too many open files" not in log, log[-5000:]
    # Once per reason (and minute), not once per connection.
    assert 1 <= log.count("connections from one peer that have not completed") <= 2, log[-5000:]
    assert len(re.findall(r"TCP \d+: ", log)) < 10, log[-5000:]


def test_handshaken_connections_past_the_mark_turn_health_not_serving(flood_daemon, dataset):
    proc, unix, port, metrics, log_path = flood_daemon
    _, samples = dataset
    flood = []
    try:
        # Each sends the HTTP/2 preface and a SETTINGS frame: handed to gRPC,
        # which holds it as an established connection.
        for i in range(FLOOD):
            s = _connect(port, "127.0.0.%d" % (2 + i % 200))
            if s is None:
                continue
            flood.append(s)
            try:
                s.setblocking(True)
                s.settimeout(5)
                s.sendall(PREFACE + EMPTY_SETTINGS)
            except OSError:
                pass  # closed by the daemon: refused
        assert wait_until(
            lambda: _health(unix) == health_pb2.HealthCheckResponse.NOT_SERVING, 10.0), \
            log_path.read_text()[-5000:]
        assert _fd_count(proc.pid) < FD_LIMIT - 16
        assert _metric(metrics, "conveyor_tcp_accepting_short_of_fds") == 1
        assert _metric(metrics, "conveyor_tcp_connections_refused_total", reason="fd_reserve") > 0
        # The reserve is there for the engine: a local epoch reads every sample.
        assert _local_epoch(unix) == len(samples)
    finally:
        for s in flood:
            s.close()
    assert wait_until(lambda: _health(unix) == health_pb2.HealthCheckResponse.SERVING, 30.0,
                      interval=0.2), log_path.read_text()[-5000:]
    assert _tcp_batches(port)
    log = log_path.read_text(errors="replace")
    assert "Too many open files" not in log, log[-5000:]
    assert "health: NOT_SERVING while new TCP connections are refused" in log
    assert "health: SERVING again" in log


def test_localhost_is_served_on_every_loopback_address(daemon_factory, dataset):
    """The daemon binds TCP itself: "localhost" means ::1 and 127.0.0.1, on
    one port, as gRPC's own listener had it."""
    root, _ = dataset
    d = daemon_factory(daemon_config(root), name="localhost", tcp=False,
                       extra_args=("--tcp", "localhost:0", "--port-file", "port"))
    port = int(wait_until(lambda: (d.workdir / "port").exists() and
                          (d.workdir / "port").read_text().strip(), 10.0))
    hosts = ["127.0.0.1"]
    if socket.has_ipv6 and any(a[0] == socket.AF_INET6 for a in
                               socket.getaddrinfo("localhost", port, type=socket.SOCK_STREAM)):
        hosts.append("[::1]")
    for host in hosts:
        assert conveyor.list_pipelines("%s:%d" % (host, port), timeout=scaled(10)), host
