"""gRPC core's own log lines go through the daemon's logger: with
log_format json and a TLS port, a client that offers only TLS 1.0 makes
gRPC log the failed TLS handshake ("unsupported protocol"; a plaintext
client never reaches gRPC: the daemon's TCP listener closes a connection
whose first bytes are no TLS handshake, and says so itself), and every line on
the daemon's stderr — gRPC's included — is one JSON object (logger "grpc",
with the file and line gRPC logged from). In the text format the same line
carries the daemon's timestamp and level letter."""

import json
import re
import socket
import ssl
import subprocess

import pytest
from conveyor_integration import daemon_config, require_daemon, scaled, wait_until

# TLS 1.0 is what the test offers on purpose.
pytestmark = pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1 is deprecated")


def self_signed(folder, name):
    r = subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", name + ".key", "-out",
                        name + ".pem", "-days", "2", "-subj", "/CN=conveyord", "-addext",
                        "subjectAltName=IP:127.0.0.1"],
                       cwd=folder, capture_output=True, timeout=scaled(60))
    assert r.returncode == 0, r.stderr.decode()
    return folder / (name + ".pem"), folder / (name + ".key")


@pytest.fixture(scope="module")
def server_cert(tmp_path_factory):
    """The daemon's certificate and key."""
    return self_signed(tmp_path_factory.mktemp("cert"), "server")


def tls_daemon(daemon_factory, dataset, server_cert, log_format):
    require_daemon()
    root, _ = dataset
    cert, key = server_cert
    return daemon_factory(daemon_config(root, log_format=log_format,
                                        listen={"tls": {"cert": str(cert), "key": str(key)}}),
                          name="tls-" + log_format)


def old_tls_client(address):
    """A TLS 1.0 ClientHello on the daemon's TLS port: gRPC in the daemon
    refuses the handshake (it speaks TLS 1.2 and up) and logs why."""
    host, port = address.rsplit(":", 1)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.minimum_version = context.maximum_version = ssl.TLSVersion.TLSv1
    context.set_ciphers("DEFAULT:@SECLEVEL=0")
    with socket.create_connection((host, int(port)), timeout=scaled(10)) as raw:
        with pytest.raises((ssl.SSLError, OSError)):
            context.wrap_socket(raw)


def complete_lines(daemon):
    """The log's lines written whole so far (not one being written now)."""
    return daemon.log().split("\n")[:-1]


def grpc_records(daemon):
    records = []
    for line in complete_lines(daemon):
        if not line:
            continue
        record = json.loads(line)  # every line is one JSON object
        if record.get("logger") == "grpc":
            records.append(record)
    return records


def test_grpc_lines_are_json_lines_in_the_json_format(daemon_factory, dataset, server_cert):
    d = tls_daemon(daemon_factory, dataset, server_cert, "json")
    old_tls_client(d.tcp)
    # gRPC logs the failed handshake on one of its own threads.
    assert wait_until(lambda: any("andshake" in r["msg"] for r in grpc_records(d)),
                      timeout=20), d.log_tail()
    d.stop(timeout=scaled(10))
    lines = [line for line in d.log().splitlines() if line]
    assert lines
    for line in lines:
        record = json.loads(line)
        assert list(record)[:5] == ["ts", "level", "logger", "thread", "msg"], record
    handshake = [r for r in grpc_records(d) if "andshake" in r["msg"]]
    assert handshake, d.log()
    r = handshake[0]
    assert r["level"] in ("error", "info", "debug"), r
    assert list(r)[5:] == ["file", "line"], r
    assert r["file"].endswith((".cc", ".c", ".h")) and isinstance(r["line"], int), r
    # The daemon's own lines are still its own.
    assert any(rec["logger"] == "conveyord" and "serving" in rec["msg"]
               for rec in map(json.loads, lines))


def test_grpc_lines_take_the_text_format_too(daemon_factory, dataset, server_cert):
    d = tls_daemon(daemon_factory, dataset, server_cert, "text")
    old_tls_client(d.tcp)

    def handshake_lines():
        return [line for line in complete_lines(d) if "andshake" in line]

    assert wait_until(lambda: handshake_lines(), timeout=20), d.log_tail()
    for line in handshake_lines():
        # The daemon's timestamp and level letter, gRPC's file:line at the end.
        assert re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} [TDIWEC] ", line), line
        assert re.search(r"\([^()]+\.(cc|c|h):\d+\)$", line), line
