"""DeviceArray: the images of a DEVICE_MEMORY batch, in GPU memory, shared
with array libraries without a copy through the CUDA Array Interface (v3)
and DLPack.

    torch.as_tensor(batch.images, device="cuda")   # __cuda_array_interface__
    torch.from_dlpack(batch.images)                # __dlpack__ (also bfloat16)
    cupy.asarray(batch.images); jax.dlpack.from_dlpack(batch.images)

DeviceDType names the element type: uint8, float16, float32 and bfloat16.
The CUDA Array Interface has no typestr for bfloat16: its
__cuda_array_interface__ raises TypeError saying so (use DLPack, whose
kDLBfloat type carries it). Strides are C-contiguous (None in CAI, NULL in
DLPack). The data is ready when the batch is handed out (the daemon sends a
Batch only once its bytes are on the device), so the interface's "stream"
is None and __dlpack__(stream=...) needs no synchronization.

An array keeps `owner` (the mapping) and `lease` (the slot, under
lifetime="safe") alive; so does every capsule made from it until its
consumer calls the DLManagedTensor's deleter, and every CAI consumer that
references the array (torch, CuPy do). Under the host model of the daemon
(a test aid) the memory is host memory: the device is kDLCPU.

Thread-safety: immutable after construction; capsules may be made and
consumed on any thread (the deleter takes the GIL, as ctypes callbacks do).
"""

from __future__ import annotations

import ctypes
import math
import threading
from typing import Any, Dict, Optional, Tuple

from ._stubs import pb
from .errors import ConveyorError

KDL_CPU = 1
KDL_CUDA = 2
_KDL_UINT, _KDL_FLOAT, _KDL_BFLOAT = 1, 2, 4


class DeviceDType:
    """An element type of device batches."""

    __slots__ = ("name", "itemsize", "typestr", "dl_code", "dl_bits")

    def __init__(self, name: str, itemsize: int, typestr: Optional[str], dl_code: int) -> None:
        self.name = name
        self.itemsize = itemsize
        self.typestr = typestr  # None: no CUDA Array Interface spelling
        self.dl_code = dl_code
        self.dl_bits = itemsize * 8

    def __str__(self) -> str:
        return self.name

    __repr__ = __str__


DEVICE_DTYPES: Dict[int, DeviceDType] = {
    pb.UINT8: DeviceDType("uint8", 1, "|u1", _KDL_UINT),
    pb.FLOAT16: DeviceDType("float16", 2, "<f2", _KDL_FLOAT),
    pb.FLOAT32: DeviceDType("float32", 4, "<f4", _KDL_FLOAT),
    pb.BFLOAT16: DeviceDType("bfloat16", 2, None, _KDL_BFLOAT),
}


def device_dtype_of(enum_value: int) -> DeviceDType:
    try:
        return DEVICE_DTYPES[enum_value]
    except KeyError:
        raise ConveyorError("unknown dtype %r of a device batch from the daemon" % enum_value) from None


# --- DLPack (dlpack.h v0.8 ABI: the unversioned "dltensor" capsule) ---------

class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                            ("deleter", _DELETER)]

_CAPSULE_NAME = b"dltensor"
_CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)

# ctypes.pythonapi["name"] is a function object of our own (attribute access
# shares one, whose argtypes other code may set).
_PyCapsule_New = ctypes.pythonapi["PyCapsule_New"]
_PyCapsule_New.restype = ctypes.py_object
_PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, _CAPSULE_DESTRUCTOR]
_PyCapsule_IsValid = ctypes.pythonapi["PyCapsule_IsValid"]
_PyCapsule_IsValid.restype = ctypes.c_int
_PyCapsule_IsValid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_PyCapsule_GetPointer = ctypes.pythonapi["PyCapsule_GetPointer"]
_PyCapsule_GetPointer.restype = ctypes.c_void_p
_PyCapsule_GetPointer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]

