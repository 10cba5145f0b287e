"""conveyor.daemon (the launcher of the tests, the benchmarks and
scripts/demo.sh) trusts only its own child: with a real conveyord already
serving on the socket path it refuses at once and names that daemon's pid,
leaves it and its socket alone, and never reports a foreign server as its
own (SO_PEERCRED of the socket against the child's pid); a stale socket
file is no obstacle. conveyord itself refuses to take over a live socket."""

import os
import socket
import subprocess

import pytest

import conveyor
from conveyor.daemon import DaemonError, DaemonProcess, SocketInUse, unix_socket_peer
from conveyor_integration import CONVEYORD, PYTHON, client_env, require_daemon, scaled


def _names(address):
    return [p.name for p in conveyor.list_pipelines(address, timeout=scaled(10))]


def _still_serving(d):
    assert os.path.exists(d.socket_path), "the first daemon's socket was removed"
    assert unix_socket_peer(d.socket_path) == d.pid
    assert sorted(_names(d.unix)) == ["eval", "train"]


def test_peer_of_a_daemon_socket_is_the_daemon(daemon):
    assert unix_socket_peer(daemon.socket_path) == daemon.pid


def test_a_second_launch_on_a_live_socket_is_refused_with_the_pid(daemon, tmp_path):
    second = DaemonProcess(CONVEYORD, daemon.config_path, workdir=tmp_path / "second",
                           socket=daemon.socket_path)
    with pytest.raises(SocketInUse) as e:
        second.start(timeout=scaled(30))
    msg = str(e.value)
    assert "socket %s is in use by pid %d" % (daemon.socket_path, daemon.pid) in msg, msg
    assert "conveyord" in msg  # the other process's command line
    assert e.value.pid == daemon.pid
    assert second.proc is None  # refused before starting anything
    _still_serving(daemon)


def test_a_foreign_server_answering_is_never_taken_for_the_child(daemon, tmp_path):
    """The check after spawning (the socket taken between the check and the
    child's bind): the child here never binds (a stand-in that only sleeps)
    while the real daemon answers SERVING on the path. wait_serving must not
    return; it says who answers instead."""
    fake = tmp_path / "sleeper"
    fake.write_text("#!/bin/sh\nexec sleep 60\n")
    fake.chmod(0o755)
    d = DaemonProcess(str(fake), daemon.config_path, workdir=tmp_path / "w",
                      socket=daemon.socket_path)
    d.proc = subprocess.Popen([str(fake)])  # spawned past the up-front check
    try:
        with pytest.raises(DaemonError) as e:
            d.wait_serving(timeout=scaled(3))
        assert "answered by pid %d" % daemon.pid in str(e.value), str(e.value)
    finally:
        d.kill()
    _still_serving(daemon)


def test_conveyord_itself_refuses_a_live_socket(daemon, tmp_path):
    """Run directly (no launcher): the second conveyord exits non-zero and
    says the socket is in use, and the first one's socket stays."""
    require_daemon()
    r = subprocess.run([str(CONVEYORD), "--config", str(daemon.config_path), "--socket",
                        str(daemon.socket_path), "--tcp", "none"],
                       capture_output=True, text=True, timeout=scaled(30), cwd=tmp_path)
    assert r.returncode != 0
    assert "another process listens on %s" % daemon.socket_path in r.stdout + r.stderr
    _still_serving(daemon)


def test_command_line_fails_clearly_and_never_runs_the_command(daemon, tmp_path):
    marker = tmp_path / "ran"
    r = subprocess.run([PYTHON, "-m", "conveyor.daemon", "--conveyord", str(CONVEYORD),
                        "--config", str(daemon.config_path), "--socket", str(daemon.socket_path),
                        "--", "touch", str(marker)],
                       capture_output=True, text=True, timeout=scaled(60), env=client_env())
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "socket %s is in use by pid %d" % (daemon.socket_path, daemon.pid) in r.stderr
    assert not marker.exists()
    _still_serving(daemon)


def test_a_stale_socket_file_is_no_obstacle(daemon, tmp_path):
    """A socket file nobody listens on (a daemon that was SIGKILLed): the
    launcher starts its daemon there, and that one is its child."""
    path = tmp_path / "w" / "conveyor.sock"
    path.parent.mkdir()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    s.close()  # the file stays, nothing listens
    assert path.exists() and unix_socket_peer(path) is None
    d = DaemonProcess(CONVEYORD, daemon.config_path, workdir=path.parent, socket=path)
    try:
        d.start(timeout=scaled(30))
        assert unix_socket_peer(path) == d.pid
        assert sorted(_names(d.unix)) == ["eval", "train"]
    finally:
        d.stop()
