"""TLS on the TCP listener (listen.tls), with certificates the tests make
with the openssl CLI: a CA, a server certificate for 127.0.0.1 and
localhost, a client certificate, and a second CA with its own server
certificate.

Pinned here: a plaintext client and a client trusting another CA are
refused, on gRPC and on the data socket (which speaks TLS too); a client
trusting the right CA streams the same batches as the unix socket, INLINE
and DATA_SOCKET (AUTO picks the data socket); a plaintext connection to the
data socket is closed without holding up the streams; with
require_client_cert a client without a certificate is refused (gRPC and
data socket) and one with a certificate is known by its common name; a
certificate renewed on disk is served without a restart, to new gRPC and
data connections; bad certificate files stop the daemon at start naming the
field.
"""

import os
import shutil
import socket
import struct
import subprocess

import grpc
import numpy as np
import pytest

import conveyor
from conveyor._datasock import DataSocket
from conveyor.daemon import DaemonError
from conveyor_integration import (Daemon, daemon_config, pb, pb_grpc, read_epoch, require_daemon,
                                  scaled, wait_until)
from pki_files import make_ca, make_cert


SERVER_EXT = "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth"
CLIENT_EXT = "extendedKeyUsage=clientAuth"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pki")
    make_ca(folder, "ca")
    make_ca(folder, "other-ca")
    return {
        "ca": folder / "ca.pem",
        "server": make_cert(folder, "server", "ca", "conveyord", SERVER_EXT),
        "client": make_cert(folder, "client", "ca", "trainer-7", CLIENT_EXT),
        "other_ca": folder / "other-ca.pem",
        "other_server": make_cert(folder, "other-server", "other-ca", "conveyord", SERVER_EXT),
        "other_client": make_cert(folder, "other-client", "other-ca", "intruder", CLIENT_EXT),
    }


def tls_config(root, pki, workdir, **tls):
    """A config whose listen.tls uses copies of the server's files in
    `workdir` (so that a test may replace them)."""
    workdir.mkdir(parents=True, exist_ok=True)
    cert, key = workdir / "server.pem", workdir / "server.key"
    shutil.copy(pki["server"][0], cert)
    shutil.copy(pki["server"][1], key)
    return daemon_config(root, listen={"tls": dict({"cert": str(cert), "key": str(key)}, **tls)})


def list_codes(address, **security):
    """ListPipelines through the client: "OK" or the gRPC status code's name."""
    try:
        conveyor.list_pipelines(address, timeout=scaled(10), security=conveyor.Security(**security))
        return "OK"
    except conveyor.ConveyorError as e:
        return e.code.name if e.code is not None else str(e)


def test_tls_refuses_plaintext_and_strangers_and_streams_what_the_unix_socket_does(
        tmp_path, dataset, pki):
    require_daemon()
    root, samples = dataset
    d = Daemon(tmp_path / "d", tls_config(root, pki, tmp_path / "tls"))
    d.start()
    try:
        assert "TLS" in d.log()
        assert ", TLS)" in [l for l in d.log().splitlines() if "data socket for TCP" in l][0]
        assert list_codes(d.tcp) == "UNAVAILABLE"  # plaintext
        assert list_codes(d.tcp, tls_ca=str(pki["other_ca"])) == "UNAVAILABLE"
        assert list_codes(d.tcp, tls_ca=str(pki["ca"])) == "OK"

        reference = read_epoch(d.unix, seed=5)
        for transport, expected in (("auto", "data_socket"), ("data_socket", "data_socket"),
                                    ("inline", "inline")):
            got = read_epoch(d.tcp, seed=5, tls_ca=str(pki["ca"]), transport=transport)
            assert got.transport == expected
            assert len(got.indices) == len(samples)
            np.testing.assert_array_equal(got.images, reference.images)
            np.testing.assert_array_equal(got.labels, reference.labels)
            np.testing.assert_array_equal(got.indices, reference.indices)
    finally:
        d.stop(timeout=scaled(10))


def _data_socket_error(stream, **security):
    """Connects a second data socket to `stream`'s port with `security`'s TLS
    settings: the Unavailable it raises (the TLS handshake fails before the
    daemon could say the stream is taken)."""
    ctx = conveyor.Security(**security).data_socket_context()
    with pytest.raises(conveyor.Unavailable) as e:
        DataSocket("127.0.0.1", stream.opened.data_socket.data_port, stream.stream_id, stream.opened.data_socket.secret,
                   timeout=scaled(10), ssl_context=ctx).close()
    return str(e.value)


