#!/usr/bin/env python3
"""Host-only smoke of an unpacked GPU bundle (scripts/gpu-bundle.sh): no GPU needed.

    python3 tests/gpu/host_smoke.py --data DIR [--workdir DIR]

Run from anywhere with the bundle's python/ on PYTHONPATH (nothing else of the source tree):
checks `bin/conveyord --version`, starts the bundle's conveyord (its launcher, its lib/) on a
unix socket serving DIR, checks from /proc/PID/maps that every shared library it loaded but
glibc's and the NVIDIA driver's came from the bundle's lib/ (an ImageFolder; bench/gen_imagenet_like.py makes one), reads one
epoch with the bundle's Python client over shared memory and checks every image arrived once,
with the pipeline's shape and dtype. Prints one line "host smoke: ok ..." and exits 0, or
names what failed and exits 1. tests/integration/test_gpu_bundle.py runs it in a clean
environment from a copy of the bundle outside the checkout; scripts/gpu-check.sh runs it first
on the GPU host.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

BUNDLE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(BUNDLE, "bench"))

import conveyor  # noqa: E402  (the bundle's, from PYTHONPATH)
import daemon_proc  # noqa: E402  (bench/daemon_proc.py: config + conveyor.daemon launcher)

SIZE = 64


def count_images(root):
    return sum(1 for _, _, files in os.walk(root) for f in files
               if f.lower().endswith((".jpeg", ".jpg", ".png", ".webp")))


# What comes from the host on purpose: glibc's own libraries (the bundle leaves them out) and
# the NVIDIA driver's, which a CUDA conveyord loads at run time (dlopen, not in `ldd`).
HOST_LIBS = ("ld-linux", "libc.so", "libm.so", "libdl.so", "librt.so", "libpthread.so",
             "libresolv.so", "libutil.so", "libanl.so", "libmvec.so", "libnsl.so", "libnss_",
             "libBrokenLocale.so", "libthread_db.so", "libcuda.so", "libnvidia-",
             "libcudadebugger.so")


def libraries_outside(pid):
    """Shared libraries the running process mapped from outside the bundle, HOST_LIBS aside:
    a library missing from lib/ that the host happens to have shows up here (the loader
    falls back to the host's folders), so the check fails on a machine that has it too."""
    outside = set()
    with open("/proc/%d/maps" % pid) as f:
        for line in f:
            parts = line.split(None, 5)
            if len(parts) < 6 or ".so" not in parts[5]:
                continue
            path = parts[5].strip()
            if path.startswith(BUNDLE + os.sep):
                continue
            if os.path.basename(path).startswith(HOST_LIBS):
                continue
            outside.add(path)
    return sorted(outside)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="ImageFolder root to serve")
    ap.add_argument("--workdir", help="folder for the daemon's socket, config and log")
    ap.add_argument("--batch-size", type=int, default=8)
    args = ap.parse_args(argv)

    daemon_bin = os.path.join(BUNDLE, "bin", "conveyord")
    pkg = os.path.dirname(os.path.abspath(conveyor.__file__))
    if not pkg.startswith(BUNDLE + os.sep):
        print("host smoke: FAILED: conveyor imported from %s, not from the bundle" % pkg)
        return 1
    version = subprocess.run([daemon_bin, "--version"], capture_output=True, text=True,
                             timeout=60)
    if version.returncode != 0:
        print("host smoke: FAILED: conveyord --version exited %d:\n%s"
              % (version.returncode, (version.stdout + version.stderr)[-3000:]))
        return 1
    expected = count_images(args.data)
    if expected == 0:
        print("host smoke: FAILED: no images under %s" % args.data)
        return 1

    workdir = args.workdir or tempfile.mkdtemp(prefix="cvs-", dir="/tmp")  # short socket path
    os.makedirs(workdir, exist_ok=True)
    daemon = daemon_proc.daemon(daemon_bin, workdir, 2, {"root": os.path.abspath(args.data)},
                                size=SIZE, max_batch_size=64)
    try:
        try:
            daemon.start(timeout=60)
        except Exception as e:  # noqa: BLE001  (the launcher's error names the cause)
            print("host smoke: FAILED: conveyord did not start: %s\n%s" % (e, daemon.log()[-3000:]))
            return 1
        outside = libraries_outside(daemon.pid)
        if outside:
            print("host smoke: FAILED: conveyord loaded libraries from outside the bundle "
                  "(missing from lib/): %s" % ", ".join(outside))
            return 1
        seen = []
        with conveyor.Loader(daemon.address, "bench", batch_size=args.batch_size) as loader:
            with loader.epoch(0) as stream:
                transport = stream.transport
                for batch in stream:
                    imgs = batch.images
                    if imgs.dtype.name != "uint8" or tuple(imgs.shape[1:]) != (3, SIZE, SIZE):
                        print("host smoke: FAILED: batch of %s %s, expected uint8 [n,3,%d,%d]"
                              % (imgs.dtype, imgs.shape, SIZE, SIZE))
                        return 1
                    seen.extend(int(i) for i in batch.indices)
                    batch.release()
        if sorted(seen) != list(range(expected)):
            print("host smoke: FAILED: %d samples of %d arrived (indices %s...)"
                  % (len(seen), expected, sorted(seen)[:10]))
            return 1
        if transport != "shared_memory":
            print("host smoke: FAILED: transport %s over a unix socket, expected shared_memory"
                  % transport)
            return 1
        status = daemon.stop()
        if status != 0:
            print("host smoke: FAILED: conveyord exited %s at SIGTERM\n%s"
                  % (status, daemon.log()[-3000:]))
            return 1
        print("host smoke: ok: %s served %d images over %s to %s (python %d.%d, protobuf %s, "
              "grpcio %s)" % (version.stdout.strip(), expected, transport, pkg,
                              sys.version_info[0], sys.version_info[1], _protobuf_version(),
                              _grpc_version()))
        return 0
    finally:
        daemon.stop()
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)


def _protobuf_version():
    import google.protobuf
    return google.protobuf.__version__


def _grpc_version():
    import grpc
    return grpc.__version__


if __name__ == "__main__":
    sys.exit(main())
