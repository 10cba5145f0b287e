"""DEVICE_MEMORY batches on the client without a GPU: the DeviceArray's
CUDA Array Interface and DLPack capsule (parsed back with ctypes), the
host-model region (the daemon's test aid: a memfd instead of a VMM handle),
and the CUDA driver binding's errors and UUID spelling (against the
toolkit's stub libcuda, which has every symbol and no driver)."""

import ctypes
import gc
import mmap
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from conveyor import _cuda_driver, _device, _device_array
from conveyor._device_array import (DEVICE_DTYPES, KDL_CPU, KDL_CUDA, DLManagedTensor,
                                    DeviceArray)
from conveyor._stubs import pb
from conveyor.errors import ConveyorError, FailedPrecondition

_GetPointer = ctypes.pythonapi["PyCapsule_GetPointer"]
_GetPointer.restype = ctypes.c_void_p
_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_SetName = ctypes.pythonapi["PyCapsule_SetName"]
_SetName.restype = ctypes.c_int
_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
_USED = b"used_dltensor"


def host_array(dtype_enum, shape, fill):
    """A DeviceArray over host memory (the host model's kind), and its backing."""
    dt = DEVICE_DTYPES[dtype_enum]
    n = int(np.prod(shape)) * dt.itemsize
    backing = np.frombuffer(bytes(fill(n)), dtype=np.uint8).copy()
    arr = DeviceArray(backing.ctypes.data, shape, dt, device_type=KDL_CPU, device_id=0,
                      owner=backing)
    return arr, backing


def test_cuda_array_interface_dict():
    arr = DeviceArray(0x7f0000001000, (4, 3, 8, 8), DEVICE_DTYPES[pb.FLOAT16],
                      device_type=KDL_CUDA, device_id=1)
    cai = arr.__cuda_array_interface__
    assert cai == {"version": 3, "shape": (4, 3, 8, 8), "typestr": "<f2",
                   "data": (0x7f0000001000, False), "strides": None, "stream": None}
    assert arr.nbytes == 4 * 3 * 8 * 8 * 2
    assert DEVICE_DTYPES[pb.UINT8].typestr == "|u1"
    assert DEVICE_DTYPES[pb.FLOAT32].typestr == "<f4"
    assert arr.__dlpack_device__() == (KDL_CUDA, 1)


def test_bfloat16_has_no_cai_but_dlpack_names_it():
    arr = DeviceArray(0x1000, (2, 2), DEVICE_DTYPES[pb.BFLOAT16], device_type=KDL_CUDA,
                      device_id=0)
    with pytest.raises(TypeError, match="bfloat16.*DLPack"):
        arr.__cuda_array_interface__
    cap = arr.__dlpack__()
    t = parse(cap).dl_tensor
    assert (t.dtype.code, t.dtype.bits, t.dtype.lanes) == (4, 16, 1)  # kDLBfloat
    del cap
    gc.collect()


def parse(capsule):
    ptr = _GetPointer(capsule, b"dltensor")
    return ctypes.cast(ptr, ctypes.POINTER(DLManagedTensor)).contents


def test_dlpack_capsule_parsed_back():
    arr = DeviceArray(0x7f0000002000, (5, 3, 4), DEVICE_DTYPES[pb.FLOAT32],
                      device_type=KDL_CUDA, device_id=3)
    before = _device_array.live_dlpack_tensors()
    cap = arr.__dlpack__(stream=7)
    m = parse(cap)
    t = m.dl_tensor
    assert t.data == 0x7f0000002000
    assert (t.device.device_type, t.device.device_id) == (KDL_CUDA, 3)
    assert t.ndim == 3
    assert [t.shape[i] for i in range(3)] == [5, 3, 4]
    assert not t.strides  # NULL: C-contiguous
    assert t.byte_offset == 0
    assert (t.dtype.code, t.dtype.bits, t.dtype.lanes) == (2, 32, 1)  # kDLFloat
    assert _device_array.live_dlpack_tensors() == before + 1
    # An unconsumed capsule deletes its tensor when it dies.
    del cap, m, t
    gc.collect()
    assert _device_array.live_dlpack_tensors() == before


