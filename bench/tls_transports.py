#!/usr/bin/python3
"""What TLS costs TCP clients: images/s and daemon CPU per image of three
ways to read batches over TCP loopback.

    /usr/bin/python3 bench/tls_transports.py --data DIR [--build DIR] [--threads N]
        [--epochs E] [--batch-size B] [--size S]

  plain DATA_SOCKET  no TLS; batch bytes on the data socket (send() from the slot)
  TLS DATA_SOCKET    listen.tls; batch bytes on the TLS data socket (SSL_write)
  TLS INLINE         listen.tls; batch bytes inside the TLS gRPC messages

Each mode starts its own conveyord (--threads N, the train pipeline of
daemon_proc.py), runs one warm-up epoch, then E timed epochs through
conveyor.Loader (the loop reads each batch's labels and releases it); it
prints the median images/s and the daemon's CPU ms per image over the timed
epochs (/proc/PID/stat). The certificates (a CA and a server certificate for
127.0.0.1, P-256) are made with the openssl CLI in a temporary folder.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from daemon_proc import CLIENT_DIR, write_config  # noqa: E402,F401
from proc_sampler import proc_cpu_seconds  # noqa: E402

import conveyor  # noqa: E402
from conveyor.daemon import DaemonProcess  # noqa: E402


def openssl(folder, *args):
    subprocess.run(["openssl"] + list(args), cwd=folder, check=True, capture_output=True)


def make_pki(folder):
    openssl(folder, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=bench-ca")
    with open(os.path.join(folder, "server.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    openssl(folder, "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=conveyord")
    openssl(folder, "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "server.pem", "-days", "2", "-extfile", "server.ext")
    return {k: os.path.join(folder, k + ".pem") for k in ("ca", "server")}, \
        os.path.join(folder, "server.key")


def run_mode(args, workdir, tls, transport, pki):
    os.makedirs(workdir)
    cfg = os.path.join(workdir, "conveyord.yaml")
    write_config(cfg, args.threads, {"root": os.path.abspath(args.data)}, size=args.size)
    security = {}
    if tls:
        pems, key = pki
        with open(cfg, "a") as f:
            f.write("listen:\n  tls: {cert: '%s', key: '%s'}\n" % (pems["server"], key))
        security = {"tls_ca": pems["ca"]}
    conveyord = os.path.join(args.build, "server", "conveyord")
    d = DaemonProcess(conveyord, cfg, workdir=workdir, tcp="127.0.0.1:0", threads=args.threads)
    d.start()
    rates, cpu_per_image = [], []
    try:
        loader = conveyor.Loader(d.tcp, pipeline="bench", batch_size=args.batch_size,
                                 credits=4, transport=transport, **security)
        for epoch in range(args.epochs + 1):
            cpu0, t0, n = proc_cpu_seconds(d.pid), time.monotonic(), 0
            with loader.epoch(epoch) as stream:
                for batch in stream:
                    n += len(batch.labels)
                got = stream.transport
            wall, cpu = time.monotonic() - t0, proc_cpu_seconds(d.pid) - cpu0
            if epoch > 0:  # the first is the warm-up
                rates.append(n / wall)
                cpu_per_image.append(1000.0 * cpu / n)
        loader.close()
    finally:
        d.stop()
    return got, statistics.median(rates), statistics.median(cpu_per_image)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="ImageFolder dataset root")
    ap.add_argument("--build", default=os.path.join(os.path.dirname(HERE), "build"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=3, help="timed epochs per mode")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--size", type=int, default=224)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="conveyor-tls-bench-")
    try:
        pki = make_pki(tmp)
        print("| mode | transport | images/s | daemon CPU ms/image |")
        print("|---|---|---|---|")
        for name, tls, transport in (("plain DATA_SOCKET", False, "data_socket"),
                                     ("TLS DATA_SOCKET", True, "data_socket"),
                                     ("TLS INLINE", True, "inline")):
            got, rate, cpu = run_mode(args, os.path.join(tmp, name.replace(" ", "-")), tls,
                                      transport, pki)
            print("| %s | %s | %.1f | %.2f |" % (name, got, rate, cpu), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
