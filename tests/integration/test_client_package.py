"""The Python client as a package: gRPC stubs generated into the build tree
(none in the source tree), `pip install` / a wheel generating its own in
fresh virtual environments (dependencies from PyPI, or Debian's through
--system-site-packages, offline), a real stream and a health check from the
installed package, and mypy over the typed public API.

The package is built from a copy of client/python (pip builds in the source
folder and would leave build/ and *.egg-info there).
"""

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conveyor_integration import BUILD_DIR, CLIENT_DIR, SOURCE_DIR, scaled, venv_python

# What a wheel must carry besides the source modules: the generated stubs.
WHEEL_STUBS = ("conveyor/_proto/v1/conveyor_pb2.py", "conveyor/_proto/v1/conveyor_pb2_grpc.py",
               "conveyor/_proto/grpc/health/v1/health_pb2.py",
               "conveyor/_proto/grpc/health/v1/health_pb2_grpc.py")

# Run by the installed package, outside the source tree: one epoch of the
# daemon's `train` pipeline (48 samples) over the unix socket, and the health
# check through the package's grpc.health.v1 stubs.
STREAM_CHECK = r"""
import sys, conveyor
assert sys.argv[2] in conveyor.__file__, conveyor.__file__
import conveyor._proto  # the stubs the package build generated, not a build tree's
assert sys.argv[2] in conveyor._proto.__file__, conveyor._proto.__file__
loader = conveyor.Loader(sys.argv[1], pipeline="train", batch_size=8, seed=1)
n, kept = 0, []
for batch in loader.epoch(0):
    n += batch.num_samples
    kept.append((batch.images, batch.images.copy()))
assert n == 48, n
assert all((a == b).all() for a, b in kept), "kept arrays changed"
assert len(loader) == 6
from conveyor.daemon import SERVING, health_status
assert health_status(sys.argv[1]) == SERVING
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


def test_stubs_are_generated_into_the_build_tree_not_the_source_tree():
    """The gRPC stubs are not committed and the build writes none into the
    source tree; in a checkout the package imports the build tree's (CTest
    puts build/python on PYTHONPATH; conveyor/_stub_path.py)."""
    out = subprocess.run(["git", "-C", str(SOURCE_DIR), "ls-files", "client/python/conveyor/_proto"],
                         capture_output=True, text=True)
    if out.returncode == 0:  # a git checkout (not an exported tarball)
        assert out.stdout.split() == [], "generated stubs committed: %s" % out.stdout
    assert not (CLIENT_DIR / "conveyor" / "_proto" / "__init__.py").exists(), (
        "client/python/conveyor/_proto/ is a leftover of an older build: delete it")
    from conveyor._proto.v1 import conveyor_pb2
    from conveyor._proto.grpc.health.v1 import health_pb2, health_pb2_grpc
    for mod in (conveyor_pb2, health_pb2, health_pb2_grpc):
        assert Path(mod.__file__).is_relative_to(BUILD_DIR / "python"), mod.__file__
    # The wire names are the protos' packages, whatever the module path.
    assert conveyor_pb2.DESCRIPTOR.package == "conveyor.v1"
    assert health_pb2.DESCRIPTOR.services_by_name["Health"].full_name == "grpc.health.v1.Health"


def test_build_tree_stubs_are_what_the_package_build_generates(tmp_path):
    """One generator (client/python/gen_stubs.py) for the CMake build and for
    pip: what it writes now from proto/ is what the build tree holds, so the
    build's stubs are not stale and a wheel carries the same code."""
    sys.path.insert(0, str(CLIENT_DIR))
    try:
        import gen_stubs
    finally:
        sys.path.remove(str(CLIENT_DIR))
    gen_stubs.generate(str(tmp_path))
    built = BUILD_DIR / "python"
    for f in gen_stubs.outputs(str(tmp_path)):
        rel = Path(f).relative_to(tmp_path)
        assert (built / rel).read_text() == Path(f).read_text(), (
            "%s differs from what gen_stubs.py makes of proto/: rebuild "
            "(cmake --build build --target conveyor_python_stubs)" % (built / rel))


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
    with zipfile.ZipFile(wheels[0]) as whl:
        names = set(whl.namelist())
    missing = [n for n in WHEEL_STUBS if n not in names]
    assert not missing, "the wheel lacks its generated stubs %s" % missing
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