def test_tls_data_socket_refuses_plaintext_and_strangers_without_stalling_streams(
        tmp_path, dataset, pki):
    require_daemon()
    root, samples = dataset
    d = Daemon(tmp_path / "d", tls_config(root, pki, tmp_path / "tls"))
    d.start()
    try:
        reference = read_epoch(d.unix, seed=3, credits=2)
        loader = conveyor.Loader(d.tcp, pipeline="train", batch_size=8, seed=3, credits=2,
                                 transport="data_socket", tls_ca=str(pki["ca"]))
        images = []
        with loader.epoch(0) as stream:
            assert stream.transport == "data_socket"
            images.append(next(stream).images.copy())
            port = stream.opened.data_socket.data_port
            # A plaintext client: its handshake bytes are not TLS; the daemon
            # closes the connection without a status byte.
            plain = socket.create_connection(("127.0.0.1", port), timeout=scaled(10))
            plain.sendall(struct.pack("<Q", stream.stream_id) + stream.opened.data_socket.secret)
            answer = b""
            try:
                while True:
                    chunk = plain.recv(4096)
                    if not chunk:
                        break
                    answer += chunk
            except ConnectionResetError:
                pass  # closed with the client's bytes unread
            plain.close()
            assert answer[:1] != b"\x00", "a plaintext client was answered in plaintext"
            # A silent one waits for its deadline without holding anyone up.
            silent = socket.create_connection(("127.0.0.1", port), timeout=scaled(10))
            # A client trusting another CA gets a clear error.
            why = _data_socket_error(stream, tls_ca=str(pki["other_ca"]))
            assert "TLS handshake failed" in why and "certificate verify failed" in why, why
            for batch in stream:
                images.append(batch.images.copy())
            silent.close()
        loader.close()
        np.testing.assert_array_equal(np.concatenate(images), reference.images)
        assert "TLS handshake from" in d.log(), d.log()
    finally:
        d.stop(timeout=scaled(10))


def test_required_client_certificates(tmp_path, dataset, pki):
    require_daemon()
    root, samples = dataset
    cfg = tls_config(root, pki, tmp_path / "tls", client_ca=str(pki["ca"]),
                     require_client_cert=True)
    d = Daemon(tmp_path / "d", cfg)
    d.start()
    try:
        ca = str(pki["ca"])
        assert list_codes(d.tcp, tls_ca=ca) == "UNAVAILABLE"  # no client certificate
        assert list_codes(d.tcp, tls_ca=ca, client_cert=str(pki["other_client"][0]),
                          client_key=str(pki["other_client"][1])) == "UNAVAILABLE"
        client = dict(tls_ca=ca, client_cert=str(pki["client"][0]),
                      client_key=str(pki["client"][1]))
        assert list_codes(d.tcp, **client) == "OK"
        got = read_epoch(d.tcp, seed=1, **client)
        assert got.transport == "data_socket"
        assert len(got.indices) == len(samples)
        # The stream was opened by the certificate's common name.
        assert "(as 'trainer-7')" in d.log()
        # The data socket asks for the certificate too.
        loader = conveyor.Loader(d.tcp, pipeline="train", batch_size=8, transport="data_socket",
                                 **client)
        with loader.epoch(0) as stream:
            why = _data_socket_error(stream, tls_ca=ca)
            assert "handshake failed" in why and "client_cert" in why, why
            why = _data_socket_error(stream, tls_ca=ca, client_cert=str(pki["other_client"][0]),
                                     client_key=str(pki["other_client"][1]))
            assert "handshake failed" in why, why
            assert sum(b.num_samples for b in stream) == len(samples)
        loader.close()
    finally:
        d.stop(timeout=scaled(10))


