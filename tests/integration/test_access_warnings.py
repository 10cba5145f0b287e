"""What the daemon says about its own access setup, and how much (issue 26,
item 9 and the access low items):

- a restricted unix socket (listen.unix_mode without access for others, or
  listen.allowed_uids) beside a TCP listener that asks for no token: a
  warning at start that any local user reaches the pipelines over TCP;
- an expired or not yet valid TLS certificate: a warning at start and again
  on SIGHUP, naming the file and the date (the daemon still serves);
- refused fd hand-overs: one line per peer and 10 s, the rest counted in
  one summary line, however fast a client asks."""

import datetime
import os
import signal
import socket
import struct

import pytest

import conveyor
from conveyor_integration import daemon_config, scaled, wait_until

BYPASS = "any local user reaches the same pipelines over TCP"


def test_restricted_unix_socket_and_tokenless_tcp_warn(daemon_factory, dataset, tmp_path):
    root, _ = dataset
    # The default mode, 0660, admits the socket's group only (no mode may
    # admit others): TCP without a token bypasses it.
    d = daemon_factory(daemon_config(root), name="restricted")
    assert BYPASS in d.log(), d.log_tail()
    assert "listen.unix_mode 660" in d.log()
    assert "held to listen.allowed_uids" not in d.log()
    # With allowed_uids, local TCP connections are held to them (their
    # owner's uid is looked up: test_access_unix.py): no bypass left.
    d = daemon_factory(daemon_config(root, listen={"allowed_uids": [str(os.getuid())]}),
                       name="uids")
    assert BYPASS not in d.log(), d.log_tail()
    assert "connections from this host are held to listen.allowed_uids" in d.log()
    # With tokens, TCP asks for one: no warning.
    token = tmp_path / "token"
    token.write_text("x" * 40 + "\n")
    token.chmod(0o600)
    from conveyor_integration import _yaml  # it does not nest maps in lists
    text = _yaml(daemon_config(root)) + "\naccess:\n  tokens:\n"
    text += "    - {name: t, file: '%s'}\n" % token
    d = daemon_factory(text, name="tokens")
    assert BYPASS not in d.log(), d.log_tail()


def _self_signed(folder, name, not_before, not_after):
    """A self-signed EC certificate for 127.0.0.1 valid from `not_before`
    to `not_after`: (cert path, key path)."""
    x509 = pytest.importorskip("cryptography.x509")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    import ipaddress

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "conveyord")])
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(not_before).not_valid_after(not_after)
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = folder / (name + ".pem"), folder / (name + ".key")
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.TraditionalOpenSSL,
                                           serialization.NoEncryption()))
    key_path.chmod(0o600)
    return cert_path, key_path


@pytest.mark.parametrize("case", ["expired", "not_yet_valid", "valid"])
def test_certificate_out_of_its_validity_is_said_at_start_and_on_sighup(
        case, daemon_factory, dataset, tmp_path):
    root, _ = dataset
    now = datetime.datetime.now(datetime.timezone.utc)
    year = datetime.timedelta(days=365)
    begin, end = {"expired": (now - 2 * year, now - year),
                  "not_yet_valid": (now + year, now + 2 * year),
                  "valid": (now - year, now + year)}[case]
    cert, key = _self_signed(tmp_path, case, begin, end)
    d = daemon_factory(daemon_config(root, listen={"tls": {"cert": str(cert), "key": str(key)}}),
                       name=case)
    said = {"expired": "' expired on ", "not_yet_valid": "' is not valid before ",
            "valid": None}[case]
    lines = [l for l in d.log().splitlines() if "TLS at start: listen.tls.cert" in l]
    if said is None:
        assert not lines, d.log_tail()
        return
    assert len(lines) == 1 and said in lines[0] and str(cert) in lines[0], d.log_tail()
    assert str((end if case == "expired" else begin).year) in lines[0]
    # Still serving (the unix socket needs no certificate).
    assert conveyor.list_pipelines(d.unix, timeout=scaled(10))
    os.kill(d.pid, signal.SIGHUP)
    assert wait_until(lambda: "TLS on SIGHUP: listen.tls.cert" in d.log(), 10.0), d.log_tail()


def _refused_hand_over(fd_socket):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.settimeout(scaled(10))
        s.connect(fd_socket)
        s.sendall(struct.pack("<Q", 987654321) + b"\0" * 32)
        status = s.recv(1)
    finally:
        s.close()
    assert status == b"\x01"


def test_refused_hand_overs_are_logged_once_per_peer_and_interval(daemon_factory, dataset):
    root, _ = dataset
    d = daemon_factory(daemon_config(root), name="fdflood")
    fd_socket = str(d.socket_path) + ".fd"
    n = 2000
    for _ in range(n):
        _refused_hand_over(fd_socket)
    assert d.poll() is None
    # Before: one line per refusal (29,000 lines/s from one client).
    assert d.log().count("fd hand-over refused") == 1, d.log_tail()
    # The rest in one summary once the 10 s are over.
    assert wait_until(lambda: "more refused or deferred from uid %d" % os.getuid() in d.log(),
                      20.0, interval=0.2), d.log_tail()
    summary = [l for l in d.log().splitlines() if "more refused or deferred" in l]
    assert len(summary) == 1 and ("fd hand-over: %d more" % (n - 1)) in summary[0], summary
