"""conveyor.jax: a conveyor stream's batches as jax.Arrays.

    import conveyor, conveyor.jax
    loader = conveyor.jax.loader(address, pipeline="train", batch_size=256)
    for images, labels in conveyor.jax.iterate(loader.epoch(0)):
        params = train_step(params, images, labels)

    # data parallel: each local device gets its slice of the batch axis
    sharding = conveyor.jax.batch_sharding()        # Mesh of jax.local_devices()
    for images, labels in conveyor.jax.iterate(loader.epoch(0), sharding=sharding):
        ...

Images come through DLPack from the batch's numpy array: on the CPU that is
the daemon's memory itself, no copy (jax.Array.unsafe_buffer_pointer() equals
batch.images.ctypes.data). JAX arrays are immutable and may be read long
after the Python loop moved on (asynchronous dispatch), so copy="auto" (the
default) copies the images once unless the loader keeps the batch's slot
leased while a view of it lives (see conveyor._framework for the rule);
copy=False hands over the view as long as you keep each batch unreleased
until JAX is done with it (open_stream(auto_release=False), and release
after jax.block_until_ready on the step's result); copy=True always copies.
Note that jax.device_put and jnp.asarray of batch.images alias the slot on
the CPU just the same: go through this module or copy.

Multi-host jobs: conveyor.jax.loader(address, pipeline=, batch_size=, ...)
is a conveyor.Loader whose rank and world_size default to
jax.process_index() and jax.process_count() when JAX runs as several
processes (after jax.distributed.initialize()), so that each process reads
its own shard; rank= / world_size= given win, and a single-process job keeps
Loader's defaults ($RANK / $WORLD_SIZE, else 0 / 1). iterate() warns when a
Loader of world size 1 is read in a job of several processes.

Device batches (Loader device=, transport="device_memory") are read through
DLPack on their GPU without a copy (copy="auto" copies a device_memory
batch on the device unless its slot stays leased, as above).

Labels are int64 numpy arrays owned by the batch; JAX gets them in its
default integer type (int32 unless jax_enable_x64). JAX is imported on first
use: importing this module needs no JAX.

Sample fields (captions, JSON metadata, keys: conveyor._fields) are opt-in
and stay Python values, not arrays: fields=True (all), a name or a list of
names makes each element (images, labels, {name: list of values}):

    for images, labels, fields in conveyor.jax.iterate(loader.epoch(0), fields=["caption"]):
        tokens = tokenize(fields["caption"])    # a list of str (None: absent)

Thread-safety: the functions keep no state; iterate() a stream from one
thread, like the stream itself.
"""

from __future__ import annotations

import warnings
from types import ModuleType
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Optional, Sequence, Tuple

import numpy as np

from ._device_feed import DeviceBatch
from ._fields import Selection, select_fields
from ._framework import JAX_PIP, Copy, check_copy, needs_copy, require, views_keep_slot
from .loader import Loader

if TYPE_CHECKING:
    from .loader import Batch


def _jax() -> ModuleType:
    return require("jax", JAX_PIP, "conveyor.jax")


def process_rank() -> Optional[Tuple[int, int]]:
    """(jax.process_index(), jax.process_count()) when this JAX job runs as
    several processes (multi-host, after jax.distributed.initialize()), else
    None: a single JAX process leaves rank and world size to conveyor.Loader's
    defaults ($RANK / $WORLD_SIZE, else 0 / 1)."""
    jax = _jax()
    count = int(jax.process_count())
    if count <= 1:
        return None
    return int(jax.process_index()), count


def loader(address: Optional[str] = None, pipeline: str = "", batch_size: int = 0,
           **loader_kwargs: Any) -> Loader:
    """A conveyor.Loader for this JAX process: in a multi-process JAX job,
    rank and world_size default to jax.process_index() and
    jax.process_count() (each process - one per host - reads its own shard
    of every epoch); arguments given win, and a single-process job keeps
    Loader's defaults. The other arguments are Loader's."""
    mapped = process_rank()
    if mapped is not None:
        loader_kwargs.setdefault("rank", mapped[0])
        loader_kwargs.setdefault("world_size", mapped[1])
    return Loader(address, pipeline=pipeline, batch_size=batch_size, **loader_kwargs)


def _warn_unsharded(batches: Any) -> None:
    """A Loader of world size 1 iterated in a multi-process JAX job: every
    process would read the same batches."""
    if getattr(batches, "world_size", None) != 1:
        return
    mapped = process_rank()
    if mapped is not None:
        warnings.warn("conveyor.jax: this loader has world_size=1 in a JAX job of %d processes: "
                      "every process reads the same batches; make it with conveyor.jax.loader() "
                      "(rank=jax.process_index(), world_size=jax.process_count())" % mapped[1],
                      RuntimeWarning, stacklevel=3)


