"""The GPU bundle (scripts/gpu-bundle.sh) is complete: packed from this build into a folder
outside the checkout, its host-only smoke (tests/gpu/host_smoke.py) passes in a clean
environment (`env -i`, PATH=/usr/bin:/bin, PYTHONPATH = the bundle's python/ only) with
Debian's python3 and, when it was made (scripts/venv.sh gpu-host), with the venv's newer
protobuf and grpcio; and the same smoke fails when one library or one stub is taken out of
a copy of the bundle (the daemon would then map a library from outside lib/, which the smoke
reads from /proc/PID/maps; the client could not import its stubs).
"""

import os
import subprocess
from pathlib import Path

import pytest

import conveyor_integration as ci

SCRIPT = ci.SOURCE_DIR / "scripts" / "gpu-bundle.sh"
VENV_PY = Path(os.environ.get("CONVEYOR_VENV_DIR", ci.SOURCE_DIR / ".venvs")) / "gpu-host" / \
    "bin" / "python"
GLIBC = ("ld-linux", "libc.so", "libm.so", "libdl.so", "librt.so", "libpthread.so",
         "libresolv.so", "libutil.so", "libanl.so", "libmvec.so", "libnsl.so", "libnss_",
         "libBrokenLocale.so", "libthread_db.so", "linux-vdso")


def _sanitized_build():
    cache = ci.BUILD_DIR / "CMakeCache.txt"
    text = cache.read_text() if cache.exists() else ""
    return any("%s:BOOL=ON" % opt in text for opt in ("CONVEYOR_ASAN", "CONVEYOR_TSAN"))


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    ci.require_daemon()
    if _sanitized_build():
        pytest.skip("the GPU bundle is packed from a Release build, not a sanitized one")
    out = tmp_path_factory.mktemp("outside") / "gpu-bundle"
    assert not str(out).startswith(str(ci.SOURCE_DIR) + os.sep)
    env = dict(os.environ, CONVEYOR_BUILD_DIR=str(ci.BUILD_DIR), CONVEYOR_GPU_BUNDLE_OFFLINE="1")
    r = subprocess.run([str(SCRIPT), "--no-tar", str(out)], capture_output=True, text=True,
                       env=env, timeout=ci.scaled(120))
    assert r.returncode == 0, r.stderr[-4000:]
    assert r.stdout.strip().splitlines()[-1] == str(out)
    return out


@pytest.fixture(scope="module")
def images(tmp_path_factory, bundle):
    """32 generated JPEGs, written by the bundle's own generator."""
    root = tmp_path_factory.mktemp("data") / "images"
    r = subprocess.run([ci.PYTHON, str(bundle / "bench" / "gen_imagenet_like.py"), "--out",
                        str(root), "--images", "32", "--classes", "4", "--workers", "1"],
                       capture_output=True, text=True, timeout=ci.scaled(120))
    assert r.returncode == 0, r.stderr[-4000:]
    return root


def smoke(bundle, python, data):
    """The bundle's host-only smoke in a clean environment: (returncode, output)."""
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(bundle / "python"),
           "PYTHONNOUSERSITE": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    r = subprocess.run(["/usr/bin/env", "-i"] + ["%s=%s" % kv for kv in env.items()] +
                       [str(python), str(bundle / "tests" / "gpu" / "host_smoke.py"),
                        "--data", str(data)],
                       capture_output=True, text=True, timeout=ci.scaled(120), cwd="/")
    return r.returncode, r.stdout + r.stderr


def linked_copy(bundle, tmp_path):
    """A copy of the bundle made of hard links: removing a file there leaves the bundle."""
    copy = tmp_path / "gpu-bundle"
    subprocess.run(["cp", "-al", str(bundle), str(copy)], check=True)
    return copy


def test_every_library_resolves_inside_the_bundle(bundle):
    r = subprocess.run(["ldd", str(bundle / "libexec" / "conveyord")], capture_output=True,
                       text=True, env={"PATH": "/usr/bin:/bin",
                                       "LD_LIBRARY_PATH": str(bundle / "lib")})
    assert r.returncode == 0, r.stderr
    resolved = [line.split() for line in r.stdout.splitlines() if "=>" in line]
    assert len(resolved) > 10
    for name, _, path, *_ in resolved:
        if name.startswith(GLIBC):
            assert not (bundle / "lib" / name).exists(), "glibc's %s is in the bundle" % name
            continue
        assert path.startswith(str(bundle / "lib") + os.sep), "%s resolves to %s" % (name, path)
    names = {p.name for p in (bundle / "lib").iterdir()}
    assert any(n.startswith("libstdc++.so") for n in names)
    assert any(n.startswith("libgcc_s.so") for n in names)


