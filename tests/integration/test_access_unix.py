"""Access control on the unix socket, with a second uid: the daemon runs as
root and checks each connection's kernel credentials (SO_PEERCRED), so the
socket file's mode (0660, in a setgid folder of nobody's group: nobody may
connect) is not what decides.

- an allowed uid streams batches over SHARED_MEMORY;
- a uid outside listen.allowed_uids is refused before any call, and cannot
  take a memfd from the .fd socket even with another stream's id + secret;
- an allowed uid cannot take another uid's memory either (the region goes
  only to the uid that opened the stream);
- GetStats shows a non-operator only its own streams; root sees all;
- a uid that fills its per_client share does not lock root out;
- loopback TCP is no way around listen.allowed_uids: the daemon looks up
  the uid owning a local connection and refuses it as on the unix socket.

The second uid is "nobody" (65534), reached with setpriv; the tests need
root (they are skipped without it)."""

import json
import os
import shutil
import subprocess

import pytest

import conveyor
from conveyor_integration import (NOBODY, PYTHON, Daemon, client_env, daemon_config,
                                  finish_daemons, scaled, wait_until)

OTHER_UID = 65533  # allowed in the "refused" daemon; nobody runs as it

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0,
                       reason="needs root: the clients run as a second uid (setpriv --reuid)"),
    pytest.mark.skipif(shutil.which("setpriv") is None,
                       reason="needs setpriv (util-linux) to run a client as a second uid"),
]

# What the second uid runs: one action, its outcome as one JSON line.
CLIENT = r"""
import json, sys
import conveyor
from conveyor._shm import receive_region_fd
action, address = sys.argv[1], sys.argv[2]
out = {}
try:
    if action == "stream":
        s = conveyor.open_stream(address, "train", 8, num_epochs=1, credits=2)
        out["transport"] = s.transport
        out["batches"] = sum(1 for b in s)
        s.close()
    elif action == "hold":
        # Opens a stream, reads its first batch, then waits for stdin.
        s = conveyor.open_stream(address, "train", 8, num_epochs=0, credits=2)
        next(s)
        print(json.dumps({"stream_id": s.stream_id}), flush=True)
        sys.stdin.readline()
        s.close()
    elif action == "two":
        # Holds one stream open while trying a second, then waits for stdin.
        first = conveyor.open_stream(address, "train", 8, num_epochs=0, credits=2)
        next(first)
        try:
            conveyor.open_stream(address, "train", 8, num_epochs=0, credits=2)
            out["second"] = "opened"
        except Exception as e:
            out["second"] = type(e).__name__
            out["message"] = str(e)
        print(json.dumps(out), flush=True)
        sys.stdin.readline()
        first.close()
        sys.exit(0)
    elif action == "stats":
        st = conveyor.stats(address)
        out["streams"] = [{"id": x.stream_id, "peer": x.peer} for x in st.streams]
        out["streams_open"] = st.streams_open
    elif action == "steal":
        fd_socket, stream_id, secret = sys.argv[3], int(sys.argv[4]), bytes.fromhex(sys.argv[5])
        fd = receive_region_fd(fd_socket, stream_id, secret, timeout=10)
        out["got_fd"] = True
    elif action == "list":
        out["pipelines"] = [p.name for p in conveyor.list_pipelines(address)]
except Exception as e:
    out["error"] = type(e).__name__
    out["message"] = str(e)
print(json.dumps(out), flush=True)
"""


