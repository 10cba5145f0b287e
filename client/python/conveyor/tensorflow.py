"""conveyor.tensorflow: a conveyor Loader as a tf.data.Dataset.

    import conveyor, conveyor.tensorflow
    loader = conveyor.Loader(address, pipeline="train", batch_size=256)
    ds = conveyor.tensorflow.dataset(loader).prefetch(2)
    model.fit(ds, epochs=10)          # each pass over ds is the loader's next epoch

The dataset's elements are (images, labels) batches: images shaped
[None, *sample_shape] in the pipeline's dtype (uint8, float32 or float16;
NCHW or NHWC as the pipeline says), labels int64 [None] - the element spec
comes from the daemon's PipelineInfo (element_spec()). The batch axis is
None: a batch may be short (skipped samples, the last batch of an epoch).

Copies: tf.data.Dataset.from_generator takes a 64-byte-aligned numpy array
without a copy - the element is the daemon's slot itself - and keeps it in
its prefetch buffer after the generator moved on, when the Loader has
released the batch and the daemon refills the slot. So copy="auto" (the
default) copies each batch's images once, into 64-byte-aligned memory that
TensorFlow then takes over without copying again, unless the loader keeps
the slot leased while a view of it lives (see conveyor._framework); then the
element is the slot itself. copy=True always copies. copy=False is refused
for datasets (nothing would stop tf.data from reading a reused slot).

to_tensors(batch) is the eager path: tf.Tensors through DLPack
(tf.experimental.dlpack.from_dlpack) without a copy when the memory is
64-byte aligned (TensorFlow aborts the process on unaligned DLPack tensors,
so unaligned memory is copied instead). TensorFlow is imported on first use:
importing this module needs no TensorFlow.

Thread-safety: tf.data runs the generator on its own threads, one call at a
time per iterator; each iteration of the dataset opens its own stream.
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Any, Iterator, Tuple

import numpy as np

from ._framework import Copy, aligned_copy, check_copy, is_aligned, needs_copy, require
from .loader import dtype_of

if TYPE_CHECKING:
    from .loader import Batch


def _tf() -> ModuleType:
    return require("tensorflow", "tensorflow-cpu (or tensorflow)", "conveyor.tensorflow")


def element_spec(pipeline_info: Any) -> Tuple[Any, Any]:
    """(images, labels) tf.TensorSpecs of a conveyor_pb2.PipelineInfo (e.g.
    loader.pipeline_info())."""
    tf = _tf()
    shape = tuple(int(d) for d in pipeline_info.sample_shape)
    if not shape:
        raise ValueError("pipeline %r: the daemon gave no sample shape" % pipeline_info.name)
    images = tf.TensorSpec((None,) + shape, tf.as_dtype(dtype_of(pipeline_info.dtype)),
                           name="images")
    return images, tf.TensorSpec((None,), tf.int64, name="labels")


def _images(batch: Batch, copy: Copy) -> np.ndarray:
    """The batch's images for tf.data: a numpy array TensorFlow takes over
    without a copy (a view, or a 64-byte-aligned copy)."""
    images = batch.images
    if needs_copy(batch, images, copy) or not is_aligned(images):
        return aligned_copy(images)
    return images


def to_tensors(batch: Batch, copy: Copy = "auto") -> Tuple[Any, Any]:
    """(images, labels) of a conveyor.Batch as eager tf.Tensors. Images go
    through DLPack, without a copy, when copy allows it (see the module) and
    the memory is 64-byte aligned and writable; otherwise they are copied."""
    tf = _tf()
    check_copy(copy)
    images = batch.images
    if needs_copy(batch, images, copy) or not is_aligned(images) or not images.flags.writeable:
        images = aligned_copy(images)
    return (tf.experimental.dlpack.from_dlpack(images.__dlpack__()),
            tf.convert_to_tensor(batch.labels))


def dataset(loader: Any, num_epochs: int = 1, copy: Copy = "auto") -> Any:
    """A tf.data.Dataset of (images, labels) over `loader` (a conveyor.Loader,
    or any object with its pipeline_info() and stream(num_epochs=) methods
    whose streams yield conveyor Batches and have close()).
    Each iteration of the dataset opens one stream of `num_epochs` epochs
    (0: endless) from the loader's current epoch: with num_epochs=1 every
    Keras epoch reads the loader's next epoch, and a checkpointed
    loader.state_dict() resumes where training stopped."""
    tf = _tf()
    check_copy(copy)
    if copy is False:
        raise ValueError("conveyor.tensorflow.dataset: copy=False is not allowed: tf.data keeps "
                         "elements (prefetch) after the loader released their slot; use 'auto' "
                         "or True")
    spec = element_spec(loader.pipeline_info())

    def generate() -> Iterator[Tuple[np.ndarray, np.ndarray]]:
        stream = loader.stream(num_epochs=num_epochs)
        try:
            for batch in stream:
                yield _images(batch, copy), batch.labels
        finally:  # also when tf.data drops the iterator half-way
            stream.close()

    return tf.data.Dataset.from_generator(generate, output_signature=spec)