def test_manifest_and_checksums(bundle):
    import json

    manifest = json.loads((bundle / "MANIFEST.json").read_text())
    head = subprocess.run(["git", "-C", str(ci.SOURCE_DIR), "rev-parse", "HEAD"],
                          capture_output=True, text=True).stdout.strip()
    assert manifest["git_commit"] == head
    assert manifest["glibc_needed"].startswith("GLIBC_2.")
    assert manifest["libraries"] == len(list((bundle / "lib").iterdir()))
    r = subprocess.run(["sha256sum", "--quiet", "-c", "SHA256SUMS"], cwd=bundle,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    for f in ("gpu-check.sh", "bin/conveyord", "bench/gpu_landing.py",
              "bench/gen_imagenet_like.py", "tests/support/skipped_exit.py",
              "python/conveyor/_proto/v1/conveyor_pb2.py"):
        assert (bundle / f).is_file(), f
    assert list((bundle / "tests" / "gpu").glob("test_*.py"))


def test_smoke_debian_python(bundle, images):
    rc, out = smoke(bundle, ci.PYTHON, images)
    assert rc == 0 and "host smoke: ok" in out, out[-4000:]
    assert "served 32 images over shared_memory" in out


def test_smoke_gpu_host_venv(bundle, images):
    """The stubs load, and the client works, under the newer protobuf/grpcio of the GPU host."""
    if not VENV_PY.exists():
        pytest.skip("no gpu-host venv (scripts/venv.sh gpu-host)")
    rc, out = smoke(bundle, VENV_PY, images)
    assert rc == 0 and "host smoke: ok" in out, out[-4000:]
    assert "protobuf 4." not in out


def test_smoke_fails_without_a_library(bundle, images, tmp_path):
    copy = linked_copy(bundle, tmp_path)
    # A library the daemon loads only through another one (libavcodec's, libavformat's).
    direct = subprocess.run(["objdump", "-p", str(bundle / "libexec" / "conveyord")],
                            capture_output=True, text=True).stdout
    deep = sorted(p.name for p in (copy / "lib").iterdir()
                  if p.name not in direct and not p.name.startswith(("libstdc++", "libgcc_s")))
    assert deep
    victim = deep[len(deep) // 2]
    (copy / "lib" / victim).unlink()
    rc, out = smoke(copy, ci.PYTHON, images)
    assert rc != 0, out
    assert "outside the bundle" in out and victim in out, out[-4000:]


def test_smoke_fails_without_a_stub(bundle, images, tmp_path):
    copy = linked_copy(bundle, tmp_path)
    (copy / "python" / "conveyor" / "_proto" / "v1" / "conveyor_pb2_grpc.py").unlink()
    rc, out = smoke(copy, ci.PYTHON, images)
    assert rc != 0, out
    assert "conveyor_pb2_grpc" in out, out[-4000:]



def test_gpu_check_runs_here_and_says_what_it_could_not_check(bundle, tmp_path):
    """The bundle's gpu-check.sh on this machine, with Debian's python3 in a clean
    environment: the bundle and host checks pass, the GPU checks fail (no GPU here), every
    GPU test reports skipped and the benchmark measures nothing; a summary line each, also
    under $OUT."""
    if os.path.exists("/dev/nvidiactl"):
        pytest.skip("this machine has a GPU: scripts/gpu-check.sh is the check there")
    out = tmp_path / "out"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHON": ci.PYTHON,
           "GPU_CHECK_IMAGES": "16", "OUT": str(out)}
    r = subprocess.run(["/usr/bin/env", "-i"] + ["%s=%s" % kv for kv in env.items()] +
                       [str(bundle / "gpu-check.sh"), str(tmp_path / "results")],
                       capture_output=True, text=True, timeout=ci.scaled(180), cwd="/")
    summary = (out / "gpu-check" / "summary.txt").read_text()
    lines = dict(line.split(": ", 1) for line in summary.splitlines())
    assert r.returncode == 1, r.stdout[-4000:] + r.stderr[-2000:]
    for check in ("bundle.checksums", "bundle.glibc", "data", "smoke"):
        assert lines["CHECK " + check].startswith("PASS"), summary
    assert lines["CHECK gpu.torch_cuda"].startswith("FAIL"), summary
    assert lines["CHECK pytest"].startswith("SKIP"), summary
    assert lines["CHECK bench"].startswith("SKIP skipped: no CUDA device"), summary
    gpu_tests = [k for k in lines if k.startswith("CHECK pytest.")]
    assert len(gpu_tests) == len(list((bundle / "tests" / "gpu").glob("test_*.py")))
    assert all(lines[k].startswith("SKIP") for k in gpu_tests), summary
    assert (out / "gpu-check" / "MANIFEST.json").is_file()
