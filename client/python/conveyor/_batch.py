"""Batch: one batch of a stream, and the vocabulary around it
(SampleFailure, dtypes, the "safe"/"fast" lifetimes).

A Batch belongs to the Stream that received it (conveyor/_stream.py): its
`images` view the stream's transport until the batch is released, after
which they raise BatchReleasedError; `release()` may be called from any
thread (the stream serializes it). A copy (`batch.copy()`) owns its arrays
and belongs to no stream. `fields` (conveyor/_fields.py) come with the
batch's header, not in its slot: they stay readable after the release.
"""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING, Any, Dict, Mapping, Optional, Sequence

import numpy as np

from ._fields import FieldColumn
from ._stubs import pb
from .errors import BatchReleasedError, ConveyorError, InvalidRequest

if TYPE_CHECKING:
    from ._stream import Stream

_DTYPES: Dict[int, np.dtype] = {pb.UINT8: np.dtype(np.uint8), pb.FLOAT32: np.dtype(np.float32),
           pb.FLOAT16: np.dtype(np.float16)}

SampleFailure = collections.namedtuple("SampleFailure", "sample_index path reason")

LIFETIMES = ("safe", "fast")


def check_lifetime(lifetime: str) -> str:
    """lifetime must be "safe" (default: a batch's slot goes back when the
    batch is released and no array views it any more) or "fast" (the slot
    goes back when the batch is released, whatever still views it)."""
    if lifetime not in LIFETIMES:
        raise InvalidRequest("lifetime must be \"safe\" or \"fast\", got %r" % (lifetime,))
    return lifetime


def dtype_of(enum_value: int) -> np.dtype:
    """numpy dtype of a conveyor_pb2.DType value."""
    try:
        return _DTYPES[enum_value]
    except KeyError:
        raise ConveyorError("unknown dtype %r from the daemon" % enum_value) from None


class Batch:
    """One batch of a stream.

    Attributes: images (numpy, shaped [num_samples, ...sample_shape]), labels
    and indices (int64 numpy, owned by the batch), sequence, epoch,
    batch_in_epoch, position (this rank's samples of the epoch through this
    batch), offset (samples of the epoch's global order consumed once every
    rank took this batch: the resume point), epoch_samples, end_of_epoch,
    num_samples, slot,
    failures (list of SampleFailure(sample_index, path, reason)),
    fields ({name: FieldColumn} in the pipeline's order, {} when it has
    none: batch.fields["caption"][i] is sample i's caption, see
    conveyor._fields).

    `images` views the daemon's slot without a copy until the batch is
    released; afterwards it raises BatchReleasedError. `copy()` returns a batch
    that owns its arrays and never needs releasing.
    """

    __slots__ = ("_stream", "_images", "_released", "_returns", "labels", "indices", "sequence", "epoch",
                 "batch_in_epoch", "position", "offset", "epoch_samples", "end_of_epoch", "num_samples",
                 "slot", "failures", "fields", "__weakref__")

    def __init__(self, stream: Optional[Stream], images: np.ndarray, labels: np.ndarray,
                 indices: np.ndarray, *, sequence: int = 0, epoch: int = 0,
                 batch_in_epoch: int = 0, position: int = 0, offset: int = 0,
                 epoch_samples: int = 0, end_of_epoch: bool = False, slot: int = 0,
                 failures: Sequence[SampleFailure] = (),
                 fields: Optional[Mapping[str, FieldColumn]] = None) -> None:
        self._stream = stream
        self._images: Optional[np.ndarray] = images
        self._released = stream is None
        # How the slot goes back on release: "now" (a Release message),
        # "lease" (when the images' SlotLease dies), "sent" (already returned:
        # the images are a private copy).
        self._returns = "now"
        self.labels = labels
        self.indices = indices
        self.sequence = sequence
        self.epoch = epoch
        self.batch_in_epoch = batch_in_epoch
        self.position = position
        self.offset = offset
        self.epoch_samples = epoch_samples
        self.end_of_epoch = end_of_epoch
        self.num_samples = int(labels.shape[0])
        self.slot = slot
        self.failures = list(failures)
        self.fields: Dict[str, FieldColumn] = dict(fields) if fields else {}

    @property
    def images(self) -> np.ndarray:
        images = self._images
        if images is None or (self._released and self._stream is not None):
            raise BatchReleasedError(
                "batch %d (epoch %d) was released: its slot belongs to the daemon again and may "
                "hold another batch; call batch.copy() before releasing to keep the data"
                % (self.sequence, self.epoch))
        return images

    @property
    def released(self) -> bool:
        """True once the batch's slot went back to the daemon (copies: False)."""
        return self._released and self._stream is not None

    def release(self) -> None:
        """Gives the slot back to the daemon (one credit). Idempotent; thread-safe."""
        if self._stream is not None:
            self._stream._release(self)

    def copy(self) -> Batch:
        """An independent batch owning copies of images, labels and indices
        (host batches; a device batch's images are copied with the array
        library that reads them, e.g. torch.from_dlpack(images).clone()).
        Its fields are the same (immutable) columns, in a dict of its own."""
        if not isinstance(self.images, np.ndarray):
            raise ConveyorError("batch %d: its images are in device memory (%r); copy them with "
                                "your array library, e.g. torch.from_dlpack(batch.images).clone()"
                                % (self.sequence, self.images))
        return Batch(None, np.array(self.images, copy=True), self.labels.copy(), self.indices.copy(),
                     sequence=self.sequence, epoch=self.epoch, batch_in_epoch=self.batch_in_epoch,
                     position=self.position, offset=self.offset,
                     epoch_samples=self.epoch_samples,
                     end_of_epoch=self.end_of_epoch, slot=self.slot, failures=self.failures,
                     fields=self.fields)

    def __len__(self) -> int:
        return self.num_samples

    def __enter__(self) -> Batch:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def __repr__(self) -> str:
        shape = tuple(self._images.shape) if self._images is not None else None
        where = "" if self._images is None or isinstance(self._images, np.ndarray) else (
            ", images=%r" % (self._images,))
        fields = ", fields=%s" % list(self.fields) if self.fields else ""
        return ("Batch(sequence=%d, epoch=%d, batch_in_epoch=%d, position=%d, num_samples=%d, "
                "shape=%s, dtype=%s, failures=%d%s%s%s)"
                % (self.sequence, self.epoch, self.batch_in_epoch, self.position, self.num_samples,
                   shape, self._images.dtype if self._images is not None else None,
                   len(self.failures), fields, ", released" if self.released else "", where))