def test_a_consumer_owns_the_tensor_after_renaming_the_capsule():
    arr = DeviceArray(0x1000, (2,), DEVICE_DTYPES[pb.UINT8], device_type=KDL_CUDA, device_id=0)
    before = _device_array.live_dlpack_tensors()
    cap = arr.__dlpack__()
    m = parse(cap)
    assert _SetName(cap, _USED) == 0  # what a consumer does
    del cap
    gc.collect()
    assert _device_array.live_dlpack_tensors() == before + 1, "the consumer's tensor was freed"
    m.deleter(ctypes.pointer(m))  # the consumer is done with it
    assert _device_array.live_dlpack_tensors() == before


def test_torch_and_numpy_read_a_host_model_array_without_a_copy():
    arr, backing = host_array(pb.FLOAT32, (2, 3, 4), lambda n: np.arange(n, dtype=np.uint8))
    expect = backing.view(np.float32).reshape(2, 3, 4)
    t = torch.from_dlpack(arr)
    assert t.shape == (2, 3, 4) and t.dtype == torch.float32
    assert t.data_ptr() == backing.ctypes.data  # a view, not a copy
    assert np.array_equal(t.numpy(), expect)
    a = np.from_dlpack(arr)
    assert a.__array_interface__["data"][0] == backing.ctypes.data
    assert np.array_equal(a, expect)
    for dtype_enum, torch_dtype in [(pb.UINT8, torch.uint8), (pb.FLOAT16, torch.float16),
                                    (pb.BFLOAT16, torch.bfloat16)]:
        arr, backing = host_array(dtype_enum, (3, 2), lambda n: np.arange(n, dtype=np.uint8) * 7)
        t = torch.from_dlpack(arr)
        assert t.dtype == torch_dtype and t.shape == (3, 2)
        assert t.view(torch.uint8).numpy().tobytes() == backing.tobytes()


def test_a_capsule_keeps_the_lease_alive():
    released = []

    class Lease:
        def __del__(self):
            released.append(True)

    backing = np.zeros(8, dtype=np.uint8)
    arr = DeviceArray(backing.ctypes.data, (8,), DEVICE_DTYPES[pb.UINT8], device_type=KDL_CPU,
                      device_id=0, owner=backing, lease=Lease())
    t = torch.from_dlpack(arr)
    del arr
    gc.collect()
    assert released == [], "the slot went back while a tensor viewed it"
    del t
    gc.collect()
    assert released == [True]


class Msg:
    def __init__(self, offset):
        self.images_offset = offset


def test_host_model_region_maps_the_memfd():
    fd = os.memfd_create("device-region-model")
    try:
        os.ftruncate(fd, 4096)
        with mmap.mmap(fd, 4096) as writer:
            writer[1024:1024 + 24] = bytes(range(24))
        memory = _device.HostModelMemory(fd, 4096)
    finally:
        os.close(fd)
    region = _device.DeviceRegion(memory, 4096, "GPU-00000000-0000-0000-0000-000000000001")
    del memory
    assert region.host_model
    arr = region.images(Msg(1024), region.dtype_of(pb.UINT8), (2, 12), 24)
    assert arr.__dlpack_device__() == (KDL_CPU, 0)
    assert np.from_dlpack(arr).tobytes() == bytes(range(24))
    with pytest.raises(ConveyorError, match="outside the 4096-byte device region"):
        region.images(Msg(4090), region.dtype_of(pb.UINT8), (24,), 24)
    with pytest.raises(ConveyorError, match="unknown dtype"):
        region.dtype_of(99)
    # close() with an array alive: the mapping stays until the array goes.
    region.close()
    t = torch.from_dlpack(arr)
    assert t.numpy().tobytes() == bytes(range(24))
    with pytest.raises(ConveyorError, match="closed"):
        region.images(Msg(0), region.dtype_of(pb.UINT8), (1,), 1)


