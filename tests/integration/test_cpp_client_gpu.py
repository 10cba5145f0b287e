"""The C++ client's GPU options (client/cpp: pin_memory, the DEVICE_MEMORY
transport) through its two tools, fetch_batches (C++ API) and c_example (C
ABI), against real conveyord processes.

Runs anywhere: without a CUDA driver pin_memory fails with a clear error
naming why (the driver is loaded at run time, never linked), pin_memory on a
TCP stream and DEVICE_MEMORY without a GPU UUID are the client's
INVALID_ARGUMENT, and a DEVICE_MEMORY stream on a daemon without a GPU
returns the daemon's FAILED_PRECONDITION; host streams keep working on the
same daemon. Against the daemon's host model of the device API
(--device-api host-model, a test aid: the ring is a memfd) the tools'
device batches equal their shared-memory batches of the same seed byte for
byte, float32 included, and a client killed with SIGKILL mid-stream frees
its stream. The tests that need a CUDA device (pinned slots and the device
transport on a real GPU) say "skipped: no CUDA device" elsewhere."""

import ctypes
import os
import signal
import subprocess
import threading

import numpy as np
import pytest

import conveyor
from conveyor_integration import (BUILD_DIR, daemon_config, pipeline_entry, read_epoch, scaled,
                                  wait_until)

TOOLS = {"cpp": BUILD_DIR / "client" / "cpp" / "fetch_batches",
         "c": BUILD_DIR / "client" / "cpp" / "c_example"}
UUID = "GPU-8c5b0c1e-6f1d-4a2b-9c3d-0123456789ab"


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


# --- DEVICE_MEMORY against the daemon ------------------------------------------
HOST_MODEL = ["--device-api", "host-model", "--host-model-gpus", UUID + ":1GiB"]
DEVICE = ["--transport", "device_memory", "--gpu-uuid"]


def _config(root):
    return daemon_config(root, pipelines={
        "f32": pipeline_entry(root, augment="eval", dtype="float32", resize_size=73),
        "u8": pipeline_entry(root, augment="eval", resize_size=73),
    })


def _batches(stdout):
    """The "batch" lines of a tool: a list of dicts of their fields."""
    return [dict(w.split("=", 1) for w in line.split()[1:] if "=" in w)
            for line in stdout.splitlines() if line.startswith("batch ")]


def _opened_transport(stdout):
    line = next(ln for ln in stdout.splitlines() if ln.startswith("opened "))
    return dict(w.split("=", 1) for w in line.split()[1:])["transport"]


@pytest.mark.parametrize("kind", ["cpp", "c"])
def test_device_memory_without_a_gpu_is_the_daemons_failed_precondition(daemon_factory, dataset,
                                                                         kind):
    root, _ = dataset
    d = daemon_factory(_config(root), name="nogpu")
    got = run_tool(kind, d.unix, pipeline="f32", extra=DEVICE + [UUID])
    assert got.returncode == 1, got.stdout
    assert "FAILED_PRECONDITION" in got.stderr, got.stderr
    # The daemon's message, naming the transport and the GPU, comes through.
    assert "DEVICE_MEMORY" in got.stderr and UUID in got.stderr, got.stderr
    assert _batches(got.stdout) == []
    print(got.stderr.strip())
    # Host streams on the same daemon keep working.
    ok = run_tool(kind, d.unix, pipeline="f32", extra=["--batches", "2"])
    assert ok.returncode == 0, ok.stderr
    assert len(_batches(ok.stdout)) == 2
    assert wait_until(d.idle, 10), conveyor.stats(d.unix)


