"""The Python client as a package: committed gRPC stubs that match the proto,
`pip install` / a wheel in fresh virtual environments (dependencies from
PyPI, or Debian's through --system-site-packages, offline), a real stream
from the installed package, and mypy over the typed public API.

The package is built from a copy of client/python (pip builds in the source
folder and would leave build/ and *.egg-info there).
"""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conveyor_integration import CLIENT_DIR, SOURCE_DIR, scaled, venv_python

PROTO = SOURCE_DIR / "proto" / "conveyor" / "v1" / "conveyor.proto"
STUBS = CLIENT_DIR / "conveyor" / "_proto" / "v1"

# Run by the installed package, outside the source tree: one epoch of the
# daemon's `train` pipeline (48 samples) over the unix socket.
STREAM_CHECK = r"""
import sys, conveyor
assert sys.argv[2] in conveyor.__file__, conveyor.__file__
loader = conveyor.Loader(sys.argv[1], pipeline="train", batch_size=8, seed=1)
n, kept = 0, []
for batch in loader.epoch(0):
    n += batch.num_samples
    kept.append((batch.images, batch.images.copy()))
assert n == 48, n
assert all((a == b).all() for a, b in kept), "kept arrays changed"
assert len(loader) == 6
import numpy, grpc, google.protobuf
print("ok", numpy.__version__, grpc.__version__, google.protobuf.__version__)
"""


def _run(cmd, timeout=600, **kw):
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True,
                       timeout=scaled(timeout), **kw)
    assert r.returncode == 0, "%s failed (%d):\n%s\n%s" % (cmd, r.returncode, r.stdout[-3000:],
                                                          r.stderr[-3000:])
    return r.stdout


def _clean_env():
    import os
    env = dict(os.environ)
    for k in ("PYTHONPATH", "RANK", "WORLD_SIZE", "PIP_REQUIRE_VIRTUALENV"):
        env.pop(k, None)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


@pytest.fixture(scope="module")
def source_copy(tmp_path_factory):
    dst = tmp_path_factory.mktemp("pkg") / "python"
    shutil.copytree(CLIENT_DIR, dst, ignore=shutil.ignore_patterns(
        "__pycache__", "build", "dist", "*.egg-info"))
    return dst


def test_committed_stubs_match_the_proto(tmp_path):
    """The committed conveyor/_proto/v1 stubs are what protoc makes of the
    proto today (the CMake build regenerates them in place: commit them)."""
    out = subprocess.run(["git", "-C", str(SOURCE_DIR), "ls-files", "client/python/conveyor/_proto"],
                         capture_output=True, text=True)
    if out.returncode == 0:  # a git checkout (not an exported tarball)
        files = set(out.stdout.split())
        for name in ("__init__.py", "v1/__init__.py", "v1/conveyor_pb2.py",
                     "v1/conveyor_pb2_grpc.py"):
            assert "client/python/conveyor/_proto/" + name in files, "stub %s not committed" % name
    protoc, plugin = shutil.which("protoc"), shutil.which("grpc_python_plugin")
    assert protoc and plugin, "protoc and grpc_python_plugin are build dependencies"
    stage = tmp_path / "stage" / "conveyor" / "_proto" / "v1"
    stage.mkdir(parents=True)
    shutil.copy(PROTO, stage / "conveyor.proto")
    gen = tmp_path / "gen"
    gen.mkdir()
    _run([protoc, "--proto_path=%s" % (tmp_path / "stage"), "--python_out=%s" % gen,
          "--grpc_out=%s" % gen, "--plugin=protoc-gen-grpc=%s" % plugin, stage / "conveyor.proto"])
    for name in ("conveyor_pb2.py", "conveyor_pb2_grpc.py"):
        fresh = (gen / "conveyor" / "_proto" / "v1" / name).read_text()
        assert (STUBS / name).read_text() == fresh, (
            "client/python/conveyor/_proto/v1/%s does not match proto/conveyor/v1/conveyor.proto: "
            "rebuild (the build regenerates it) and commit it" % name)


def test_wheel_installs_in_a_fresh_venv_with_pypi_packages(daemon, source_copy, tmp_path):
    """A wheel built by pip in a fresh venv that sees nothing of the
    system's packages: grpcio, protobuf and numpy come from PyPI (versions
    of constraints-pypi.txt), and a real stream works."""
    env = _clean_env()
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", venv], env=env)
    py = venv / "bin" / "python"
    dist = tmp_path / "dist"
    # The venv's own pip builds it, with build isolation (setuptools from PyPI).
    _run([py, "-m", "pip", "wheel", "-q", "--disable-pip-version-check", "--no-deps", "-w", dist,
          source_copy], env=env)
    wheels = list(dist.glob("conveyor_client-*.whl"))
    assert len(wheels) == 1, wheels
    _run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check", "-c",
          CLIENT_DIR / "constraints-pypi.txt", wheels[0]], env=env)
    out = _run([py, "-c", STREAM_CHECK, daemon.unix, str(venv)], env=env, cwd=tmp_path)
    print("PyPI venv:", out.strip())
    assert out.startswith("ok ")
    assert "/usr/lib/python3" not in _run([py, "-c", "import grpc; print(grpc.__file__)"], env=env)
    # The console script is installed too.
    assert "pipelines" in _run([venv / "bin" / "conveyor", "--help"], env=env)


def test_pip_install_in_a_venv_with_debian_packages_offline(daemon, source_copy, tmp_path):
    """`pip install ./client/python` in a venv with Debian's site packages,
    without any index (--no-index, Debian's setuptools): the dependencies
    are Debian's python3-grpcio / -protobuf / -numpy."""
    env = _clean_env()
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--system-site-packages", venv], env=env)
    py = venv / "bin" / "python"
    _run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-index",
          "--no-build-isolation", source_copy], env=env)
    out = _run([py, "-c", STREAM_CHECK, daemon.unix, str(venv)], env=env, cwd=tmp_path)
    print("Debian venv:", out.strip())
    assert "/usr/lib/python3" in _run([py, "-c", "import grpc; print(grpc.__file__)"], env=env)


def test_mypy_checks_the_typed_public_api():
    """mypy (pinned in scripts/venvs/mypy.txt) with client/python's config:
    the public modules are checked with disallow_untyped_defs."""
    py = venv_python("mypy")
    r = subprocess.run([py, "-m", "mypy", "--no-incremental", "--cache-dir=/dev/null"], cwd=CLIENT_DIR, capture_output=True,
                       text=True, timeout=scaled(300), env=_clean_env())
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Success" in r.stdout
