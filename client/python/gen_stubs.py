#!/usr/bin/env python3
"""Generates the client package's gRPC stubs, conveyor._proto, from the
protos (proto/ of the source tree; client/python/proto links to it):

  conveyor/v1/conveyor.proto   -> conveyor/_proto/v1/conveyor_pb2{,_grpc}.py
  grpc/health/v1/health.proto  -> conveyor/_proto/grpc/health/v1/health_pb2{,_grpc}.py

Each proto is staged under its module's folder, so the generated modules
import each other as conveyor._proto.... (the proto packages, conveyor.v1 and
grpc.health.v1, and so the wire names, stay what the protos say).

Two users, one code path: the CMake build (target conveyor_python_stubs)
writes them under <build>/python, where the package finds them in a source
checkout (conveyor/_stub_path.py), and the package build (setup.py,
`pip install`) writes them into the wheel.

The compiler: protoc with grpc_python_plugin (Debian: protobuf-compiler,
protobuf-compiler-grpc), given or on PATH, when protoc is 3.19 or newer (older
gencode does not load under protobuf 4 and later); else grpc_tools.protoc
(PyPI's grpcio-tools, 1.48 or newer) when importable. Usage:
  gen_stubs.py --out DIR [--protoc PATH --grpc-python-plugin PATH]
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO_DIR = os.path.join(HERE, "proto")

# (proto relative to PROTO_DIR, the package folder its modules go to)
PROTOS = [
    ("conveyor/v1/conveyor.proto", "conveyor/_proto/v1"),
    ("grpc/health/v1/health.proto", "conveyor/_proto/grpc/health/v1"),
]

MIN_PROTOC = (3, 19)
MIN_GRPC_TOOLS = (1, 48)  # the first that bundles a protoc of 3.19 or newer, with margin


def outputs(out_dir):
    """Every file generate() writes under out_dir."""
    files = []
    for proto, pkg in PROTOS:
        stem = os.path.splitext(os.path.basename(proto))[0]
        files += [os.path.join(out_dir, pkg, stem + "_pb2.py"),
                  os.path.join(out_dir, pkg, stem + "_pb2_grpc.py")]
    return files + [os.path.join(out_dir, d, "__init__.py") for d in _package_dirs()]


def _package_dirs():
    """conveyor/_proto and every folder under it that holds modules (not
    conveyor/ itself: an __init__.py there would shadow the source package)."""
    dirs = set()
    for _, pkg in PROTOS:
        parts = pkg.split("/")
        for i in range(2, len(parts) + 1):
            dirs.add("/".join(parts[:i]))
    return sorted(dirs)


def _protoc_version(protoc):
    try:
        out = subprocess.run([protoc, "--version"], capture_output=True, text=True,
                             timeout=30).stdout
    except OSError:
        return None
    m = re.search(r"(\d+)\.(\d+)", out)
    if not m:
        return None
    major, minor = int(m.group(1)), int(m.group(2))
    # protoc 21 and later print "libprotoc 21.x" (= protobuf 3.21 / 4.21, ...)
    return (3, major) if major >= 20 else (major, minor)


def find_compiler(protoc=None, plugin=None):
    """The command prefix that compiles a proto into Python messages and
    gRPC stubs (arguments: -I, --python_out, --grpc_python_out), or None."""
    protoc = protoc or shutil.which("protoc")
    plugin = plugin or shutil.which("grpc_python_plugin")
    if protoc and plugin:
        version = _protoc_version(protoc)
        if version is not None and version >= MIN_PROTOC:
            return [protoc, "--plugin=protoc-gen-grpc_python=%s" % plugin]
    try:
        import grpc_tools.protoc  # noqa: F401
        from importlib.metadata import version
        tools = tuple(int(x) for x in version("grpcio-tools").split(".")[:2])
    except (ImportError, ValueError):
        return None
    if tools < MIN_GRPC_TOOLS:  # e.g. Debian's python3-grpc-tools 1.14: a protoc of 2018
        return None
    return [sys.executable, "-m", "grpc_tools.protoc"]


def generate(out_dir, protoc=None, plugin=None, proto_dir=PROTO_DIR):
    """Writes the stubs (and their packages' __init__.py) under out_dir."""
    compiler = find_compiler(protoc, plugin)
    if compiler is None:
        raise RuntimeError(
            "cannot generate conveyor's gRPC stubs: no protoc (3.19 or newer) with "
            "grpc_python_plugin on PATH (Debian: apt-get install protobuf-compiler "
            "protobuf-compiler-grpc) and no grpc_tools module (pip install grpcio-tools)")
    with tempfile.TemporaryDirectory(prefix="conveyor-stubs-") as stage:
        staged = []
        for proto, pkg in PROTOS:
            src = os.path.join(proto_dir, proto)
            if not os.path.isfile(src):
                raise RuntimeError("proto %s not found (client/python/proto links to the "
                                   "source tree's proto/)" % src)
            dst = os.path.join(stage, pkg, os.path.basename(proto))
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copyfile(src, dst)
            staged.append(dst)
        os.makedirs(out_dir, exist_ok=True)
        cmd = compiler + ["--proto_path=%s" % stage, "--python_out=%s" % out_dir,
                          "--grpc_python_out=%s" % out_dir] + staged
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError("%s failed (%d): %s" % (" ".join(cmd), r.returncode,
                                                      r.stderr.strip()))
    for d in _package_dirs():
        init = os.path.join(out_dir, d, "__init__.py")
        if not os.path.exists(init):
            with open(init, "w") as f:
                f.write("# Generated package of conveyor's gRPC stubs (client/python/gen_stubs.py).\n")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder to write conveyor/_proto/ under")
    ap.add_argument("--protoc", help="protoc to use (default: from PATH)")
    ap.add_argument("--grpc-python-plugin", help="grpc_python_plugin (default: from PATH)")
    args = ap.parse_args(argv)
    try:
        generate(args.out, args.protoc, args.grpc_python_plugin)
    except RuntimeError as e:
        print("gen_stubs.py: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
