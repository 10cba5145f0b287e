"""Device-memory transport (DEVICE_MEMORY): the batches are in GPU memory,
in a ring of device buffers the daemon exported as one POSIX fd.

DeviceRegion.receive() fetches that fd on the daemon's fd socket with the
stream's secret (the SHARED_MEMORY hand-over, conveyor/_shm.py) and maps it:
  - on a GPU: imported with the CUDA driver API on the client's device
    (conveyor/_cuda_driver.py VmmMapping) - the client's ordinal of the GPU
    whose UUID it sent in OpenStream.device;
  - when DeviceMemoryOpened.host_model is set (the daemon runs its host
    model of the device API, a test aid): the fd is a memfd, mmapped.
A batch's images are a DeviceArray (conveyor/_device_array.py) at
Batch.images_offset, of the batch's (converted) dtype and shape. It is the
device-memory transport of a stream (conveyor/_transport.py: name,
slot_backed, images(), close(); `on_device` tells the stream that images
are not numpy arrays and dtype_of() names their types).

The mapping lives while arrays of it do: close() drops the transport's
reference, and the memory is unmapped (cuMemUnmap, cuMemRelease; munmap)
when the last DeviceArray, capsule or consumer holding one is gone. The
slot itself goes back to the daemon on release (and, under
lifetime="safe", only once no array views it), as with SHARED_MEMORY.
Thread-safety: used by the thread that iterates its stream.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import weakref
from typing import Any, Optional

from ._device_array import KDL_CPU, KDL_CUDA, DeviceArray, DeviceDType, device_dtype_of
from ._shm import receive_region_fd
from .errors import ConveyorError


def _unmap(mm: mmap.mmap, anchor: Any) -> None:
    del anchor
    try:
        mm.close()
    except BufferError:
        pass


class HostModelMemory:
    """The host model's "device memory": the memfd, mapped read-write."""

    device_type = KDL_CPU

    def __init__(self, fd: int, size: int) -> None:
        self.size = int(size)
        self.ordinal = 0
        st = os.fstat(fd)
        if st.st_size < self.size:
            raise ConveyorError("device region fd holds %d bytes, the daemon announced %d"
                                % (st.st_size, self.size))
        mm = mmap.mmap(fd, self.size, flags=mmap.MAP_SHARED,
                       prot=mmap.PROT_READ | mmap.PROT_WRITE)
        anchor = ctypes.c_char.from_buffer(mm)  # the address; unmapped in _unmap
        self.address = ctypes.addressof(anchor)
        self._finalizer = weakref.finalize(self, _unmap, mm, anchor)
        del anchor

    def close(self) -> None:
        self._finalizer()


class DeviceRegion:
    """One DEVICE_MEMORY stream's ring, mapped once."""

    name = "device_memory"
    slot_backed = True  # a batch's images are its ring buffer: reused after release
    on_device = True

    def __init__(self, memory: Any, region_bytes: int, gpu_uuid: str) -> None:
        self._memory: Optional[Any] = memory
        self.size = int(region_bytes)
        self.gpu_uuid = gpu_uuid
        self.host_model = isinstance(memory, HostModelMemory)

    @classmethod
    def receive(cls, opened: Any, stream_id: int, ordinal: Optional[int], *,
                timeout: float = 10.0) -> DeviceRegion:
        """Fetches the region's fd and maps it (`opened`: DeviceMemoryOpened;
        ordinal: this process's CUDA device of opened.gpu_uuid, None when the
        caller named the GPU by UUID only - then only a host-model answer
        can be mapped)."""
        fd = receive_region_fd(opened.fd_socket, stream_id, opened.secret, timeout)
        try:
            if opened.host_model:
                memory: Any = HostModelMemory(fd, opened.region_bytes)
            else:
                from ._cuda_driver import Driver, VmmMapping  # noqa: PLC0415
                driver = Driver()
                if ordinal is None:
                    ordinal = ordinal_of_uuid(driver, opened.gpu_uuid)
                memory = VmmMapping(driver, fd, opened.region_bytes, ordinal)
        finally:
            os.close(fd)
        return cls(memory, opened.region_bytes, opened.gpu_uuid)

    @staticmethod
    def dtype_of(enum_value: int) -> DeviceDType:
        return device_dtype_of(enum_value)

    def images(self, m: Any, dtype: DeviceDType, shape: Any, nbytes: int,
               lease: Any = None) -> DeviceArray:
        """The images of Batch message `m`: a DeviceArray of its buffer."""
        memory = self._memory
        if memory is None:
            raise ConveyorError("the device region is closed")
        offset = m.images_offset
        if offset + nbytes > self.size:
            raise ConveyorError("batch at [%d, %d) lies outside the %d-byte device region"
                                % (offset, offset + nbytes, self.size))
        kind = KDL_CPU if self.host_model else KDL_CUDA
        return DeviceArray(memory.address + offset, shape, dtype, device_type=kind,
                           device_id=memory.ordinal, owner=memory, lease=lease)

    @property
    def closed(self) -> bool:
        return self._memory is None

    def close(self) -> None:
        # Arrays hold the memory: it is unmapped when the last one is gone.
        self._memory = None


def ordinal_of_uuid(driver: Any, gpu_uuid: str) -> int:
    """This process's ordinal of the GPU `gpu_uuid` (FailedPrecondition-like
    CudaError or ConveyorError when it sees no such GPU)."""
    want = normalize_uuid(gpu_uuid)
    n = driver.device_count()
    seen = []
    for i in range(n):
        u = driver.uuid(i)
        if normalize_uuid(u) == want:
            return i
        seen.append(u)
    from .errors import FailedPrecondition  # noqa: PLC0415
    raise FailedPrecondition("this process sees no CUDA device %s (it sees: %s)"
                             % (gpu_uuid, ", ".join(seen) or "none"))


def normalize_uuid(uuid: str) -> str:
    """"GPU-" prefix and letter case do not matter (as for the daemon)."""
    u = uuid.strip().lower()
    return u[4:] if u.startswith("gpu-") else u