def test_host_model_memory_refuses_a_short_fd():
    fd = os.memfd_create("short")
    try:
        os.ftruncate(fd, 100)
        with pytest.raises(ConveyorError, match="holds 100 bytes, the daemon announced 4096"):
            _device.HostModelMemory(fd, 4096)
    finally:
        os.close(fd)


def test_uuid_spelling_and_lookup():
    raw = bytes.fromhex("8c5b0c1e2f3a4b5c9d8e7f6a5b4c3d2e")
    assert _cuda_driver.format_uuid(raw) == "GPU-8c5b0c1e-2f3a-4b5c-9d8e-7f6a5b4c3d2e"
    assert _device.normalize_uuid("GPU-ABC") == _device.normalize_uuid("abc")

    class Driver:
        def device_count(self):
            return 2

        def uuid(self, i):
            return ["GPU-aaaa", "GPU-bbbb"][i]

    assert _device.ordinal_of_uuid(Driver(), "gpu-BBBB") == 1
    with pytest.raises(FailedPrecondition, match="sees no CUDA device GPU-cccc.*GPU-aaaa, GPU-bbbb"):
        _device.ordinal_of_uuid(Driver(), "GPU-cccc")


STUB = Path("/usr/local/cuda/lib64/stubs/libcuda.so")


def test_driver_without_a_driver_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(_cuda_driver, "LIBCUDA", "libcuda-that-is-not-there.so.1")
    with pytest.raises(FailedPrecondition, match="CUDA driver .* cannot be loaded"):
        _cuda_driver.Driver()


@pytest.mark.skipif(not STUB.exists(), reason="no CUDA toolkit stub libcuda")
def test_the_stub_driver_has_every_symbol_and_says_it_is_a_stub(monkeypatch):
    monkeypatch.setattr(_cuda_driver, "LIBCUDA", str(STUB))
    with pytest.raises(_cuda_driver.CudaError, match="cuInit failed: CUDA_ERROR_STUB_LIBRARY"):
        _cuda_driver.Driver()  # every symbol resolved: only cuInit's answer stopped it


def test_batch_copy_of_a_device_batch_says_how():
    from conveyor._batch import Batch

    arr = DeviceArray(0x1000, (1, 2), DEVICE_DTYPES[pb.UINT8], device_type=KDL_CUDA, device_id=0)
    b = Batch(None, arr, np.zeros(1, np.int64), np.zeros(1, np.int64))
    with pytest.raises(ConveyorError, match="device memory.*from_dlpack"):
        b.copy()
    assert "DeviceArray" in repr(b)


class FakeDriver(_cuda_driver.Driver):
    """The driver API as Python functions (no libcuda): records the calls,
    fills the out-parameters, and fails `fail` with CUDA_ERROR_OUT_OF_MEMORY."""

    def __init__(self, fail=None):
        self.calls = []
        self.fail = fail
        self._fn = {api: self._make(api) for api in _cuda_driver._SYMBOLS}

    def _make(self, api):
        def fn(*args):
            self.calls.append(api)
            if api == self.fail:
                return 2
            out = {"cuDevicePrimaryCtxRetain": 0xC0, "cuMemImportFromShareableHandle": 0x4A,
                   "cuMemGetAllocationGranularity": 1 << 21, "cuMemAddressReserve": 0x7000000000,
                   "cuDeviceGetCount": 1}.get(api)
            if out is not None:
                args[0]._obj.value = out
            return 0
        return fn

    def error_name(self, code):
        return "CUDA_ERROR_OUT_OF_MEMORY"


