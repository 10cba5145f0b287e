"""The Python client's CUDA calls on a real GPU (skipped without one): the
cudaHostRegister registrar, the copier's stream/event copies, DeviceArray
read by torch (CUDA Array Interface and DLPack) and CuPy, and the VMM import
of a POSIX-fd allocation (made here with cuMemCreate, as the daemon makes
its ring) through conveyor/_cuda_driver.py.
"""

import ctypes
import mmap
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="skipped: no CUDA device (PyTorch missing)")
if not torch.cuda.is_available():
    pytest.skip("skipped: no CUDA device", allow_module_level=True)

from conveyor import _cuda_copy, _cuda_driver, _pinning  # noqa: E402
from conveyor._device_array import DEVICE_DTYPES, KDL_CUDA, DeviceArray  # noqa: E402
from conveyor._shm import SharedRegion  # noqa: E402
from conveyor._stubs import pb  # noqa: E402


def memfd_region(size, fill):
    fd = os.memfd_create("pinned-test")
    try:
        os.ftruncate(fd, size)
        with mmap.mmap(fd, size) as w:
            w[:] = fill
        return SharedRegion(fd, size)
    finally:
        os.close(fd)


def test_registrar_pins_the_region_and_copies_are_asynchronous():
    size = 1 << 20
    data = bytes(np.arange(size, dtype=np.uint8))
    region = memfd_region(size, data)
    region.pin(_pinning.make_registrar())
    view = region.view(0, size, np.uint8, (size,))
    src = torch.from_numpy(view)
    assert src.is_pinned(), "cudaHostRegister did not page-lock the mapping"
    dst = src.cuda(non_blocking=True)
    torch.cuda.synchronize()
    assert bytes(dst.cpu().numpy()) == data
    del src, view
    region.close()
    assert not region.pinned


def test_copier_copies_on_its_own_stream_and_hands_over():
    size = 4 << 20
    region = memfd_region(size, bytes([7]) * size)
    region.pin(_pinning.make_registrar())
    copier = _cuda_copy.make_copier("cuda:0")
    copy = copier.start(region.view(0, size, np.uint8, (size,)))
    copy.wait()
    assert copy.done()
    t = copy.hand_over()
    assert t.device.type == "cuda" and int(t.sum().item()) == 7 * size
    region.close()


def test_device_array_is_read_by_torch_without_a_copy():
    src = torch.arange(24, dtype=torch.float16, device="cuda").reshape(2, 3, 4)
    arr = DeviceArray(src.data_ptr(), (2, 3, 4), DEVICE_DTYPES[pb.FLOAT16], device_type=KDL_CUDA,
                      device_id=src.device.index or 0, owner=src)
    a = torch.as_tensor(arr, device="cuda")
    b = torch.from_dlpack(arr)
    assert a.data_ptr() == b.data_ptr() == src.data_ptr()
    assert torch.equal(a, src) and torch.equal(b, src)
    bf = torch.ones(5, dtype=torch.bfloat16, device="cuda")
    arr = DeviceArray(bf.data_ptr(), (5,), DEVICE_DTYPES[pb.BFLOAT16], device_type=KDL_CUDA,
                      device_id=bf.device.index or 0, owner=bf)
    assert torch.equal(torch.from_dlpack(arr), bf)


def test_device_array_is_read_by_cupy():
    cupy = pytest.importorskip("cupy")
    src = torch.arange(10, dtype=torch.float32, device="cuda")
    arr = DeviceArray(src.data_ptr(), (10,), DEVICE_DTYPES[pb.FLOAT32], device_type=KDL_CUDA,
                      device_id=src.device.index or 0, owner=src)
    c = cupy.asarray(arr)
    assert c.data.ptr == src.data_ptr()
    assert cupy.asnumpy(c).tolist() == list(range(10))


def test_driver_uuid_matches_torch():
    driver = _cuda_driver.Driver()
    uuid = driver.uuid(0)
    assert uuid.startswith("GPU-") and len(uuid) == 40
    props = torch.cuda.get_device_properties(0)
    if hasattr(props, "uuid"):
        assert uuid == "GPU-" + str(props.uuid)


def test_vmm_import_of_a_posix_fd_allocation():
    driver = _cuda_driver.Driver()
    torch.cuda.init()
    lib = driver._lib
    dev = driver.device(0)
    prop = _cuda_driver._AllocationProp()
    prop.type = _cuda_driver.CU_MEM_ALLOCATION_TYPE_PINNED
    prop.requestedHandleTypes = _cuda_driver.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
    prop.location = _cuda_driver._Location(_cuda_driver.CU_MEM_LOCATION_TYPE_DEVICE, dev)
    gran = ctypes.c_size_t()
    driver.check(lib.cuMemGetAllocationGranularity(ctypes.byref(gran), ctypes.byref(prop), 0),
                 "granularity")
    size = gran.value * 2
    handle = ctypes.c_ulonglong()
    driver.check(lib.cuMemCreate(ctypes.byref(handle), ctypes.c_size_t(size), ctypes.byref(prop),
                                 ctypes.c_ulonglong(0)), "cuMemCreate")
    fd = ctypes.c_int(-1)
    driver.check(lib.cuMemExportToShareableHandle(ctypes.byref(fd), handle,
                                                  _cuda_driver.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                                  ctypes.c_ulonglong(0)), "export")
    try:
        mapping = _cuda_driver.VmmMapping(driver, fd.value, size, 0)
    finally:
        os.close(fd.value)
    arr = DeviceArray(mapping.address, (size,), DEVICE_DTYPES[pb.UINT8], device_type=KDL_CUDA,
                      device_id=0, owner=mapping)
    t = torch.from_dlpack(arr)
    t.fill_(3)
    torch.cuda.synchronize()
    assert int(t.sum().item()) == 3 * size
    del t, arr
    mapping.close()
    assert mapping.closed
    driver.check(lib.cuMemRelease(handle), "cuMemRelease")
