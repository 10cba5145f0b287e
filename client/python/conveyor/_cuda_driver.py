"""The CUDA driver API through ctypes (libcuda.so.1): what the DEVICE_MEMORY
transport needs and PyTorch does not offer - the UUID of a device, and the
import of the daemon's CUDA virtual-memory region from its POSIX fd.

  Driver()                   loads libcuda (LIBCUDA, a module attribute) and
                             calls cuInit; FailedPrecondition naming the
                             reason when there is no driver or device
  Driver.uuid(ordinal)       "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
  VmmMapping(driver, fd, size, ordinal)
                             cuMemImportFromShareableHandle (POSIX fd),
                             cuMemAddressReserve, cuMemMap, cuMemSetAccess
                             (read-write on `ordinal`) in the device's
                             primary context (the one PyTorch and CuPy use);
                             .address is the device pointer of byte 0.
                             close() (or its finalizer, when the last
                             reference goes) unmaps, frees the address
                             range, releases the handle and the context.

Every failing call raises CudaError(what, code) with the driver's name of
the code. Thread-safety: a Driver may be used from any thread (the driver
is thread-safe); a VmmMapping is closed once (a lock guards it).
"""

from __future__ import annotations

import ctypes
import threading
import weakref
from typing import Any, Callable, List

from .errors import FailedPrecondition

LIBCUDA = "libcuda.so.1"

CUDA_SUCCESS = 0
CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 1
CU_MEM_ALLOCATION_TYPE_PINNED = 1
CU_MEM_LOCATION_TYPE_DEVICE = 1
CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3
CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0


# Names of the codes a host without a usable GPU gives, for when the driver
# cannot name them itself (the toolkit's stub library names nothing).
_KNOWN_ERRORS = {1: "CUDA_ERROR_INVALID_VALUE", 3: "CUDA_ERROR_NOT_INITIALIZED",
                 34: "CUDA_ERROR_STUB_LIBRARY (the toolkit's stub libcuda, not a driver)",
                 35: "CUDA_ERROR_INSUFFICIENT_DRIVER", 100: "CUDA_ERROR_NO_DEVICE",
                 101: "CUDA_ERROR_INVALID_DEVICE", 801: "CUDA_ERROR_NOT_SUPPORTED"}


class CudaError(FailedPrecondition):
    """A CUDA driver call failed: `what` it was, `cuda_code` the CUresult."""

    def __init__(self, what: str, code: int, name: str) -> None:
        super().__init__("CUDA driver: %s failed: %s (%d)" % (what, name, code))
        self.cuda_code = code


class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class _AllocationProp(ctypes.Structure):  # CUmemAllocationProp
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int),
                ("location", _Location), ("win32HandleMetaData", ctypes.c_void_p),
                ("allocFlags", _AllocFlags)]


class _AccessDesc(ctypes.Structure):  # CUmemAccessDesc
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


# The entry points used, under their ABI names (cuda.h maps the API names
# to the _v2 symbols).
_SYMBOLS = {
    "cuInit": "cuInit", "cuDeviceGetCount": "cuDeviceGetCount", "cuDeviceGet": "cuDeviceGet",
    "cuDeviceGetUuid": "cuDeviceGetUuid_v2", "cuGetErrorName": "cuGetErrorName",
    "cuDevicePrimaryCtxRetain": "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease": "cuDevicePrimaryCtxRelease_v2",
    "cuCtxPushCurrent": "cuCtxPushCurrent_v2", "cuCtxPopCurrent": "cuCtxPopCurrent_v2",
    "cuMemImportFromShareableHandle": "cuMemImportFromShareableHandle",
    "cuMemGetAllocationGranularity": "cuMemGetAllocationGranularity",
    "cuMemAddressReserve": "cuMemAddressReserve", "cuMemAddressFree": "cuMemAddressFree",
    "cuMemMap": "cuMemMap", "cuMemUnmap": "cuMemUnmap", "cuMemSetAccess": "cuMemSetAccess",
    "cuMemRelease": "cuMemRelease",
}


def format_uuid(raw: bytes) -> str:
    """nvidia-smi's spelling of a 16-byte CUuuid: GPU-8-4-4-4-12 hex digits."""
    if len(raw) != 16:
        raise ValueError("a GPU UUID has 16 bytes, got %d" % len(raw))
    h = raw.hex()
    return "GPU-%s-%s-%s-%s-%s" % (h[0:8], h[8:12], h[12:16], h[16:20], h[20:32])


