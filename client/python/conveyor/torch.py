"""PyTorch adapters of the conveyor client.

    import conveyor.torch
    train = conveyor.torch.TorchLoader(None, pipeline="train", batch_size=256, seed=0)
    for epoch in range(start_epoch, epochs):
        train.set_epoch(epoch)
        for images, labels in train:          # torch tensors, zero-copy views
            ...
        torch.save({"data": train.state_dict(), ...}, "ckpt.pt")

TorchLoader: a drop-in for a DataLoader in the training loop: len() is the
batches per epoch of this rank, set_epoch(e) chooses the epoch, state_dict() /
load_state_dict() resume at the exact batch (also at another world size).
It iterates in the training process itself (no worker processes: the daemon
is the worker pool), yielding (images, labels) - plus the dataset indices
with yield_indices=True - as tensors that share the batch's memory; with the
default lifetime="safe" a kept tensor keeps its batch's slot (conveyor.loader).
It is not a dataset: DataLoader(TorchLoader(...)) raises TypeError at its
first batch, saying to iterate the TorchLoader or to wrap ConveyorDataset.

Sample fields (a pipeline's captions, JSON metadata, keys: conveyor._fields)
are opt-in: fields=True (every field), a name or a list of names adds a
last element to each tuple, {name: list of the batch's values} (str, bytes,
parsed JSON, None where a sample has none):

    for images, labels, fields in TorchLoader(None, pipeline="coco", batch_size=64,
                                              fields=["caption", "meta"]):
        captions, boxes = fields["caption"], [m["boxes"] for m in fields["meta"]]

A name the pipeline does not have raises InvalidRequest at the first batch.

ConveyorDataset: a torch.utils.data.IterableDataset over a Loader, for code
that wants a DataLoader: DataLoader(ConveyorDataset(loader), batch_size=None).
With num_workers=0 it iterates in the training process; with num_workers=1 in
the worker process, on a connection of its own (a Loader opens its channel
lazily in each process, so one made - and used - in the parent works after
the fork). Several workers would each read the same batches, so
num_workers > 1 is refused with a clear error. Its state_dict() only knows the
progress of the process that iterates it (not the parent's copy, under
workers): for exact resume use TorchLoader.

On GPU hosts pass pin_memory=True, device="cuda:N" or
transport="device_memory", device="cuda:N" (conveyor.loader): images (and
labels) then come as CUDA tensors.

rank / world_size / local_rank default to torchrun's $RANK / $WORLD_SIZE /
$LOCAL_RANK (conveyor.Loader).

Importing this module needs torch; without it the ImportError says what to
install (on CPU-only hosts, PyTorch's CPU index: PyPI's Linux wheels are
CUDA builds).

Thread-safety: one iterator at a time per TorchLoader / dataset, as for a
DataLoader.
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

import numpy as np

from ._framework import TORCH_PIP, install_hint

# ConveyorDataset subclasses torch's IterableDataset, so torch is needed at
# import: a missing one is reported here with the install hint conveyor.jax
# and conveyor.tensorflow give on first use.
try:
    import torch
    import torch.utils.data
except ImportError as e:
    raise ImportError(install_hint("torch", TORCH_PIP, "conveyor.torch", e)) from e

from ._device_array import DeviceArray  # noqa: E402
from ._device_feed import DeviceBatch  # noqa: E402
from ._fields import Selection, select_fields  # noqa: E402
from .errors import ConveyorError  # noqa: E402
from .loader import Batch, Loader  # noqa: E402

__all__ = ["ConveyorDataset", "TorchLoader", "batch_tensors"]

# (images, labels), then indices with yield_indices=True, then the fields'
# {name: values} with fields=.
FieldValues = Dict[str, List[Any]]
Tensors = Union[Tuple[torch.Tensor, torch.Tensor], Tuple[torch.Tensor, torch.Tensor, torch.Tensor],
                Tuple[torch.Tensor, torch.Tensor, FieldValues],
                Tuple[torch.Tensor, torch.Tensor, torch.Tensor, FieldValues]]


def _tensor(arr: np.ndarray) -> torch.Tensor:
    # Inline batches are read-only views of the gRPC message: torch would warn
    # on sharing them, so those (only) are copied.
    return torch.from_numpy(arr if arr.flags.writeable else arr.copy())


def batch_tensors(batch: Union[Batch, DeviceBatch], yield_indices: bool = False,
                  fields: Selection = False) -> Tensors:
    """(images, labels[, indices][, fields]) of a batch as tensors; images
    share the batch's memory (and, with lifetime="safe", keep its slot
    leased). Device batches (Loader device=, transport="device_memory") give
    CUDA tensors, labels and indices on the same device; a DEVICE_MEMORY
    batch's images are read through DLPack (no copy; bfloat16 included).
    fields: False (default), True (all) or names: appends {name: list of
    values} of those sample fields (conveyor._fields.select_fields)."""
    images = batch.images
    if isinstance(images, DeviceArray):
        images = torch.from_dlpack(images)
    elif not isinstance(images, torch.Tensor):
        images = _tensor(images)
    labels = torch.from_numpy(batch.labels)
    indices = torch.from_numpy(batch.indices) if yield_indices else None
    if images.device.type == "cuda":
        labels = labels.to(images.device, non_blocking=True)
        if indices is not None:
            indices = indices.to(images.device, non_blocking=True)
    if fields is not False and fields is not None:
        values = select_fields(batch, fields)
        if indices is not None:
            return images, labels, indices, values
        return images, labels, values
    if indices is not None:
        return images, labels, indices
    return images, labels


NOT_A_DATASET = (
    "TorchLoader is the loader; iterate it directly (for images, labels in loader), or wrap "
    "ConveyorDataset in a DataLoader: DataLoader(conveyor.torch.ConveyorDataset(loader), "
    "batch_size=None)")


class TorchLoader:
    """A DataLoader-like iterator over one pipeline for this rank.

    TorchLoader(address, pipeline, batch_size, *, yield_indices=False,
                fields=False,
                **Loader keyword arguments (seed, rank, world_size, credits,
                shuffle, drop_last, transport, lifetime, retry, security ...))
    or TorchLoader.from_loader(loader, yield_indices=False, fields=False).
    fields=True or a list of names: each tuple ends with {name: values}
    (see the module). size= and dtype= are the Loader's (the streams'
    choices; set_size() between epochs for progressive resizing); the fields
    the daemon sends are chosen with Loader(fields=...) and from_loader.
    """

    def __init__(self, address: Optional[str] = None, pipeline: str = "",
                 batch_size: int = 0, *, yield_indices: bool = False, fields: Selection = False,
                 **loader_kwargs: Any):
        if not pipeline or batch_size <= 0:
            raise ConveyorError("TorchLoader needs a pipeline and a positive batch_size, got "
                                "pipeline=%r batch_size=%r" % (pipeline, batch_size))
        self.loader = Loader(address, pipeline=pipeline, batch_size=batch_size, **loader_kwargs)
        self.yield_indices = yield_indices
        self.fields = fields

    @classmethod
    def from_loader(cls, loader: Loader, *, yield_indices: bool = False,
                    fields: Selection = False) -> "TorchLoader":
        self = cls.__new__(cls)
        self.loader = loader
        self.yield_indices = yield_indices
        self.fields = fields
        return self

    # DataLoader-like attributes
    @property
    def batch_size(self) -> int:
        return self.loader.batch_size

    @property
    def rank(self) -> int:
        return self.loader.rank

    @property
    def world_size(self) -> int:
        return self.loader.world_size

    @property
    def local_rank(self) -> int:
        return self.loader.local_rank

    @property
    def epoch(self) -> int:
        """The epoch the next iteration reads (set_epoch, or the one after a
        completed epoch, or the one a loaded state is in)."""
        return self.loader.current_epoch

    def __len__(self) -> int:
        return len(self.loader)

    def set_epoch(self, epoch: int) -> None:
        self.loader.set_epoch(epoch)

    def set_size(self, size: Union[None, int, Tuple[int, int]]) -> None:
        """The output size of the epochs iterated from now on (Loader.set_size)."""
        self.loader.set_size(size)

    def __getitem__(self, index: Any) -> Any:
        # What DataLoader(TorchLoader(...)) reaches first (its sampler indexes
        # the "dataset"): say what to do instead of "not subscriptable".
        raise TypeError(NOT_A_DATASET)

    def __iter__(self) -> Iterator[Tensors]:
        """The current epoch (from where a loaded state left it)."""
        with self.loader.stream(num_epochs=1) as stream:
            for batch in stream:
                yield batch_tensors(batch, self.yield_indices, self.fields)

    def state_dict(self) -> Dict[str, Any]:
        """The resume point after the last batch this loader yielded."""
        return self.loader.state_dict()

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.loader.load_state_dict(state)

    def close(self) -> None:
        self.loader.close()

    def __enter__(self) -> "TorchLoader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class ConveyorDataset(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    """An IterableDataset of whole batches: use it with batch_size=None.

    ConveyorDataset(loader, yield_indices=False, fields=False). Iterating reads the
    loader's current epoch; set_epoch(e) chooses it (call it before each
    epoch, as with a DistributedSampler: with workers, before iter(dataloader)
    so the worker's copy sees it)."""

    def __init__(self, loader: Loader, *, yield_indices: bool = False,
                 fields: Selection = False):
        super().__init__()
        self.loader = loader
        self.yield_indices = yield_indices
        self.fields = fields

    def set_epoch(self, epoch: int) -> None:
        self.loader.set_epoch(epoch)

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[Tensors]:
        info = torch.utils.data.get_worker_info()
        if info is not None and info.num_workers > 1:
            raise ConveyorError(
                "ConveyorDataset under a DataLoader with num_workers=%d: every worker would read "
                "the same batches; use num_workers=0 or 1 (the daemon decodes in parallel "
                "already)" % info.num_workers)
        with self.loader.stream(num_epochs=1) as stream:
            for batch in stream:
                yield batch_tensors(batch, self.yield_indices, self.fields)

    def state_dict(self) -> Dict[str, Any]:
        return self.loader.state_dict()

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.loader.load_state_dict(state)