def test_a_renewed_certificate_is_served_without_a_restart(tmp_path, dataset, pki):
    require_daemon()
    root, _ = dataset
    tls_dir = tmp_path / "tls"
    d = Daemon(tmp_path / "d", tls_config(root, pki, tls_dir, reload_interval_seconds=1))
    d.start()
    try:
        assert list_codes(d.tcp, tls_ca=str(pki["ca"])) == "OK"
        assert list_codes(d.tcp, tls_ca=str(pki["other_ca"])) == "UNAVAILABLE"
        # Renewal as cert managers do it: new files written aside, renamed in.
        for src, name in ((pki["other_server"][0], "server.pem"),
                          (pki["other_server"][1], "server.key")):
            shutil.copy(src, tls_dir / (name + ".new"))
            os.replace(tls_dir / (name + ".new"), tls_dir / name)
        assert wait_until(lambda: list_codes(d.tcp, tls_ca=str(pki["other_ca"])) == "OK",
                          timeout=30, interval=0.5), "the renewed certificate was not served"
        assert list_codes(d.tcp, tls_ca=str(pki["ca"])) == "UNAVAILABLE"
        # New data connections get the renewed certificate too (the data
        # socket looks at the files at most every reload_interval_seconds).
        def data_socket_renewed():
            try:
                read_epoch(d.tcp, seed=0, tls_ca=str(pki["other_ca"]), transport="data_socket")
                return True
            except conveyor.ConveyorError:
                return False
        assert wait_until(data_socket_renewed, timeout=30, interval=0.5), d.log()
        assert d.poll() is None
    finally:
        d.stop(timeout=scaled(10))


def test_a_token_still_limits_a_client_with_a_certificate(tmp_path, dataset, pki):
    require_daemon()
    root, _ = dataset
    token_file = tmp_path / "trainer.token"
    token_file.write_text(subprocess.run(["openssl", "rand", "-hex", "32"], check=True,
                                         capture_output=True, text=True).stdout)
    os.chmod(token_file, 0o600)
    from conveyor_integration import _yaml
    cfg = tls_config(root, pki, tmp_path / "tls", client_ca=str(pki["ca"]))
    text = _yaml(cfg) + "\naccess:\n  tokens:\n    - {name: trainer, file: '%s', pipelines: [train]}\n" \
        % token_file
    d = Daemon(tmp_path / "d", text)
    d.start()
    try:
        client = dict(tls_ca=str(pki["ca"]), client_cert=str(pki["client"][0]),
                      client_key=str(pki["client"][1]))
        # Tokens are configured: a certificate alone is not enough on TCP.
        assert list_codes(d.tcp, **client) == "UNAUTHENTICATED"
        names = [p.name for p in conveyor.list_pipelines(
            d.tcp, security=conveyor.Security(token_file=str(token_file), **client))]
        assert names == ["train"]
        loader = conveyor.Loader(d.tcp, pipeline="eval", batch_size=8,
                                 token_file=str(token_file), **client)
        with pytest.raises(conveyor.AccessDenied) as e:
            loader.epoch(0)
        loader.close()
        assert e.value.code == grpc.StatusCode.PERMISSION_DENIED
        assert "(as 'trainer')" in str(e.value)  # the token's name, not the certificate's
    finally:
        d.stop(timeout=scaled(10))


@pytest.mark.parametrize("broken,field", [("key", "listen.tls.key"),
                                          ("cert", "listen.tls.cert"),
                                          ("mismatch", "listen.tls.key")])
def test_bad_tls_files_stop_the_daemon_at_start(tmp_path, dataset, pki, broken, field):
    require_daemon()
    root, _ = dataset
    cfg = tls_config(root, pki, tmp_path / "tls")
    tls = cfg["listen"]["tls"]
    if broken == "key":
        (tmp_path / "tls" / "server.key").write_text("not a key\n")
    elif broken == "cert":
        (tmp_path / "tls" / "server.pem").unlink()
    else:
        shutil.copy(pki["client"][1], tls["key"])  # another certificate's key
    d = Daemon(tmp_path / "d", cfg)
    with pytest.raises(DaemonError):
        d.start()
    d.stop()
    assert d.proc.returncode == 2
    assert "conveyord.yaml: field " + field in d.log(), d.log()
    # --check-config reads the same files.
    r = subprocess.run([str(d.binary), "--config", str(d.config_path), "--check-config",
                        "--tcp", "127.0.0.1:0"], capture_output=True, text=True,
                       timeout=scaled(60))
    assert r.returncode == 2 and "field " + field in r.stderr, r.stderr
