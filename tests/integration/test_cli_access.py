"""The `conveyor` command line when the daemon is there but will not talk to
this client: it says what to fix and exits 6 (access), instead of gRPC's
"failed to connect" and exit 4.

- a plaintext client against a TLS port: "ADDR speaks TLS: pass --tls-ca";
- a unix socket this uid may not open (EACCES): the socket's mode and
  group, `usermod -aG GROUP`, and listen.allowed_uids;
- a uid the daemon's listen.allowed_uids refuses (the connection closed
  unanswered): names listen.allowed_uids.

The socket tests run the client as a second uid ("nobody", with setpriv)
and need root; they are skipped without it. A daemon that is simply not
there still exits 4 (test_cli.py)."""

import grp
import json
import os
import shutil
import subprocess

import pytest

from conveyor_integration import (NOBODY, CLI, PYTHON, Daemon, client_env, daemon_config,
                                  finish_daemons, require_daemon, scaled)

OTHER_UID = 65533

needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="needs root and setpriv (util-linux): the client runs as a second uid")


def run_cli(*args, as_nobody=False):
    cmd = [PYTHON, str(CLI)] + [str(a) for a in args]
    if as_nobody:
        cmd = ["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY, "--clear-groups"] + cmd
    return subprocess.run(cmd, capture_output=True, text=True, timeout=scaled(60),
                          env=client_env())


def openssl(*args, cwd):
    r = subprocess.run(["openssl"] + [str(a) for a in args], capture_output=True, cwd=cwd,
                       timeout=scaled(60))
    assert r.returncode == 0, r.stderr.decode()


def test_plaintext_client_against_a_tls_port_names_tls_ca(tmp_path, dataset):
    require_daemon()
    pki = tmp_path / "pki"
    pki.mkdir()
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-keyout", "server.key", "-out", "server.pem", "-days", "2",
            "-subj", "/CN=conveyord", "-addext", "subjectAltName=IP:127.0.0.1", cwd=pki)
    root, _ = dataset
    cfg = daemon_config(root, listen={"tls": {"cert": str(pki / "server.pem"),
                                              "key": str(pki / "server.key")}})
    d = Daemon(tmp_path / "d", cfg)
    d.start()
    try:
        for cmd in (["pipelines"], ["stats"],
                    ["fetch", "--pipeline", "train", "--batches", 1, "--out", tmp_path / "o"]):
            res = run_cli(*cmd, "--server", d.tcp, "--json")
            assert res.returncode == 6, (cmd, res.stderr)
            assert "%s speaks TLS: pass --tls-ca FILE" % d.tcp in res.stderr, res.stderr
            assert "--client-cert" in res.stderr
            assert json.loads(res.stdout)["error"]["exit_code"] == 6
        # With the CA it works: the hint named the right fix.
        res = run_cli("pipelines", "--server", d.tcp, "--tls-ca", pki / "server.pem")
        assert res.returncode == 0, res.stderr
        # The same daemon's unix socket is no TLS port.
        assert run_cli("pipelines", "--server", d.unix).returncode == 0
    finally:
        finish_daemons([d])


@pytest.fixture
def start_daemon(tmp_path_factory, dataset, group_shared_dir):
    started = []

    def start(listen):
        require_daemon()
        d = Daemon(tmp_path_factory.mktemp("access"), daemon_config(dataset[0], listen=listen),
                   tcp=False)
        d.socket_path = group_shared_dir / ("conveyor%d.sock" % len(started))
        started.append(d)
        return d.start()

    yield start
    finish_daemons(started)


@needs_root
def test_socket_permission_denied_exits_6_naming_the_group(start_daemon):
    d = start_daemon({"unix_mode": "0600"})  # owner only: nobody's group gets nothing
    group = grp.getgrgid(os.stat(d.socket_path).st_gid).gr_name
    res = run_cli("pipelines", "--server", d.unix, "--json", as_nobody=True)
    assert res.returncode == 6, res.stderr
    msg = json.loads(res.stdout)["error"]["message"]
    assert "permission denied on the daemon's socket %s (mode 0600" % d.socket_path in msg, msg
    assert "usermod -aG %s $USER" % group in msg and "listen.allowed_uids" in msg, msg
    # Root may open it: the same command works.
    assert run_cli("pipelines", "--server", d.unix).returncode == 0


@needs_root
def test_uid_refused_by_allowed_uids_exits_6_naming_the_field(start_daemon):
    # The socket's group lets nobody connect; listen.allowed_uids does not.
    d = start_daemon({"unix_mode": "0660", "allowed_uids": [str(OTHER_UID)]})
    res = run_cli("stats", "--server", d.unix, as_nobody=True)
    assert res.returncode == 6, res.stderr
    assert "closed the connection of uid %d" % NOBODY in res.stderr, res.stderr
    assert "listen.allowed_uids" in res.stderr, res.stderr
