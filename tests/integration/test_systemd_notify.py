"""conveyord as a systemd Type=notify service, seen from the service
manager's side: the test owns the NOTIFY_SOCKET (a unix datagram socket, as
systemd's) and reads what the daemon sends. READY=1 comes only once the
daemon answers health checks SERVING; STATUS= lines follow with the streams
open; WATCHDOG=1 pings come at half of WATCHDOG_USEC (none when
WATCHDOG_PID names another process); a SIGHUP reload is framed by
RELOADING=1 and READY=1; SIGTERM sends STOPPING=1."""

import os
import queue
import shutil
import signal
import socket
import tempfile
import threading
import time
from pathlib import Path

import pytest

import conveyor
from conveyor.daemon import SERVING, health_status
from conveyor_integration import Daemon, daemon_config, finish_daemons, scaled


class NotifySocket:
    """A unix datagram socket standing in for systemd's notify socket: every
    datagram it receives goes, with its arrival time, into `messages`."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="notify-", dir="/tmp")  # short: sun_path limit
        self.path = os.path.join(self.dir, "notify.sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.sock.settimeout(0.2)
        self.messages = queue.Queue()
        self.all = []  # (time, dict of the assignments), in arrival order
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self):
        while not self._stop.is_set():
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                return
            fields = dict(line.split("=", 1) for line in data.decode().splitlines() if "=" in line)
            item = (time.monotonic(), fields)
            self.all.append(item)
            self.messages.put(item)

    def next_with(self, key, timeout):
        """The fields of the next message holding `key` (earlier ones are
        skipped); fails the test after `timeout` s (scaled)."""
        deadline = time.monotonic() + scaled(timeout)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                pytest.fail("no %s message within %.0f s; got %r" % (key, scaled(timeout), self.all))
            try:
                _, fields = self.messages.get(timeout=left)
            except queue.Empty:
                continue
            if key in fields:
                return fields

    def close(self):
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def notify():
    n = NotifySocket()
    yield n
    n.close()


def _start(workdir, dataset, notify, **env_extra):
    root, _ = dataset
    d = Daemon(workdir, daemon_config(root), tcp=False)
    d.env = dict(os.environ, NOTIFY_SOCKET=notify.path, **env_extra)
    d.spawn()
    return d


def test_ready_after_serving_then_status_and_stopping(tmp_path, dataset, notify):
    d = _start(tmp_path / "d", dataset, notify)
    try:
        ready = notify.next_with("READY", 60)
        assert ready["READY"] == "1"
        # READY=1 promises a daemon that answers: no polling before it.
        assert health_status(d.unix, timeout=scaled(5)) == SERVING
        assert ready["STATUS"] == "0 streams open, 0 images/s, 2 pipelines", ready
        d.serving_at = time.monotonic()

        stream = conveyor.open_stream(d.unix, "train", 8, num_epochs=0, credits=2)
        try:
            next(stream)
            deadline = time.monotonic() + scaled(30)
            while True:
                status = notify.next_with("STATUS", 30)["STATUS"]
                if status.startswith("1 stream open, "):
                    break
                assert time.monotonic() < deadline, "no STATUS with the open stream: %s" % status
            assert status.endswith(" images/s, 2 pipelines"), status
        finally:
            stream.close()
        # No watchdog asked for: no pings.
        assert not any("WATCHDOG" in f for _, f in notify.all), notify.all

        d.signal(signal.SIGTERM)
        assert d.wait(timeout=scaled(20)) == 0, d.log_tail()
        stopping = [f for _, f in notify.all if "STOPPING" in f]
        assert stopping and stopping[0]["STOPPING"] == "1", notify.all
    finally:
        finish_daemons([d])


def test_watchdog_pings_at_half_the_timeout(tmp_path, dataset, notify):
    # 1 s watchdog: a ping about every 0.5 s.
    d = _start(tmp_path / "d", dataset, notify, WATCHDOG_USEC="1000000")
    try:
        notify.next_with("READY", 60)
        first = time.monotonic()
        pings = []
        while len(pings) < 4:
            fields = notify.next_with("WATCHDOG", 10)
            assert fields["WATCHDOG"] == "1"
            pings.append(time.monotonic())
        # Four pings span three intervals of ~0.5 s: well within the 1 s timeout each.
        gaps = [b - a for a, b in zip([first] + pings, pings)]
        assert max(gaps) < scaled(1.0) + 0.5, gaps
        assert pings[-1] - first >= 1.0, "pings faster than half the timeout: %r" % gaps
    finally:
        finish_daemons([d])


def test_no_watchdog_pings_for_another_pid(tmp_path, dataset, notify):
    # WATCHDOG_PID names another process (ours): the watchdog is not the daemon's.
    d = _start(tmp_path / "d", dataset, notify, WATCHDOG_USEC="200000",
               WATCHDOG_PID=str(os.getpid()))
    try:
        notify.next_with("READY", 60)
        notify.next_with("STATUS", 10)  # the notifier is running
        time.sleep(1.0)  # five watchdog intervals
        assert not any("WATCHDOG" in f for _, f in notify.all), notify.all
    finally:
        finish_daemons([d])


def test_reload_is_framed_by_reloading_and_ready(tmp_path, dataset, notify):
    d = _start(tmp_path / "d", dataset, notify)
    try:
        notify.next_with("READY", 60)
        d.signal(signal.SIGHUP)
        reloading = notify.next_with("RELOADING", 60)
        assert reloading["RELOADING"] == "1" and int(reloading["MONOTONIC_USEC"]) > 0
        ready = notify.next_with("READY", 60)
        assert ready["STATUS"].endswith("; last reload: 0 added, 0 removed, 0 changed"), ready
        assert d.poll() is None
    finally:
        finish_daemons([d])