def batch_sharding(devices: Optional[Sequence[Any]] = None, axis_name: str = "batch") -> Any:
    """A jax.sharding.NamedSharding that splits axis 0 (the batch) over
    `devices` (default: jax.local_devices()) along a one-axis Mesh named
    `axis_name`; the other axes are whole on every device."""
    jax = _jax()
    devices = list(jax.local_devices() if devices is None else devices)
    if not devices:
        raise ValueError("batch_sharding: no devices given")
    mesh = jax.sharding.Mesh(np.array(devices), (axis_name,))
    return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(axis_name))


def shard(array: Any, sharding: Any) -> Any:
    """Places `array` (numpy or jax) with `sharding` (e.g. batch_sharding()):
    each device holds its slice of the batch axis. A batch that does not
    split evenly raises ValueError naming both sizes."""
    jax = _jax()
    try:
        sharding.shard_shape(tuple(array.shape))
    except ValueError as e:
        raise ValueError("a batch of %d samples does not split evenly over the sharding's %d "
                         "devices (%s): use a batch size that is a multiple of it, and "
                         "drop_last=True with the 'fail_fast' error policy so that no batch is "
                         "short" % (array.shape[0], len(sharding.device_set), e)) from None
    return jax.device_put(array, sharding)


def _images_to_jax(jax: ModuleType, images: np.ndarray) -> Any:
    if images.flags.writeable:
        return jax.dlpack.from_dlpack(images)  # the array's memory itself (CPU)
    # numpy exports no read-only array through DLPack (inline batches: the
    # array views the received message, which nothing overwrites).
    return jax.device_put(images)


def to_jax(batch: Batch, copy: Copy = "auto", sharding: Any = None,
           fields: Selection = False) -> Tuple[Any, ...]:
    """(images, labels) of a conveyor.Batch as jax.Arrays: on the default CPU
    device through DLPack, or placed with `sharding`. copy: "auto" (copy
    unless the view stays valid after the batch's release), True or False
    (see the module's documentation). fields: True, a name or names adds
    {name: list of values} of those sample fields (Python values)."""
    arrays = _arrays(batch, copy, sharding)
    if fields is False or fields is None:
        return arrays
    return arrays + (select_fields(batch, fields),)


def _arrays(batch: Batch, copy: Copy, sharding: Any) -> Tuple[Any, Any]:
    jax = _jax()
    check_copy(copy)
    images = batch.images
    if not isinstance(images, np.ndarray):
        return _device_to_jax(jax, batch, images, copy, sharding)
    if needs_copy(batch, images, copy):
        images = np.array(images, copy=True)
    labels = batch.labels.astype(jax.dtypes.canonicalize_dtype(np.int64), copy=False)
    if sharding is not None:
        return shard(images, sharding), shard(labels, sharding)
    return _images_to_jax(jax, images), jax.device_put(labels)


def _device_to_jax(jax: ModuleType, batch: Any, images: Any, copy: Copy,
                   sharding: Any) -> Tuple[Any, Any]:
    """Device batches: a DeviceArray (transport="device_memory") or the CUDA
    tensor of a DeviceBatch (device=), read through DLPack without a copy.
    A DeviceBatch's tensor is the user's own; a DeviceArray is copied
    (on the device) unless its slot stays leased (lifetime="safe")."""
    arr = jax.dlpack.from_dlpack(images)
    owned = isinstance(batch, DeviceBatch)
    if copy is True or (copy == "auto" and not owned and not views_keep_slot(batch)):
        arr = jax.numpy.array(arr, copy=True)
    labels = batch.labels.astype(jax.dtypes.canonicalize_dtype(np.int64), copy=False)
    if sharding is not None:
        return shard(arr, sharding), shard(labels, sharding)
    return arr, jax.device_put(labels)


def iterate(batches: Iterable[Batch], copy: Copy = "auto", sharding: Any = None,
            fields: Selection = False) -> Iterator[Tuple[Any, ...]]:
    """Yields (images, labels) jax.Arrays for every batch of `batches` (a
    conveyor Stream, e.g. loader.epoch(e) or loader.stream(n), a Loader -
    its current epoch - or any iterable of Batch), with fields= also
    {name: list of values} (see to_jax). A stream it opened or was
    given is closed when the iteration ends or is abandoned."""
    _jax()
    check_copy(copy)
    _warn_unsharded(batches)
    return _iterate(batches, copy, sharding, fields)


def _iterate(batches: Iterable[Batch], copy: Copy, sharding: Any,
             fields: Selection) -> Iterator[Tuple[Any, ...]]:
    it = iter(batches)
    try:
        for batch in it:
            yield to_jax(batch, copy, sharding, fields)
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()
