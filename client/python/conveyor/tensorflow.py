"""conveyor.tensorflow: a conveyor Loader as a tf.data.Dataset.

    import conveyor, conveyor.tensorflow
    loader = conveyor.Loader(address, pipeline="train", batch_size=256)
    ds = conveyor.tensorflow.dataset(loader)    # prefetched: prefetch=2
    model.fit(ds, epochs=10)          # each pass over ds is the loader's next epoch

The dataset's elements are (images, labels) batches: images shaped
[None, *sample_shape] in the pipeline's dtype (uint8, float32 or float16;
NCHW or NHWC as the pipeline says), labels int64 [None] - the element spec
comes from the daemon's PipelineInfo (element_spec()), with the loader's
own size, dtype and fields (Loader(size=, dtype=, fields=):
loader.stream_info()). The batch axis is None: a batch may be short
(skipped samples, the last batch of an epoch). The spec is fixed when the
dataset is made: after loader.set_size(), make a new dataset (a pass whose
stream has another shape raises ValueError).

Sample fields (captions, JSON metadata, raw bytes, keys: conveyor._fields)
are opt-in: dataset(loader, fields=True) - or a name, or a list of names -
makes the elements (images, labels, {name: tf.string [None]}), each field's
values as the bytes the daemon sent (UTF-8 text, JSON text, raw bytes, the
key's bytes; b"" where a sample has none); element_spec(info, fields=...)
describes them from PipelineInfo.fields.

Prefetch, credits, cardinality: dataset() prefetches itself (prefetch=2)
and raises the loader's credits to cover what tf.data holds
(credits_for(prefetch)), so that the stream never runs out of slots while
elements that are leased slots sit in the pipeline; and it asserts the
dataset's cardinality (batches per epoch of this rank x num_epochs), so
Keras knows the steps of an epoch.

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

import numbers
from types import ModuleType
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Tuple

import numpy as np

from ._fields import Selection, field_names
from ._framework import (TENSORFLOW_PIP, Copy, aligned_copy, check_copy, is_aligned, needs_copy,
                         require)
from .loader import dtype_of

if TYPE_CHECKING:
    from .loader import Batch


def _tf() -> ModuleType:
    return require("tensorflow", TENSORFLOW_PIP, "conveyor.tensorflow")


def element_spec(pipeline_info: Any, fields: Selection = False) -> Tuple[Any, ...]:
    """(images, labels) tf.TensorSpecs of a conveyor_pb2.PipelineInfo (e.g.
    loader.pipeline_info()); with fields= (True, a name or names of
    PipelineInfo.fields) a third element {name: tf.string [None] spec}."""
    tf = _tf()
    shape = tuple(int(d) for d in pipeline_info.sample_shape)
    if not shape:
        raise ValueError("pipeline %r: the daemon gave no sample shape" % pipeline_info.name)
    images = tf.TensorSpec((None,) + shape, tf.as_dtype(dtype_of(pipeline_info.dtype)),
                           name="images")
    labels = tf.TensorSpec((None,), tf.int64, name="labels")
    if fields is False or fields is None:
        return images, labels
    names = field_names(fields, [str(f.name) for f in pipeline_info.fields])
    return images, labels, {n: tf.TensorSpec((None,), tf.string, name=n) for n in names}


def field_bytes(batch: Batch, names: List[str]) -> Dict[str, np.ndarray]:
    """{name: object numpy array of bytes} of the batch's fields `names`:
    each value as the daemon sent it, b"" where absent (what a tf.string
    tensor takes)."""
    out = {}
    for name in names:
        col = batch.fields.get(name) if batch.fields else None
        if col is None:
            raise ValueError("batch %d has no field %r (its fields: %s)"
                             % (batch.sequence, name, ", ".join(batch.fields) or "none"))
        values = np.empty(len(col), dtype=object)
        for i in range(len(col)):
            values[i] = col.raw(i)
        out[name] = values
    return out


def _images(batch: Batch, copy: Copy) -> np.ndarray:
    """The batch's images for tf.data: a numpy array TensorFlow takes over
    without a copy (a view, or a 64-byte-aligned copy)."""
    images = batch.images
    if needs_copy(batch, images, copy) or not is_aligned(images):
        return aligned_copy(images)
    return images


def to_tensors(batch: Batch, copy: Copy = "auto", fields: Selection = False) -> Tuple[Any, ...]:
    """(images, labels) of a conveyor.Batch as eager tf.Tensors. Images go
    through DLPack, without a copy, when copy allows it (see the module) and
    the memory is 64-byte aligned and writable; otherwise they are copied.
    fields= (True, a name or names): a third element {name: tf.string}."""
    tf = _tf()
    check_copy(copy)
    images = batch.images
    if needs_copy(batch, images, copy) or not is_aligned(images) or not images.flags.writeable:
        images = aligned_copy(images)
    out = (tf.experimental.dlpack.from_dlpack(images.__dlpack__()),
           tf.convert_to_tensor(batch.labels))
    if fields is False or fields is None:
        return out
    names = field_names(fields, list(batch.fields))
    return out + ({n: tf.constant(v, dtype=tf.string, shape=(len(v),))
                   for n, v in field_bytes(batch, names).items()},)


# Elements a dataset's pipeline holds besides its prefetch buffer, each a
# leased slot on the zero-copy path: the batch the generator holds (released
# when it takes the next), the element on its way from the generator into
# the buffer, and the one the consumer (a Keras step) is working on - plus
# the credit the daemon needs to send the next batch (conveyor.loader: a
# stream copies batches out of their slots once arrays of released batches
# hold all credits but one).
HELD_BESIDES_PREFETCH = 4


def credits_for(prefetch: int) -> int:
    """The credits a stream needs so that a dataset prefetching `prefetch`
    elements never runs out of slots (no copies, no warning)."""
    return prefetch + HELD_BESIDES_PREFETCH


def cardinality(loader: Any, num_epochs: int) -> Optional[int]:
    """The number of elements of dataset(loader, num_epochs): batches per
    epoch of this rank times num_epochs (tf.data.INFINITE_CARDINALITY for
    num_epochs=0), or None when unknown: a loader without len(), or one
    that resumes mid-epoch (a loaded state_dict; the first pass is shorter
    than the next ones)."""
    if not hasattr(loader, "__len__") or _offset(loader) > 0:
        return None
    if num_epochs == 0:
        return int(_tf().data.INFINITE_CARDINALITY)
    return len(loader) * num_epochs


def _offset(loader: Any) -> int:
    state = loader.state_dict() if hasattr(loader, "state_dict") else {}
    return int(state.get("offset", 0))


def _check_stream(stream: Any, made_for: Tuple[Tuple[int, ...], int]) -> None:
    """ValueError when the stream's samples are not those the dataset's
    spec was made for (the loader's size changed since)."""
    info = getattr(stream, "pipeline", None)
    if info is None or not hasattr(info, "sample_shape"):
        return
    got = (tuple(int(d) for d in info.sample_shape), int(info.dtype))
    if got != made_for:
        raise ValueError(
            "conveyor.tensorflow.dataset: the loader's stream has samples of shape %s, %s but "
            "the dataset was made for %s, %s (its element spec is fixed): after "
            "loader.set_size(), make a new dataset"
            % (list(got[0]), dtype_of(got[1]), list(made_for[0]), dtype_of(made_for[1])))


def dataset(loader: Any, num_epochs: int = 1, copy: Copy = "auto", prefetch: int = 2,
            fields: Selection = False) -> Any:
    """A tf.data.Dataset of (images, labels) over `loader` (a conveyor.Loader,
    or any object with its pipeline_info() (or stream_info()) and
    stream(num_epochs=) methods whose streams yield conveyor Batches and have
    close()). The element spec is the loader's stream_info(): its size,
    dtype and fields.
    Each iteration of the dataset opens one stream of `num_epochs` epochs
    (0: endless) from the loader's current epoch: with num_epochs=1 every
    Keras epoch reads the loader's next epoch, and a checkpointed
    loader.state_dict() resumes where training stopped.

    The dataset is prefetched already (`prefetch` elements, 0: none; a fixed
    number, not tf.data.AUTOTUNE), and the loader's credits are raised to
    cover that prefetch (credits_for(prefetch): its streams then never run
    out of slots while tf.data holds elements). Its cardinality is asserted
    (cardinality()): Keras shows N/N steps, not 1/Unknown.

    fields= (True, a name or names of the pipeline's fields): elements are
    (images, labels, {name: tf.string [None]}) (see the module)."""
    tf = _tf()
    check_copy(copy)
    if copy is False:
        raise ValueError("conveyor.tensorflow.dataset: copy=False is not allowed: tf.data keeps "
                         "elements (prefetch) after the loader released their slot; use 'auto' "
                         "or True")
    if isinstance(prefetch, bool) or not isinstance(prefetch, numbers.Integral) or prefetch < 0:
        raise ValueError("conveyor.tensorflow.dataset: prefetch must be a number of elements >= "
                         "0 (the stream's credits cover it; tf.data.AUTOTUNE has no bound), "
                         "got %r" % (prefetch,))
    info = loader.stream_info() if hasattr(loader, "stream_info") else loader.pipeline_info()
    spec = element_spec(info, fields)
    made_for = (tuple(int(d) for d in info.sample_shape), int(info.dtype))
    names = list(spec[2]) if len(spec) > 2 else None
    if hasattr(loader, "credits"):
        loader.credits = max(int(loader.credits), credits_for(int(prefetch)))
    count = cardinality(loader, num_epochs)

    def generate() -> Iterator[Tuple[Any, ...]]:
        if count is not None and _offset(loader) > 0:
            raise ValueError(
                "conveyor.tensorflow.dataset: the loader resumes mid-epoch (an earlier pass "
                "left early, e.g. take(n), or load_state_dict after dataset()), so this pass "
                "would be shorter than the %d elements the dataset asserts: finish each pass, "
                "or make the dataset after load_state_dict (its cardinality is then unknown)"
                % count)
        stream = loader.stream(num_epochs=num_epochs)
        try:
            _check_stream(stream, made_for)
            for batch in stream:
                if names is None:
                    yield _images(batch, copy), batch.labels
                else:
                    yield _images(batch, copy), batch.labels, field_bytes(batch, names)
        finally:  # also when tf.data drops the iterator half-way
            stream.close()

    ds = tf.data.Dataset.from_generator(generate, output_signature=spec)
    if count is not None:
        ds = ds.apply(tf.data.experimental.assert_cardinality(count))
    return ds.prefetch(int(prefetch)) if prefetch else ds