def test_vmm_mapping_maps_and_unmaps_in_order():
    d = FakeDriver()
    m = _cuda_driver.VmmMapping(d, 5, 3 << 20, 0)
    assert m.address == 0x7000000000 and m.size == 3 << 20
    setup = [c for c in d.calls if c not in ("cuDeviceGetCount", "cuDeviceGet")]
    assert setup == ["cuDevicePrimaryCtxRetain", "cuCtxPushCurrent",
                     "cuMemImportFromShareableHandle", "cuMemGetAllocationGranularity",
                     "cuMemAddressReserve", "cuMemMap", "cuMemSetAccess", "cuCtxPopCurrent"]
    d.calls.clear()
    m.close()
    m.close()  # idempotent
    assert d.calls == ["cuCtxPushCurrent", "cuMemUnmap", "cuMemAddressFree", "cuMemRelease",
                       "cuCtxPopCurrent", "cuDevicePrimaryCtxRelease"]
    assert m.closed


def test_vmm_mapping_undoes_what_it_did_when_a_step_fails():
    d = FakeDriver(fail="cuMemMap")
    with pytest.raises(_cuda_driver.CudaError, match="cuMemMap failed: CUDA_ERROR_OUT_OF_MEMORY"):
        _cuda_driver.VmmMapping(d, 5, 1 << 20, 0)
    tail = d.calls[d.calls.index("cuMemMap"):]
    assert tail == ["cuMemMap", "cuCtxPopCurrent", "cuCtxPushCurrent", "cuMemAddressFree",
                    "cuMemRelease", "cuCtxPopCurrent", "cuDevicePrimaryCtxRelease"]


def test_vmm_mapping_is_released_when_its_last_array_goes():
    d = FakeDriver()
    m = _cuda_driver.VmmMapping(d, 5, 1 << 20, 0)
    arr = DeviceArray(m.address, (16,), DEVICE_DTYPES[pb.UINT8], device_type=KDL_CUDA,
                      device_id=0, owner=m)
    cap = arr.__dlpack__()
    del m, arr
    gc.collect()
    assert "cuMemUnmap" not in d.calls, "unmapped while a capsule viewed it"
    del cap
    gc.collect()
    assert d.calls[-6:] == ["cuCtxPushCurrent", "cuMemUnmap", "cuMemAddressFree",
                            "cuMemRelease", "cuCtxPopCurrent", "cuDevicePrimaryCtxRelease"]


def _serve_fd_once(path, fd, secret, stream_id):
    """The daemon's fd hand-over, once: check id + secret, send status 0 and
    the fd (SCM_RIGHTS)."""
    import socket
    import struct
    import threading

    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(1)

    def run():
        conn, _ = srv.accept()
        with conn:
            got = b""
            while len(got) < 40:
                got += conn.recv(40 - len(got))
            ok = got == struct.pack("<Q", stream_id) + secret
            socket.send_fds(conn, [b"\x00" if ok else b"\x01"], [fd] if ok else [])
        srv.close()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_device_memory_stream_opened_under_the_host_model(tmp_path):
    """StreamOpened.device_memory with host_model: the fd comes over the
    hand-over socket, is mapped, and batches become DeviceArrays leasing
    their slot (Stream._wrap_fields)."""
    import queue

    from conveyor._lease import LeaseBook
    from conveyor._security import Security
    from conveyor._stream import Stream
    from conveyor._transport import open_transport

    region_bytes, slot_bytes = 2 * 4096, 4096
    fd = os.memfd_create("host-model-ring")
    os.ftruncate(fd, region_bytes)
    with mmap.mmap(fd, region_bytes) as w:
        w[slot_bytes:slot_bytes + 12] = np.arange(6, dtype=np.float16).tobytes()
    secret = bytes(range(32))
    sock = str(tmp_path / "fd.sock")
    server = _serve_fd_once(sock, fd, secret, 7)
    opened = pb.StreamOpened(stream_id=7, transport=pb.DEVICE_MEMORY)
    opened.device_memory.CopyFrom(pb.DeviceMemoryOpened(
        secret=secret, fd_socket=sock, gpu_uuid="GPU-00000000-0000-0000-0000-0000000000aa",
        region_bytes=region_bytes, slot_bytes=slot_bytes, num_slots=2, host_model=True))
    transport = open_transport(opened, data_host=None, security=Security(), timeout=5)
    server.join(5)
    os.close(fd)
    assert transport.name == "device_memory" and transport.host_model

    stream = Stream.__new__(Stream)  # only what _wrap_fields reads
    requests = queue.SimpleQueue()
    stream._transport = transport
    stream.lifetime = "safe"
    stream._book = LeaseBook(requests, lambda slot, seq: ("release", slot, seq))
    m = pb.Batch(sequence=3, slot=1, dtype=pb.FLOAT16, shape=[2, 3], images_offset=slot_bytes,
                 images_bytes=12, labels=[1, 2], sample_indices=[5, 6])
    batch = stream._wrap(m)
    arr = batch.images
    assert isinstance(arr, DeviceArray)
    assert arr.__cuda_array_interface__["typestr"] == "<f2"
    t = torch.from_dlpack(arr)
    assert t.tolist() == [[0, 1, 2], [3, 4, 5]]
    assert batch._returns == "lease" and stream._book.leased == {1}
    batch._images = None  # what release does
    del arr, batch
    gc.collect()
    assert stream._book.leased == {1}, "released while a tensor viewed the slot"
    del t
    gc.collect()
    assert requests.get_nowait() == ("release", 1, 3)
    bad = pb.Batch(sequence=4, slot=0, dtype=pb.FLOAT16, shape=[2, 3], images_offset=0,
                   images_bytes=11)
    with pytest.raises(ConveyorError, match="images_bytes 11 does not match"):
        stream._wrap(bad)
    transport.close()