def as_nobody(*args, stdin=None):
    cmd = ["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY, "--clear-groups", PYTHON,
           "-c", CLIENT] + [str(a) for a in args]
    return subprocess.Popen(cmd, env=client_env(), stdin=stdin, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def run_as_nobody(*args):
    p = as_nobody(*args)
    out, err = p.communicate(timeout=scaled(60))
    assert p.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


@pytest.fixture
def start_daemon(tmp_path_factory, dataset, group_shared_dir):
    started = []

    def start(allowed_uids, **fields):
        root, _ = dataset
        cfg = daemon_config(root, listen={"unix_mode": "0660", "allowed_uids": allowed_uids},
                            **fields)
        d = Daemon(tmp_path_factory.mktemp("access"), cfg)
        d.socket_path = group_shared_dir / ("conveyor%d.sock" % len(started))
        started.append(d)
        return d.start()

    yield start
    finish_daemons(started)


def test_allowed_uid_streams_over_shared_memory(start_daemon):
    d = start_daemon([str(NOBODY)])
    r = run_as_nobody("stream", d.unix)
    assert r.get("error") is None, r
    assert r["transport"] == "shared_memory"
    assert r["batches"] == 6  # 48 samples / 8
    assert "uid %d" % NOBODY in d.log()  # the stream's log lines name the peer's uid


def test_refused_uid_gets_nothing_not_even_with_a_stolen_secret(start_daemon):
    d = start_daemon([str(OTHER_UID)])
    r = run_as_nobody("list", d.unix)
    assert r.get("error") == "Unavailable", r
    assert wait_until(lambda: "refused a connection from" in d.log() and
                      "uid %d" % NOBODY in d.log(), scaled(10)), d.log_tail()
    # Root's stream: its id and secret, as if leaked to nobody.
    s = conveyor.open_stream(d.unix, "train", 8, num_epochs=0, credits=2)
    try:
        assert s.transport == "shared_memory"
        r = run_as_nobody("steal", d.unix, str(d.socket_path) + ".fd", s.stream_id,
                          s.opened.shared_memory.secret.hex())
        assert r.get("got_fd") is None and r.get("error") == "HandOverRefused", r
        assert "status 1" in r["message"], r
        assert next(s).num_samples == 8  # root's stream is unharmed
    finally:
        s.close()


def test_allowed_uid_cannot_take_another_uids_memory(start_daemon):
    d = start_daemon([str(NOBODY)])
    s = conveyor.open_stream(d.unix, "train", 8, num_epochs=0, credits=2)
    try:
        r = run_as_nobody("steal", d.unix, str(d.socket_path) + ".fd", s.stream_id,
                          s.opened.shared_memory.secret.hex())
        assert r.get("got_fd") is None and "status 1" in r.get("message", ""), r
        assert "was not opened by uid %d" % NOBODY in d.log()
    finally:
        s.close()


def test_stats_show_a_client_only_its_own_streams(start_daemon):
    d = start_daemon([str(NOBODY)])
    mine = conveyor.open_stream(d.unix, "train", 8, num_epochs=0, credits=2)
    holder = as_nobody("hold", d.unix, stdin=subprocess.PIPE)
    try:
        theirs = json.loads(holder.stdout.readline())
        assert "stream_id" in theirs, holder.stderr.read() if holder.poll() is not None else theirs
        seen = run_as_nobody("stats", d.unix)
        assert [x["id"] for x in seen["streams"]] == [theirs["stream_id"]], seen
        assert "uid %d" % NOBODY in seen["streams"][0]["peer"]
        assert seen["streams_open"] == 2  # daemon-wide counters stay visible
        ids = sorted(x.stream_id for x in conveyor.stats(d.unix).streams)
        assert ids == sorted([mine.stream_id, theirs["stream_id"]])  # root sees all
    finally:
        mine.close()
        holder.stdin.write("\n")
        holder.stdin.flush()
        holder.communicate(timeout=scaled(30))


def test_one_uid_filling_its_share_does_not_lock_another_out(start_daemon):
    d = start_daemon([str(NOBODY)], max_streams=3, per_client={"max_streams": 1})
    holder = as_nobody("two", d.unix, stdin=subprocess.PIPE)
    try:
        r = json.loads(holder.stdout.readline())
        assert r.get("second") == "ResourceExhausted", r
        assert "per_client.max_streams is 1" in r["message"], r
        assert "uid:%d" % NOBODY in r["message"], r
        s = conveyor.open_stream(d.unix, "train", 8, num_epochs=0, credits=2)  # root: its own share
        with s:
            assert next(s).num_samples == 8
    finally:
        holder.stdin.write("\n")
        holder.stdin.flush()
        holder.communicate(timeout=scaled(30))


def test_loopback_tcp_is_held_to_allowed_uids(start_daemon):
    d = start_daemon([str(OTHER_UID)])
    assert d.tcp is not None
    # Before: the unix socket refused nobody, loopback TCP served it.
    r = run_as_nobody("list", d.tcp)
    assert r.get("error") == "Unavailable", r
    assert wait_until(lambda: "refused a connection of local uid %d" % NOBODY in d.log(),
                      scaled(10)), d.log_tail()
    # Root (always allowed) still reaches TCP.
    assert [p.name for p in conveyor.list_pipelines(d.tcp, timeout=scaled(10))]
    d2 = start_daemon([str(NOBODY)])
    r = run_as_nobody("list", d2.tcp)
    assert r.get("error") is None and "train" in r["pipelines"], r
