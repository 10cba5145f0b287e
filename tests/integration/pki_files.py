"""Certificates for the tests, made with the openssl CLI: make_ca(folder,
name) writes name.pem / name.key, make_cert(folder, name, ca, cn,
extensions) a certificate signed by that CA with the given x509v3
extensions (subjectAltName, extendedKeyUsage) and returns (cert, key)."""

import subprocess

from conveyor_integration import scaled


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