def test_torch_adapter_reads_device_arrays_through_dlpack():
    from conveyor._batch import Batch
    from conveyor.torch import batch_tensors

    arr, backing = host_array(pb.UINT8, (2, 4), lambda n: np.arange(n, dtype=np.uint8))
    b = Batch(None, arr, np.array([4, 5], np.int64), np.array([0, 1], np.int64))
    images, labels, indices = batch_tensors(b, yield_indices=True)
    assert images.data_ptr() == backing.ctypes.data
    assert images.tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert labels.tolist() == [4, 5] and indices.tolist() == [0, 1]


def test_jax_adapter_reads_device_batches_through_dlpack():
    """conveyor.jax's device path with a stand-in jax module (the decision
    to copy, and what is handed to jax.dlpack)."""
    import types

    from conveyor import jax as cjax
    from conveyor._batch import Batch
    from conveyor._device_feed import DeviceBatch

    log = []
    fake = types.SimpleNamespace(
        dlpack=types.SimpleNamespace(from_dlpack=lambda x: log.append(("dlpack", x)) or ("arr", x)),
        numpy=types.SimpleNamespace(array=lambda a, copy: log.append(("copy", copy)) or ("copied", a)),
        dtypes=types.SimpleNamespace(canonicalize_dtype=lambda dt: np.dtype(np.int32)),
        device_put=lambda a: a)
    arr, _ = host_array(pb.UINT8, (1, 4), lambda n: np.arange(n, dtype=np.uint8))
    leased = Batch(None, arr, np.array([3], np.int64), np.array([0], np.int64))
    leased._returns = "lease"
    images, labels = cjax._device_to_jax(fake, leased, arr, "auto", None)
    assert images == ("arr", arr) and log == [("dlpack", arr)]
    assert labels.dtype == np.int32 and labels.tolist() == [3]
    log.clear()
    fast = Batch(None, arr, np.array([3], np.int64), np.array([0], np.int64))  # "now": not leased
    images, _ = cjax._device_to_jax(fake, fast, arr, "auto", None)
    assert images[0] == "copied" and log == [("dlpack", arr), ("copy", True)]
    log.clear()
    owned = DeviceBatch(fast, "tensor")
    images, _ = cjax._device_to_jax(fake, owned, "tensor", "auto", None)
    assert images == ("arr", "tensor") and log == [("dlpack", "tensor")]
