"""What the framework adapters (conveyor.jax, conveyor.tensorflow,
conveyor.torch) share: importing the framework (lazily for JAX and
TensorFlow) with one install hint when it is missing, and deciding when a
batch's images may be handed to a framework without a copy.

The lifetime rule they follow: a framework array made from a batch's numpy
view without a copy (DLPack, or the framework's own zero-copy conversion of
aligned host memory - JAX's device_put and TensorFlow's from_generator both
alias such memory on CPU) reads the daemon's slot (shared memory) or the
data socket's buffer of that slot. The Loader releases a batch when the next
one is taken, and the slot then gets refilled with a later batch: an array
kept longer - JAX's asynchronous dispatch, tf.data's prefetch buffer, a list
of batches - would silently change. So, with copy="auto" (the default), the
adapters hand over a view only when its memory cannot be reused behind it:

- the batch's images are inline bytes (the array holds the received
  message, which nothing overwrites), or
- the loader keeps the slot leased while any view of it lives (the
  Loader's safe lifetime: a batch whose images lease their slot or are a
  private copy already);

and copy otherwise. copy=False always hands over views (the caller keeps each
batch unreleased until the framework is done with its arrays); copy=True
always copies.

Thread-safety: stateless functions.
"""

import importlib
from types import ModuleType
from typing import Any, Union

import numpy as np

Copy = Union[str, bool]  # "auto", True or False

COPY_MODES = ("auto", True, False)


# What to install for each adapter (the hint of install_hint). PyPI's torch
# wheels for Linux are CUDA builds that pull several GB of nvidia-* wheels:
# CPU hosts take PyTorch's CPU index.
TORCH_PIP = ("torch (CPU-only hosts: pip install torch --index-url "
             "https://download.pytorch.org/whl/cpu)")
JAX_PIP = "'jax[cpu]' (or jax with your accelerator's jaxlib)"
TENSORFLOW_PIP = "tensorflow-cpu (or tensorflow)"


def install_hint(module: str, pip_name: str, adapter: str, error: BaseException) -> str:
    """The message of the ImportError an adapter raises when its framework
    `module` cannot be imported: what is missing and what to install."""
    return ("%s needs %s, which is not installed in this interpreter (%s): pip install %s"
            % (adapter, module, error, pip_name))


def require(module: str, pip_name: str, adapter: str) -> ModuleType:
    """Imports `module` (the framework) or raises ImportError naming the pip
    package that provides it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(install_hint(module, pip_name, adapter, e)) from e


def check_copy(copy: Copy) -> Copy:
    """Validates an adapter's `copy` argument."""
    if not any(copy is m or (isinstance(m, str) and copy == m) for m in COPY_MODES):
        raise ValueError("copy must be 'auto', True or False, got %r" % (copy,))
    return copy


def views_keep_slot(batch: Any) -> bool:
    """True when the loader keeps the batch's slot from being reused while any
    view of its images lives: the Loader's safe lifetime, where the images
    lease their slot ("lease") or are already a private copy ("sent")."""
    return getattr(batch, "_returns", None) in ("lease", "sent")


def owns_memory(images: np.ndarray) -> bool:
    """True when the array's memory can never be reused behind it: a
    read-only view of an immutable bytes object (inline batches: the array
    holds the received message). Shared-memory and data-socket views (whose
    per-slot buffer is a numpy array the stream reuses) are not."""
    base: Any = images
    while isinstance(base, np.ndarray) and not base.flags.writeable:
        base = base.base
    return isinstance(base, bytes)


def needs_copy(batch: Any, images: np.ndarray, copy: Copy) -> bool:
    """Whether the adapter must copy `images` (batch.images) under `copy`."""
    if copy is True:
        return True
    if copy is False:
        return False
    return not (owns_memory(images) or views_keep_slot(batch))


ALIGNMENT = 64  # what TensorFlow's CPU tensors need to share memory (Eigen's alignment)


def aligned_copy(images: np.ndarray, alignment: int = ALIGNMENT) -> np.ndarray:
    """A C-contiguous copy of `images` whose data starts at a multiple of
    `alignment` bytes, so that a framework can take it over without copying
    again (TensorFlow copies unaligned host memory, and aborts on unaligned
    DLPack tensors)."""
    nbytes = images.nbytes
    raw = np.empty(nbytes + alignment, dtype=np.uint8)
    start = (-raw.ctypes.data) % alignment
    out = raw[start:start + nbytes].view(images.dtype).reshape(images.shape)
    np.copyto(out, images)
    return out


def is_aligned(images: np.ndarray, alignment: int = ALIGNMENT) -> bool:
    return bool(images.ctypes.data % alignment == 0)