# Managed tensors not yet deleted: address -> (struct, shape array, array).
# The struct lives here, not in the capsule, because a consumer owns it
# after renaming the capsule and may delete it long after the capsule.
_LIVE: Dict[int, Tuple[Any, Any, Any]] = {}
_LIVE_LOCK = threading.Lock()


def _delete_managed(managed: Any) -> None:
    addr = ctypes.cast(managed, ctypes.c_void_p).value or 0
    with _LIVE_LOCK:
        _LIVE.pop(addr, None)


_DELETE_MANAGED = _DELETER(_delete_managed)


def _capsule_destructor(capsule: int) -> None:
    # An unconsumed capsule (still named "dltensor") owns its tensor.
    if _PyCapsule_IsValid(capsule, _CAPSULE_NAME):
        ptr = _PyCapsule_GetPointer(capsule, _CAPSULE_NAME)
        _delete_managed(ctypes.cast(ptr, ctypes.POINTER(DLManagedTensor)))


_CAPSULE_DESTRUCTOR_FN = _CAPSULE_DESTRUCTOR(_capsule_destructor)


def live_dlpack_tensors() -> int:
    """Managed tensors whose consumer has not deleted them (for tests)."""
    return len(_LIVE)


class DeviceArray:
    """A C-contiguous array in device memory (see the module docstring)."""

    __slots__ = ("ptr", "shape", "dtype", "device_type", "device_id", "owner", "lease",
                 "__weakref__")

    def __init__(self, ptr: int, shape: Tuple[int, ...], dtype: DeviceDType, *,
                 device_type: int, device_id: int, owner: Any = None, lease: Any = None) -> None:
        self.ptr = int(ptr)
        self.shape = tuple(int(d) for d in shape)
        self.dtype = dtype
        self.device_type = device_type
        self.device_id = device_id
        self.owner = owner
        self.lease = lease

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def __cuda_array_interface__(self) -> Dict[str, Any]:
        if self.dtype.typestr is None:
            raise TypeError("a %s device array has no __cuda_array_interface__ (CAI has no "
                            "%s typestr): read it with DLPack, e.g. torch.from_dlpack(images)"
                            % (self.dtype.name, self.dtype.name))
        return {"version": 3, "shape": self.shape, "typestr": self.dtype.typestr,
                "data": (self.ptr, False), "strides": None, "stream": None}

    def __dlpack_device__(self) -> Tuple[int, int]:
        return (self.device_type, self.device_id)

    def __dlpack__(self, stream: Any = None, **_kwargs: Any) -> Any:
        """A "dltensor" capsule viewing this array (no copy). `stream` is
        accepted and needs nothing: the bytes are ready (module docstring)."""
        managed = DLManagedTensor()
        ndim = len(self.shape)
        shape = (ctypes.c_int64 * max(1, ndim))(*self.shape)
        t = managed.dl_tensor
        t.data = self.ptr
        t.device = _DLDevice(self.device_type, self.device_id)
        t.ndim = ndim
        t.dtype = _DLDataType(self.dtype.dl_code, self.dtype.dl_bits, 1)
        t.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
        t.strides = None  # C-contiguous
        t.byte_offset = 0
        managed.deleter = _DELETE_MANAGED
        addr = ctypes.addressof(managed)
        with _LIVE_LOCK:
            _LIVE[addr] = (managed, shape, self)  # keeps the memory (and slot) alive
        try:
            return _PyCapsule_New(addr, _CAPSULE_NAME, _CAPSULE_DESTRUCTOR_FN)
        except BaseException:
            with _LIVE_LOCK:
                _LIVE.pop(addr, None)
            raise

    def __repr__(self) -> str:
        where = "cuda:%d" % self.device_id if self.device_type == KDL_CUDA else "host model"
        return "DeviceArray(shape=%s, dtype=%s, device=%s)" % (self.shape, self.dtype, where)
