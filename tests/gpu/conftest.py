"""Fixtures of the GPU tests (tests/gpu): a real conveyord, a small generated dataset, the
Python client, and what the host path delivers for comparison. Every test file here skips
as a whole with "skipped: no CUDA device" when torch sees no CUDA device (gpu_available()),
so on a machine without one the files report skipped, never passed.

Where things come from, in a source tree or in an unpacked bundle (scripts/gpu-bundle.sh):
  conveyord   $CONVEYORD, else <bundle>/bin/conveyord, else
              $CONVEYOR_BUILD_DIR/server/conveyord (default build/ of the source tree)
  client      the `conveyor` package on sys.path, else <bundle>/python, else
              client/python of the source tree with <build>/python's stubs
  dataset     $CONVEYOR_GPU_DATA (an ImageFolder, scripts/gpu-check.sh makes one), else
              48 images generated once with bench/gen_imagenet_like.py
Every daemon runs on a unix socket in a short temporary folder and is stopped at teardown.
"""

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]  # the bundle or the source tree
IN_BUNDLE = (ROOT / "bin" / "conveyord").exists() and (ROOT / "python" / "conveyor").is_dir()
BUILD_DIR = Path(os.environ.get("CONVEYOR_BUILD_DIR", ROOT / "build"))
if IN_BUNDLE:
    CLIENT_PATHS = [ROOT / "python"]
else:
    CLIENT_PATHS = [ROOT / "client" / "python"]
for p in reversed(CLIENT_PATHS + [HERE, ROOT / "bench"]):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import conveyor  # noqa: E402
from conveyor.daemon import DaemonProcess  # noqa: E402
from gpu_helpers import as_torch, bfloat16_of, gpu_available, gpu_uuid, host_bytes  # noqa: E402,F401

sys.modules["conveyor_gpu"] = sys.modules[__name__]  # test files import the helpers by it

SKIP_REASON = "skipped: no CUDA device"
IMAGE_SIZE = 64
BATCH = 16
HOST_DTYPES = ("uint8", "float16", "float32")  # float pipelines: the default mean/std


def skip_without_gpu():
    """Module-level skip of a test file on a host without a CUDA device."""
    if not gpu_available():
        pytest.skip(SKIP_REASON, allow_module_level=True)


def conveyord_binary():
    if os.environ.get("CONVEYORD"):
        return Path(os.environ["CONVEYORD"])
    if IN_BUNDLE:
        return ROOT / "bin" / "conveyord"
    return BUILD_DIR / "server" / "conveyord"


def client_env():
    """Environment of a second client process: the same client package."""
    env = dict(os.environ)
    paths = [str(p) for p in CLIENT_PATHS] + [str(HERE)]
    if not IN_BUNDLE:
        env.setdefault("CONVEYOR_BUILD_DIR", str(BUILD_DIR))
    env["PYTHONPATH"] = os.pathsep.join(paths + ([env["PYTHONPATH"]] if env.get("PYTHONPATH")
                                                 else []))
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


@pytest.fixture(scope="session")
def dataset(tmp_path_factory):
    given = os.environ.get("CONVEYOR_GPU_DATA")
    if given:
        return Path(given)
    root = tmp_path_factory.mktemp("gpu-data") / "images"
    subprocess.run([sys.executable, str(ROOT / "bench" / "gen_imagenet_like.py"), "--out",
                    str(root), "--images", "48", "--classes", "4"], check=True,
                   stdout=subprocess.DEVNULL)
    return root


def pipeline(root, dtype="uint8", augment="eval"):
    return ("    %s_%s:\n      dataset:\n        root: \"%s\"\n      augment: %s\n      size: %d\n"
            "      layout: nchw\n      dtype: %s\n      max_batch_size: 64\n"
            "      error_policy: skip\n" % (augment, dtype, root, augment, IMAGE_SIZE, dtype))


def write_config(path, root, extra="", dtypes=HOST_DTYPES):
    """Pipelines <augment>_<dtype> (eval and train) for each of `dtypes`; `extra`: more
    top-level fields (YAML lines)."""
    text = "threads: 4\nmemory_budget: 1GiB\n%spipelines:\n" % extra
    for dtype in dtypes:
        text += pipeline(root, dtype, "eval") + pipeline(root, dtype, "train")
    Path(path).write_text(text)
    return path


def start_daemon(root, extra="", dtypes=HOST_DTYPES):
    workdir = tempfile.mkdtemp(prefix="cvg-", dir="/tmp")  # short: unix socket paths
    cfg = write_config(os.path.join(workdir, "conveyord.yaml"), root, extra, dtypes)
    d = DaemonProcess(conveyord_binary(), cfg, workdir=workdir)
    d.start(timeout=60)
    return d


@pytest.fixture(scope="module")
def daemon(dataset):
    d = start_daemon(dataset)
    yield d
    d.stop()


def host_epoch(address, name, seed=7, batch_size=BATCH):
    """[(indices, images as numpy copies)] of one epoch over the host path (shared memory,
    the daemon's CPU conversion): what every GPU path must reproduce byte for byte."""
    out = []
    with conveyor.Loader(address, name, batch_size=batch_size, seed=seed) as loader:
        with loader.epoch(0) as stream:
            for b in stream:
                out.append((b.indices.copy(), b.images.copy()))
                b.release()
    return out


def assert_same_epoch(ref, got, what):
    """got (as host_epoch returns, images possibly as device bytes on the host) is ref,
    batch by batch, byte for byte."""
    import numpy as np
    assert len(got) == len(ref), "%s: %d batches, the host path %d" % (what, len(got), len(ref))
    for n, ((ri, rimg), (gi, gimg)) in enumerate(zip(ref, got)):
        assert np.array_equal(ri, gi), "%s: batch %d has other samples" % (what, n)
        assert gimg.shape == rimg.shape, "%s: batch %d shape %s, host %s" % (
            what, n, gimg.shape, rimg.shape)
        if not np.array_equal(gimg.view(np.uint8), rimg.view(np.uint8)):
            diff = np.flatnonzero(gimg.view(np.uint8).ravel() != rimg.view(np.uint8).ravel())
            raise AssertionError("%s: batch %d differs from the host path in %d of %d bytes "
                                 "(first at byte %d)" % (what, n, diff.size, rimg.nbytes, diff[0]))
