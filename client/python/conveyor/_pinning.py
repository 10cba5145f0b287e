"""Page-locking a stream's mapped region for this process's CUDA context
(pin_memory=True; the device="cuda:N" copies need it too).

A registrar page-locks [ptr, ptr + size) once (register) and undoes it
(unregister) before the mapping goes. The one used by streams is made by
make_registrar(), a module attribute so that tests can put a recording
model in its place (the logic around it runs without a GPU).

TorchRegistrar calls torch.cuda.cudart().cudaHostRegister(ptr, size, flags)
and checks its return code (flags: cudaHostRegisterPortable, so the pages
count as pinned for every device's context; cudaHostRegisterReadOnly too
for a read-only mapping). require_cuda(what) is the check made before a stream is opened:
a clear FailedPrecondition when PyTorch or a CUDA device is missing.

Thread-safety: a registrar is used by the thread that opens and closes its
stream's transport.
"""

from typing import Any

from .errors import FailedPrecondition

# Portable: pinned for every CUDA context of the process, not only the
# current device's (a loader may copy to cuda:1 while cuda:0 is current).
_HOST_REGISTER_PORTABLE = 1
_HOST_REGISTER_READ_ONLY = 8  # cudaHostRegisterReadOnly


def require_cuda(what: str) -> Any:
    """The torch module, when PyTorch sees a CUDA device; else
    FailedPrecondition("<what> needs PyTorch with a CUDA device: <why>")."""
    try:
        import torch  # noqa: PLC0415  (optional dependency)
    except ImportError as e:
        raise FailedPrecondition("%s needs PyTorch with a CUDA device: PyTorch is not installed "
                                 "(%s)" % (what, e)) from None
    try:
        available = torch.cuda.is_available()
    except Exception as e:  # a broken driver install
        raise FailedPrecondition("%s needs PyTorch with a CUDA device: torch.cuda failed: %s"
                                 % (what, e)) from None
    if not available:
        raise FailedPrecondition(
            "%s needs PyTorch with a CUDA device: torch.cuda.is_available() is False (no CUDA "
            "driver or device in this process, a CPU-only PyTorch %s, or CUDA_VISIBLE_DEVICES "
            "hides every GPU)" % (what, torch.__version__))
    return torch


class TorchRegistrar:
    """cudaHostRegister through PyTorch's CUDA runtime bindings."""

    def __init__(self) -> None:
        self._torch = require_cuda("pin_memory=True")
        self._cudart = self._torch.cuda.cudart()

    def register(self, ptr: int, size: int, writable: bool) -> None:
        flags = _HOST_REGISTER_PORTABLE | (0 if writable else _HOST_REGISTER_READ_ONLY)
        rc = self._cudart.cudaHostRegister(ptr, size, flags)
        code = int(getattr(rc, "value", rc))
        if code != 0:
            raise FailedPrecondition(
                "pin_memory=True: cudaHostRegister of the stream's %d-byte region failed with "
                "CUDA error %d (%s)" % (size, code, rc))

    def unregister(self, ptr: int) -> None:
        rc = self._cudart.cudaHostUnregister(ptr)
        code = int(getattr(rc, "value", rc))
        if code != 0:
            # Nothing to give back to a caller that is closing: the mapping
            # goes anyway, and the kernel drops the lock with it.
            import warnings  # noqa: PLC0415
            warnings.warn("conveyor: cudaHostUnregister failed with CUDA error %d (%s)"
                          % (code, rc), RuntimeWarning, stacklevel=3)


def make_registrar() -> Any:
    """The registrar pinned streams use (tests replace this function)."""
    return TorchRegistrar()
