"""Clients killed with SIGKILL mid-stream leak nothing: the daemon notices the
cancelled calls, closes their streams, fds (memfds; data sockets over TCP)
and slot memory, and goes on serving. The checks are the daemon's own
accounting (GetStats: streams_open, slot_bytes_in_use), its fd count and its
stream memfd mappings in /proc/PID/maps, all back to the baseline; RSS only
as a generous bound (skipped for sanitized daemons)."""

import os
import select
import signal
import subprocess
import time

import pytest

import conveyor
from conveyor_integration import (PYTHON, client_env, daemon_config, read_epoch, scaled,
                                  skip_rss_check_if_sanitized, wait_until)

MiB = 1 << 20
# Over TCP each client also holds a data socket; fewer keep the test short.
NUM_CLIENTS = {"unix": 50, "tcp": 20}

CLIENT_SCRIPT = r"""
import sys, time
import conveyor
stream = conveyor.open_stream(sys.argv[1], "train", 16, num_epochs=0, credits=2)
batch = next(stream)
assert batch.images.shape[0] == 16
assert stream.transport in ("shared_memory", "data_socket"), stream.transport
print("ready", flush=True)
time.sleep(600)
"""


def _wait_ready(procs, timeout):
    """Waits for every client to print "ready"; fails early if one dies."""
    pending = {p.stdout.fileno(): p for p in procs}
    deadline = time.monotonic() + timeout
    while pending and time.monotonic() < deadline:
        readable, _, _ = select.select(list(pending), [], [], 0.5)
        for fd in readable:
            p = pending.pop(fd)
            line = p.stdout.readline()
            if line.strip() != b"ready":
                p.wait(timeout=10)
                raise AssertionError("client %d failed: %r %s" % (p.pid, line, p.stderr.read()))
    assert not pending, "%d clients not ready in %.0f s" % (len(pending), timeout)


@pytest.mark.parametrize("via", ["unix", "tcp"])
def test_killed_clients_leak_no_fds_or_memory(daemon_factory, dataset, tmp_path, via):
    root, samples = dataset
    num_clients = NUM_CLIENTS[via]
    d = daemon_factory(daemon_config(root), name="crash")
    read_epoch(d.unix)  # warm up: worker threads, page cache, allocator
    assert wait_until(d.idle, 10), conveyor.stats(d.unix)
    assert wait_until(lambda: d.memfd_mappings() == [], 10), d.memfd_mappings()
    base_fds = d.fd_count()
    base_rss = d.rss_bytes()

    script = tmp_path / "client.py"
    script.write_text(CLIENT_SCRIPT)
    procs = []
    try:
        for _ in range(num_clients):
            procs.append(subprocess.Popen([PYTHON, str(script), getattr(d, via)], stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, env=client_env()))
        _wait_ready(procs, timeout=scaled(120))
        st = conveyor.stats(d.unix)
        assert st.streams_open == num_clients
        assert st.slot_bytes_in_use > 0
        peak_fds = d.fd_count()
        mapped = d.memfd_mappings()
        print("daemon with %d clients: %d fds (baseline %d), %d stream memfd mappings, "
              "slot_bytes_in_use %.1f MiB, RSS %.1f MiB (baseline %.1f)"
              % (num_clients, peak_fds, base_fds, len(mapped), st.slot_bytes_in_use / MiB,
                 d.rss_bytes() / MiB, base_rss / MiB))
        assert peak_fds > base_fds  # the streams really held resources
        if via == "unix":
            assert len(set(mapped)) == num_clients, mapped  # one region per shared-memory stream
    finally:
        for p in procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGKILL)
        for p in procs:
            p.wait(timeout=30)
            p.stdout.close()
            p.stderr.close()

    # The daemon must notice the cancellations on its own (poll, no fixed sleep).
    assert wait_until(d.idle, 30), \
        "streams of killed clients still open: %s" % conveyor.stats(d.unix)
    assert wait_until(lambda: d.fd_count() <= base_fds + 2, 30), \
        "fds: %d before, %d with clients, %d after" % (base_fds, peak_fds, d.fd_count())
    assert wait_until(lambda: d.memfd_mappings() == [], 30), \
        "slot memory still mapped: %s" % d.memfd_mappings()
    if not skip_rss_check_if_sanitized():
        # Generous: the slots of all the clients' streams are a few MiB; a
        # leak of each client's gRPC call or buffers would be more.
        assert wait_until(lambda: d.rss_bytes() <= base_rss + 64 * MiB, 30), \
            "RSS %.1f MiB, baseline %.1f MiB" % (d.rss_bytes() / MiB, base_rss / MiB)

    got = read_epoch(d.unix, seed=9)  # and it still serves a full epoch
    assert sorted(got.indices.tolist()) == list(range(len(samples)))
    assert d.proc.poll() is None