@pytest.mark.parametrize("kind", ["cpp", "c"])
@pytest.mark.parametrize("pipeline", ["f32", "u8"])
def test_host_model_device_batches_equal_the_host_paths(daemon_factory, dataset, tmp_path, kind,
                                                        pipeline):
    root, samples = dataset
    d = daemon_factory(_config(root), name="hostmodel", extra_args=HOST_MODEL)
    dev = run_tool(kind, d.unix, pipeline=pipeline, seed=3, extra=DEVICE + [UUID.lower()],
                   out=tmp_path / "dev.bin")
    host = run_tool(kind, d.unix, pipeline=pipeline, seed=3,
                    extra=["--transport", "shared_memory"], out=tmp_path / "host.bin")
    assert dev.returncode == 0, dev.stderr
    assert host.returncode == 0, host.stderr
    assert _opened_transport(dev.stdout) == "device_memory"
    dev_batches, host_batches = _batches(dev.stdout), _batches(host.stdout)
    assert len(dev_batches) == len(host_batches) == len(samples) // 8
    for b, hb in zip(dev_batches, host_batches):
        assert b["device"] == "1" and hb["device"] == "0"
        for field in ("seq", "n", "dtype", "bytes", "labels", "indices"):
            assert b[field] == hb[field], (field, b, hb)
    got, want = (tmp_path / "dev.bin").read_bytes(), (tmp_path / "host.bin").read_bytes()
    assert len(got) > 0 and got == want
    if pipeline == "f32":
        x = np.frombuffer(got, np.float32)
        assert np.isfinite(x).all() and x.min() < 0 < x.max()  # normalised
    assert wait_until(d.idle, 10), conveyor.stats(d.unix)


def test_killed_device_client_frees_its_stream(daemon_factory, dataset):
    root, _ = dataset
    d = daemon_factory(_config(root), name="devkill", extra_args=HOST_MODEL)
    cmd = [str(TOOLS["cpp"]), "--server", d.unix, "--pipeline", "f32", "--batch-size", "8",
           "--credits", "2", "--epochs", "0", "--hold", "1", "--pause-after", "2"] + DEVICE + [UUID]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        watchdog = threading.Timer(scaled(30), proc.kill)
        watchdog.start()
        try:
            line = next((ln for ln in proc.stdout if ln.startswith("paused")), None)
        finally:
            watchdog.cancel()
        assert line is not None, proc.stderr.read()
        st = conveyor.stats(d.unix)
        assert st.streams_open == 1 and st.slot_bytes_in_use > 0, st
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=scaled(10))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert wait_until(d.idle, 20), conveyor.stats(d.unix)
    assert wait_until(lambda: d.memfd_mappings() == [], 10), d.memfd_mappings()
    # The GPU serves the next stream.
    again = run_tool("cpp", d.unix, pipeline="f32", extra=DEVICE + [UUID, "--batches", "1"])
    assert again.returncode == 0, again.stderr


# --- on a GPU (skipped: no CUDA device) ------------------------------------------
def _device0_uuid():
    cuda = ctypes.CDLL("libcuda.so.1")
    assert cuda.cuInit(0) == 0
    dev = ctypes.c_int(0)
    assert cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
    raw = (ctypes.c_ubyte * 16)()
    assert cuda.cuDeviceGetUuid_v2(raw, dev) == 0
    h = bytes(raw).hex()
    return "GPU-%s-%s-%s-%s-%s" % (h[:8], h[8:12], h[12:16], h[16:20], h[20:])


@needs_device
@pytest.mark.parametrize("kind", ["cpp", "c"])
def test_device_memory_on_a_gpu_equals_the_host_path(daemon_factory, dataset, tmp_path, kind):
    root, samples = dataset
    d = daemon_factory(_config(root), name="gpu")
    uuid = _device0_uuid()
    dev = run_tool(kind, d.unix, pipeline="f32", seed=3, extra=DEVICE + [uuid],
                   out=tmp_path / "dev.bin")
    host = run_tool(kind, d.unix, pipeline="f32", seed=3, extra=["--transport", "shared_memory"],
                    out=tmp_path / "host.bin")
    assert dev.returncode == 0, dev.stderr
    assert host.returncode == 0, host.stderr
    assert all(b["device"] == "1" for b in _batches(dev.stdout))
    assert len(_batches(dev.stdout)) == len(samples) // 8
    assert (tmp_path / "dev.bin").read_bytes() == (tmp_path / "host.bin").read_bytes()
    assert wait_until(d.idle, 10), conveyor.stats(d.unix)


@pytest.mark.parametrize("kind", ["cpp", "c"])
def test_pin_memory_with_another_transport_is_refused_before_opening(daemon, kind):
    got = run_tool(kind, daemon.unix, extra=pin(kind) + DEVICE + [UUID])
    assert got.returncode == 1, got.stdout
    assert "INVALID_ARGUMENT" in got.stderr, got.stderr
    # The client's own check (the factory's would say "the daemon chose").
    assert "pin_memory needs a SHARED_MEMORY stream, not DEVICE_MEMORY" in got.stderr, got.stderr
