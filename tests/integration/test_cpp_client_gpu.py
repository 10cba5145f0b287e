"""The C++ client's GPU options (client/cpp: pin_memory, the DEVICE_MEMORY
transport) through its two tools, fetch_batches (C++ API) and c_example (C
ABI), against real conveyord processes.

Runs anywhere: without a CUDA driver pin_memory fails with a clear error
naming why (the driver is loaded at run time, never linked), pin_memory on a
TCP stream and DEVICE_MEMORY without a GPU UUID are the client's
INVALID_ARGUMENT; host streams keep working on the same daemon. The test
that needs a CUDA device (pinned slots on a real GPU) says "skipped: no
CUDA device" elsewhere."""

import ctypes
import subprocess

import pytest

from conveyor_integration import BUILD_DIR, read_epoch, scaled

TOOLS = {"cpp": BUILD_DIR / "client" / "cpp" / "fetch_batches",
         "c": BUILD_DIR / "client" / "cpp" / "c_example"}


def _cuda_state():
    """"no driver", "no device" or "device": what libcuda.so.1 says here."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return "no driver"
    count = ctypes.c_int(0)
    if cuda.cuInit(0) != 0 or cuda.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value == 0:
        return "no device"
    return "device"


CUDA = _cuda_state()
needs_device = pytest.mark.skipif(CUDA != "device", reason="skipped: no CUDA device")


@pytest.fixture(autouse=True)
def _tools_built():
    missing = [str(p) for p in TOOLS.values() if not p.exists()]
    if missing:
        pytest.fail("not built: %s" % ", ".join(missing))


def run_tool(kind, address, extra=(), pipeline="train", batch_size=8, seed=0, out=None,
             timeout=60):
    cmd = [str(TOOLS[kind]), "--server", address, "--pipeline", pipeline, "--batch-size",
           str(batch_size), "--seed", str(seed)]
    cmd += list(extra)
    if out is not None:
        cmd += ["--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=scaled(timeout))
    assert proc.returncode >= 0, "%s died of signal %d:\n%s" % (kind, -proc.returncode, proc.stderr)
    return proc


def pin(kind):
    """The pin_memory flag: c_example takes 0|1, fetch_batches a bare flag."""
    return ["--pin-memory"] if kind == "cpp" else ["--pin-memory", "1"]


@pytest.mark.skipif(CUDA == "device", reason="a CUDA device is here: pin_memory works "
                    "(test_pin_memory_on_a_gpu_gives_the_same_bytes)")
@pytest.mark.parametrize("kind", ["cpp", "c"])
def test_pin_memory_without_a_driver_is_a_clear_error(daemon, kind):
    got = run_tool(kind, daemon.unix, extra=pin(kind))
    assert got.returncode == 1, got.stdout
    assert "FAILED_PRECONDITION" in got.stderr and "pin_memory" in got.stderr, got.stderr
    if CUDA == "no driver":
        assert "the CUDA driver is not available: dlopen(libcuda.so.1) failed" in got.stderr, \
            got.stderr
    # The same daemon goes on serving host streams to the same client.
    ok = run_tool(kind, daemon.unix, extra=["--batches", "2"])
    assert ok.returncode == 0, ok.stderr


@pytest.mark.parametrize("kind", ["cpp", "c"])
def test_pin_memory_needs_shared_memory(daemon, kind):
    got = run_tool(kind, daemon.tcp, extra=pin(kind))
    assert got.returncode == 1, got.stdout
    assert "INVALID_ARGUMENT" in got.stderr, got.stderr
    assert "pin_memory needs a SHARED_MEMORY stream" in got.stderr, got.stderr
    assert "DATA_SOCKET" in got.stderr, got.stderr


@pytest.mark.parametrize("kind", ["cpp", "c"])
def test_device_memory_needs_a_gpu_uuid(daemon, kind):
    got = run_tool(kind, daemon.unix, extra=["--transport", "device_memory"])
    assert got.returncode == 1, got.stdout
    assert "INVALID_ARGUMENT" in got.stderr and "needs gpu_uuid" in got.stderr, got.stderr


@needs_device
def test_pin_memory_on_a_gpu_gives_the_same_bytes(daemon, tmp_path):
    want = read_epoch(daemon.unix, batch_size=8, seed=4)
    for kind in ("cpp", "c"):
        out = tmp_path / ("%s.bin" % kind)
        got = run_tool(kind, daemon.unix, extra=pin(kind), seed=4, out=out)
        assert got.returncode == 0, got.stderr
        assert "pinned=1" in got.stdout or kind == "c"
        assert out.read_bytes() == want.images.tobytes()