class Driver:
    """libcuda, initialized."""

    def __init__(self, library: str = "") -> None:
        name = library or LIBCUDA
        try:
            self._lib = ctypes.CDLL(name)
        except OSError as e:
            raise FailedPrecondition("the CUDA driver (%s) cannot be loaded: %s (no NVIDIA "
                                     "driver on this host, or not visible in this container)"
                                     % (name, e)) from None
        self._fn = {}
        for api, symbol in _SYMBOLS.items():
            try:
                f = getattr(self._lib, symbol)
            except AttributeError:
                raise FailedPrecondition("the CUDA driver %s lacks %s: too old for the "
                                         "DEVICE_MEMORY transport" % (name, symbol)) from None
            f.restype = ctypes.c_int
            self._fn[api] = f
        self.check(self._fn["cuInit"](0), "cuInit")

    def error_name(self, code: int) -> str:
        name = ctypes.c_char_p()
        if self._fn["cuGetErrorName"](code, ctypes.byref(name)) != CUDA_SUCCESS or not name.value:
            return _KNOWN_ERRORS.get(code, "CUresult")
        return name.value.decode("ascii", "replace")

    def check(self, code: int, what: str) -> None:
        if code != CUDA_SUCCESS:
            raise CudaError(what, code, self.error_name(code))

    def call(self, api: str, *args: Any) -> None:
        self.check(self._fn[api](*args), api)

    def device_count(self) -> int:
        n = ctypes.c_int()
        self.call("cuDeviceGetCount", ctypes.byref(n))
        return n.value

    def device(self, ordinal: int) -> int:
        count = self.device_count()
        if not 0 <= ordinal < count:
            raise FailedPrecondition("CUDA device %d does not exist: this process sees %d "
                                     "(CUDA_VISIBLE_DEVICES)" % (ordinal, count))
        dev = ctypes.c_int()
        self.call("cuDeviceGet", ctypes.byref(dev), ordinal)
        return dev.value

    def uuid(self, ordinal: int) -> str:
        raw = (ctypes.c_ubyte * 16)()
        self.call("cuDeviceGetUuid", raw, self.device(ordinal))
        return format_uuid(bytes(raw))


def _undo(lib: Any, ctx: Any, steps: List[Callable[[], int]],
          last: List[Callable[[], int]]) -> None:
    """Undoes `steps` in reverse inside context `ctx` (when one was
    retained), then `last` (the context's release). Every step runs even if
    one fails: there is no one to report to at close or collection."""
    pushed = False
    if ctx.value:
        try:
            pushed = lib["cuCtxPushCurrent"](ctx) == CUDA_SUCCESS
        except Exception:
            pass
    for step in reversed(steps):
        try:
            step()
        except Exception:
            pass
    steps.clear()
    if pushed:
        try:
            lib["cuCtxPopCurrent"](ctypes.byref(ctypes.c_void_p()))
        except Exception:
            pass
    for step in last:
        try:
            step()
        except Exception:
            pass
    last.clear()


class VmmMapping:
    """The daemon's device region, imported from its fd and mapped
    read-write on device `ordinal`."""

    def __init__(self, driver: Driver, fd: int, size: int, ordinal: int) -> None:
        self.ordinal = ordinal
        self._lock = threading.Lock()
        lib = driver._fn
        dev = driver.device(ordinal)
        steps: List[Callable[[], int]] = []  # what close() undoes, in the context
        last: List[Callable[[], int]] = []   # then the context's release
        ctx = ctypes.c_void_p()
        # Owned by the finalizer from here on: it undoes whatever was done,
        # also when a step below raises.
        self._finalizer = weakref.finalize(self, _undo, lib, ctx, steps, last)
        try:
            driver.call("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), dev)
            last.append(lambda: lib["cuDevicePrimaryCtxRelease"](dev))
            driver.call("cuCtxPushCurrent", ctx)
            try:
                handle = ctypes.c_ulonglong()
                driver.call("cuMemImportFromShareableHandle", ctypes.byref(handle),
                            ctypes.c_void_p(fd), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
                steps.append(lambda: lib["cuMemRelease"](handle))
                prop = _AllocationProp()
                prop.type = CU_MEM_ALLOCATION_TYPE_PINNED
                prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
                prop.location = _Location(CU_MEM_LOCATION_TYPE_DEVICE, dev)
                gran = ctypes.c_size_t()
                driver.call("cuMemGetAllocationGranularity", ctypes.byref(gran),
                            ctypes.byref(prop), CU_MEM_ALLOC_GRANULARITY_MINIMUM)
                g = max(1, gran.value)
                mapped = -(-int(size) // g) * g
                ptr = ctypes.c_ulonglong()
                driver.call("cuMemAddressReserve", ctypes.byref(ptr), ctypes.c_size_t(mapped),
                            ctypes.c_size_t(0), ctypes.c_ulonglong(0), ctypes.c_ulonglong(0))
                steps.append(lambda: lib["cuMemAddressFree"](ptr, ctypes.c_size_t(mapped)))
                driver.call("cuMemMap", ptr, ctypes.c_size_t(mapped), ctypes.c_size_t(0),
                            handle, ctypes.c_ulonglong(0))
                steps.append(lambda: lib["cuMemUnmap"](ptr, ctypes.c_size_t(mapped)))
                desc = _AccessDesc(_Location(CU_MEM_LOCATION_TYPE_DEVICE, dev),
                                   CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
                driver.call("cuMemSetAccess", ptr, ctypes.c_size_t(mapped), ctypes.byref(desc),
                            ctypes.c_size_t(1))
            finally:
                popped = ctypes.c_void_p()
                lib["cuCtxPopCurrent"](ctypes.byref(popped))
        except BaseException:
            self._finalizer()
            raise
        self.address = int(ptr.value)
        self.size = int(size)

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def close(self) -> None:
        """Unmaps and releases (idempotent). Arrays of this mapping must be
        gone: conveyor/_device.py closes it when the last one is."""
        with self._lock:
            self._finalizer()
