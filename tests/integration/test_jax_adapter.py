"""conveyor.jax with the real JAX (PyPI, scripts/venvs/jax.txt) against a
real daemon: batches equal the plain Loader's byte for byte on every
transport, DLPack hands the slot over without a copy when asked (buffer
pointers), the default copies while the slot would be reused behind the
array, sharding over 4 CPU devices puts each slice on its device,
conveyor.jax.loader maps JAX's processes to ranks, and the JAX training
example trains. The JAX code runs in the virtual environment's
interpreter (frameworks/jax_checks.py); the daemon and the reference
batches in this process.

Release stage only: it tests the adapter, not the daemon.
"""

import importlib.util
import json
import re
import subprocess
import sys
import types
import warnings

import numpy as np
import pytest

import conveyor
import conveyor_integration as ci

CHECKS = ci.SOURCE_DIR / "tests" / "integration" / "frameworks" / "jax_checks.py"
EXAMPLE = ci.CLIENT_DIR / "examples" / "train_jax.py"


@pytest.fixture(scope="module")
def jax_python():
    return ci.venv_python("jax")


def run_checks(python, check, server, out, *args, devices=None, extra_env=None):
    env = ci.client_env()
    env.update(extra_env or {})
    env.pop("XLA_FLAGS", None)
    env["JAX_PLATFORMS"] = "cpu"
    if devices:
        env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=%d" % devices
    r = subprocess.run([python, str(CHECKS), check, "--server", server, "--out", str(out)]
                       + list(args), capture_output=True, text=True, env=env,
                       timeout=ci.scaled(300))
    assert r.returncode == 0, "jax_checks %s failed (%d):\n%s\n%s" % (
        check, r.returncode, r.stdout[-3000:], r.stderr[-6000:])
    return json.loads((out / "result.json").read_text())


def saved(out):
    with np.load(out / "epoch.npz") as z:
        return z["images"], z["labels"]


@pytest.mark.parametrize("transport", ["shared_memory", "data_socket", "inline"])
def test_iterate_equals_plain_loader(jax_python, daemon, tmp_path, transport):
    address = daemon.unix if transport == "shared_memory" else daemon.tcp
    result = run_checks(jax_python, "epoch", address, tmp_path, "--transport", transport)
    want = ci.read_epoch(address, transport=transport)
    assert want.transport == transport
    images, labels = saved(tmp_path)
    assert result["batches"] == want.batches_per_epoch == 6
    assert result["images_dtype"] == "uint8"
    assert result["labels_dtype"] == "int32"  # JAX's default integer (no x64)
    assert images.dtype == want.images.dtype and images.shape == want.images.shape
    assert images.tobytes() == want.images.tobytes()
    np.testing.assert_array_equal(labels, want.labels)


def test_dlpack_is_zero_copy_and_default_copies_reused_slots(jax_python, daemon, tmp_path):
    result = run_checks(jax_python, "pointers", daemon.unix, tmp_path)
    assert len(result["false"]) == 6
    # copy=False: JAX's buffer is the daemon's slot (DLPack, no copy).
    assert all(result["false"]), result
    # copy=True: never the slot.
    assert not any(result["true"]), result
    # copy="auto": the slot only when the loader keeps it leased while views live.
    assert result["auto"] == result["lease"], result


def test_shard_over_four_cpu_devices(jax_python, daemon, tmp_path):
    result = run_checks(jax_python, "shard", daemon.unix, tmp_path, devices=4)
    assert result["devices"] == 4
    assert result["shards_checked"] == 6 * 2 * 4  # batches x (images, labels) x devices
    assert result["uneven_error"] and "does not split evenly" in result["uneven_error"], result
    want = ci.read_epoch(daemon.unix)
    images, labels = saved(tmp_path)
    assert images.tobytes() == want.images.tobytes()
    np.testing.assert_array_equal(labels, want.labels)


def test_training_example_runs(jax_python, daemon):
    r = subprocess.run([jax_python, str(EXAMPLE), "--server", daemon.unix, "--pipeline", "train",
                        "--batch-size", "8", "--steps", "8"], capture_output=True, text=True,
                       env=dict(ci.client_env(), JAX_PLATFORMS="cpu"), timeout=ci.scaled(300))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-6000:]
    steps = [line for line in r.stdout.splitlines() if line.startswith("step ")]
    assert len(steps) == 8, r.stdout
    assert "data wait" in steps[0] and "compute" in steps[0], steps[0]
    assert "mean data wait" in r.stdout, r.stdout


