"""TLS on the TCP listener (listen.tls), with certificates the tests make
with the openssl CLI: a CA, a server certificate for 127.0.0.1 and
localhost, a client certificate, and a second CA with its own server
certificate.

Pinned here: a plaintext client and a client trusting another CA are
refused; a client trusting the right CA streams the same batches as the
unix socket (INLINE: a TLS daemon has no data socket, and an explicit
DATA_SOCKET request is FAILED_PRECONDITION saying why); with
require_client_cert a client without a certificate is refused and one with
a certificate is known by its common name; a certificate renewed on disk is
served without a restart; bad certificate files stop the daemon at start
naming the field.
"""

import os
import shutil
import subprocess

import grpc
import numpy as np
import pytest

import conveyor
from conveyor.daemon import DaemonError
from conveyor_integration import (Daemon, daemon_config, pb, pb_grpc, read_epoch, require_daemon,
                                  scaled, wait_until)


def openssl(*args, cwd):
    r = subprocess.run(["openssl"] + [str(a) for a in args], capture_output=True, cwd=cwd,
                       timeout=scaled(60))
    assert r.returncode == 0, r.stderr.decode()


def make_ca(folder, name):
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-keyout", name + ".key", "-out", name + ".pem", "-days", "2",
            "-subj", "/CN=" + name, cwd=folder)
    return folder / (name + ".pem")


def make_cert(folder, name, ca, cn, extensions):
    (folder / (name + ".ext")).write_text(extensions + "\n")
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", name + ".key", "-out", name + ".csr", "-subj", "/CN=" + cn, cwd=folder)
    openssl("x509", "-req", "-in", name + ".csr", "-CA", ca + ".pem", "-CAkey", ca + ".key",
            "-CAcreateserial", "-out", name + ".pem", "-days", "2", "-extfile", name + ".ext",
            cwd=folder)
    return folder / (name + ".pem"), folder / (name + ".key")


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
        assert list_codes(d.tcp) == "UNAVAILABLE"  # plaintext
        assert list_codes(d.tcp, tls_ca=str(pki["other_ca"])) == "UNAVAILABLE"
        assert list_codes(d.tcp, tls_ca=str(pki["ca"])) == "OK"

        reference = read_epoch(d.unix, seed=5)
        got = read_epoch(d.tcp, seed=5, tls_ca=str(pki["ca"]))  # AUTO
        assert got.transport == "inline"
        assert len(got.indices) == len(samples)
        np.testing.assert_array_equal(got.images, reference.images)
        np.testing.assert_array_equal(got.labels, reference.labels)
        np.testing.assert_array_equal(got.indices, reference.indices)

        loader = conveyor.Loader(d.tcp, pipeline="train", batch_size=8, transport="data_socket",
                                 tls_ca=str(pki["ca"]))
        with pytest.raises(conveyor.InvalidRequest) as e:
            loader.epoch(0)
        loader.close()
        assert e.value.code == grpc.StatusCode.FAILED_PRECONDITION
        assert "does not speak TLS" in str(e.value)
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
        assert len(got.indices) == len(samples)
        # The stream was opened by the certificate's common name.
        assert "(as 'trainer-7')" in d.log()
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