def test_without_jax_names_the_package():
    """Debian's interpreter has no JAX: the module imports, its first use
    says what to install."""
    if importlib.util.find_spec("jax") is not None:
        pytest.skip("%s has JAX installed" % sys.executable)
    code = ("import conveyor.jax as cj\n"
            "try:\n    cj.batch_sharding()\nexcept ImportError as e:\n    print(e)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=ci.client_env(), timeout=ci.scaled(60))
    assert r.returncode == 0, r.stderr
    assert "pip install 'jax[cpu]'" in r.stdout, r.stdout


def test_readme_snippet_runs(jax_python, daemon):
    """The quick start of client/python/README.md, as written."""
    text = (ci.CLIENT_DIR / "README.md").read_text()
    blocks = [b for b in re.findall(r"```python\n(.*?)```", text, re.S)
              if "# conveyor.jax quick start" in b]
    assert len(blocks) == 1, "README.md has %d jax quick starts" % len(blocks)
    env = ci.client_env()
    env["CONVEYOR_SERVER"] = daemon.unix
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
    env["JAX_PLATFORMS"] = "cpu"
    r = subprocess.run([jax_python, "-c", blocks[0]], capture_output=True, text=True, env=env,
                       timeout=ci.scaled(300))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-6000:]


def test_copy_rule_helpers():
    """The shared copy rule of the adapters (conveyor._framework), in this
    interpreter: what counts as memory nothing reuses, aligned copies, and
    a clear error for a bad `copy` argument."""
    from conveyor import _framework as fw

    inline = np.frombuffer(bytes(range(48)), np.uint8).reshape(4, 12)  # like inline batches
    assert fw.owns_memory(inline)
    slot_buffer = np.zeros(4096, np.uint8)  # like a data socket's reused per-slot buffer
    assert not fw.owns_memory(slot_buffer[:48].reshape(4, 12))
    assert not fw.owns_memory(slot_buffer)
    with pytest.raises(ValueError, match="copy must be 'auto', True or False, got 'yes'"):
        fw.check_copy("yes")
    assert [fw.check_copy(c) for c in ("auto", True, False)] == ["auto", True, False]
    raw = np.arange(3 * 5 * 7 + 64, dtype=np.float32)
    for start in range(8):  # whatever the source's alignment
        src = raw[start:start + 105].reshape(3, 5, 7)
        out = fw.aligned_copy(src)
        assert fw.is_aligned(out) and out.ctypes.data % 64 == 0
        assert out.dtype == src.dtype and out.shape == src.shape and out.flags.c_contiguous
        np.testing.assert_array_equal(out, src)


def test_loader_of_a_single_jax_process_keeps_the_loader_defaults(jax_python, daemon, tmp_path):
    """The real JAX, one process (process_count() 1): conveyor.jax.loader
    leaves rank / world size to $RANK / $WORLD_SIZE (here rank 1 of 2) and
    reads that rank's shard; arguments given win."""
    r = run_checks(jax_python, "ranks", daemon.unix, tmp_path,
                   extra_env={"RANK": "1", "WORLD_SIZE": "2"})
    assert r["process"] == [0, 1] and r["process_rank"] is None, r
    assert r["rank"] == [1, 2] and r["given"] == [0, 3], r
    want = ci.read_epoch(daemon.unix, rank=1, world_size=2)
    assert r["indices"] == want.indices.tolist()


class _FakeJax(types.ModuleType):
    """What conveyor.jax reads of a multi-process JAX job."""

    def __init__(self, index, count):
        super().__init__("jax")
        self.process_index = lambda: index
        self.process_count = lambda: count


def test_loader_maps_jax_processes_to_rank_and_world_size(monkeypatch):
    """The mapping of conveyor.jax.loader, JAX monkeypatched (no daemon is
    contacted: a Loader connects on first use): in a job of 4 processes,
    process 3 is rank 3 of 4 whatever $RANK / $WORLD_SIZE say; arguments
    given win; a single process keeps Loader's defaults; a Loader of world
    size 1 iterated in a job of several processes is warned about."""
    import conveyor.jax as cjax

    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setitem(sys.modules, "jax", _FakeJax(3, 4))
    address = "unix:///nonexistent/conveyor.sock"
    assert cjax.process_rank() == (3, 4)
    ld = cjax.loader(address, pipeline="train", batch_size=8)
    assert (ld.rank, ld.world_size, ld.pipeline, ld.batch_size) == (3, 4, "train", 8)
    given = cjax.loader(address, pipeline="train", batch_size=8, rank=0)
    assert (given.rank, given.world_size) == (0, 4)
    given = cjax.loader(address, pipeline="train", batch_size=8, rank=1, world_size=8)
    assert (given.rank, given.world_size) == (1, 8)
    alone = conveyor.Loader(address, pipeline="train", batch_size=8, rank=0, world_size=1)
    with pytest.warns(RuntimeWarning, match="world_size=1 in a JAX job of 4 processes"):
        cjax.iterate(alone)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cjax.iterate(ld)  # sharded: no warning

    monkeypatch.setitem(sys.modules, "jax", _FakeJax(0, 1))
    assert cjax.process_rank() is None
    ld = cjax.loader(address, pipeline="train", batch_size=8)
    assert (ld.rank, ld.world_size) == (1, 2)  # $RANK / $WORLD_SIZE, as conveyor.Loader
    monkeypatch.delenv("RANK")
    monkeypatch.delenv("WORLD_SIZE")
    ld = cjax.loader(address, pipeline="train", batch_size=8)
    assert (ld.rank, ld.world_size) == (0, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cjax.iterate(alone)  # one process: nothing to warn about
