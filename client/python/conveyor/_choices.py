"""Per-stream choices: what one stream may choose for itself within the
bounds its pipeline's operator set (the pipeline's `allowed_sizes` and
`allowed_dtypes`; OpenStream.height, width, dtype and fields):

    size    None: the pipeline's; an int (square) or (height, width)
    dtype   None: the pipeline's; "uint8", "float32" or "float16"
    fields  None: every field of the pipeline; a list of names (possibly
            empty: none) of the pipeline's fields

Malformed values are refused here (InvalidRequest); whether a well-formed
choice is allowed is the daemon's call (INVALID_ARGUMENT naming the allowed
values). The daemon then describes the stream's samples in
StreamOpened.pipeline; stream_info() says the same ahead of time, from the
pipeline's PipelineInfo, and unhonoured() tells a daemon that ignored a
choice (one older than the choices drops the request's fields unread).

Thread-safety: StreamChoices is an immutable value.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, replace
from typing import Any, Optional, Tuple

import numpy as np

from ._stubs import pb
from .errors import InvalidRequest

# The dtype names a stream may ask for -> conveyor_pb2.DType.
DTYPES = {"uint8": pb.UINT8, "float32": pb.FLOAT32, "float16": pb.FLOAT16}

_MAX_SIDE = 2 ** 32 - 1  # OpenStream.height / width are uint32 (the daemon bounds them)
_SIZED_KINDS = ("image", "video", "")  # audio clips have no size


def check_size(size: Any) -> Optional[Tuple[int, int]]:
    """(height, width) of a size= argument: None, a positive int (square)
    or a pair of positive ints."""
    if size is None:
        return None

    def side(v: Any) -> int:
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) \
                or not 0 < int(v) <= _MAX_SIDE:
            raise InvalidRequest("size must be None, a positive int or (height, width) of "
                                 "positive ints, got %r" % (size,))
        return int(v)

    if isinstance(size, (tuple, list)):
        if len(size) != 2:
            raise InvalidRequest("size must be None, a positive int or (height, width) of "
                                 "positive ints, got %r" % (size,))
        return side(size[0]), side(size[1])
    s = side(size)
    return s, s


def check_dtype(dtype: Any) -> Optional[str]:
    """The dtype name of a dtype= argument: None, one of DTYPES' names, or a
    numpy dtype of one of them (np.float32)."""
    if dtype is None:
        return None
    name = dtype.lower() if isinstance(dtype, str) else None
    if name is None:
        try:
            name = np.dtype(dtype).name
        except TypeError:
            name = None
    if name not in DTYPES:
        raise InvalidRequest("dtype must be None (the pipeline's) or one of %s, got %r"
                             % (", ".join(DTYPES), dtype))
    return name


def check_fields(fields: Any) -> Optional[Tuple[str, ...]]:
    """The names of a fields= argument: None (every field), or a list or
    tuple of distinct non-empty names (empty: no field)."""
    if fields is None:
        return None
    if isinstance(fields, (str, bytes)):
        raise InvalidRequest("fields must be None (every field) or a list of field names, not "
                             "a single %s: write fields=[%r]" % (type(fields).__name__, fields))
    if not isinstance(fields, (list, tuple)):
        raise InvalidRequest("fields must be None (every field) or a list of field names, got %r"
                             % (fields,))
    names = tuple(fields)
    for n in names:
        if not isinstance(n, str) or not n:
            raise InvalidRequest("fields: each name must be a non-empty str, got %r in %r"
                                 % (n, fields))
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise InvalidRequest("fields: %s given twice" % ", ".join(repr(n) for n in twice))
    return names


def _spatial(info: Any) -> Optional[Tuple[int, int]]:
    """Where height and width are in info.sample_shape (indices), or None
    when the samples have no size (audio) or the layout is unknown."""
    n = len(info.sample_shape)
    if info.kind not in _SIZED_KINDS or n < 3:
        return None
    if info.layout == pb.NCHW:
        return n - 2, n - 1
    if info.layout == pb.NHWC:
        return n - 3, n - 2
    return None


@dataclass(frozen=True)
class StreamChoices:
    """A stream's size, dtype and fields (see the module); the fields are
    checked values (StreamChoices.of checks raw arguments)."""
    size: Optional[Tuple[int, int]] = None
    dtype: Optional[str] = None
    fields: Optional[Tuple[str, ...]] = None

    @classmethod
    def of(cls, size: Any = None, dtype: Any = None, fields: Any = None) -> StreamChoices:
        return cls(check_size(size), check_dtype(dtype), check_fields(fields))

    def with_size(self, size: Any) -> StreamChoices:
        return replace(self, size=check_size(size))

    @property
    def empty(self) -> bool:
        return self.size is None and self.dtype is None and self.fields is None

    def apply(self, request: Any) -> Any:
        """Sets the choices on a conveyor_pb2.OpenStream (returns it)."""
        if self.size is not None:
            request.height, request.width = self.size
        if self.dtype is not None:
            request.dtype = DTYPES[self.dtype]
        if self.fields is not None:
            # Set even when empty: an empty selection is "no field".
            request.fields.SetInParent()
            request.fields.names[:] = list(self.fields)
        return request

    def stream_info(self, info: Any) -> Any:
        """A copy of a pipeline's PipelineInfo (ListPipelines) with the
        stream's sample_shape, dtype and fields: what StreamOpened.pipeline
        will say once the daemon allows the choices (names it does not know
        are left out here; the daemon refuses them)."""
        out = pb.PipelineInfo()
        out.CopyFrom(info)
        where = _spatial(info)
        if self.size is not None and where is not None:
            out.sample_shape[where[0]], out.sample_shape[where[1]] = self.size
        if self.dtype is not None:
            out.dtype = DTYPES[self.dtype]
        if self.fields is not None:
            keep = [f for f in info.fields if f.name in self.fields]
            del out.fields[:]
            for f in keep:
                out.fields.add().CopyFrom(f)
        return out

    def unhonoured(self, opened: Any) -> Optional[str]:
        """None when StreamOpened.pipeline `opened` has the chosen size,
        dtype and fields; else which choice it lacks, in words."""
        why = []
        where = _spatial(opened)
        if self.size is not None and where is not None:
            got = (int(opened.sample_shape[where[0]]), int(opened.sample_shape[where[1]]))
            if got != self.size:
                why.append("size %dx%d (its samples are %dx%d)" % (self.size + got))
        if self.dtype is not None and opened.dtype != DTYPES[self.dtype]:
            got_dtype = next((n for n, v in DTYPES.items() if v == opened.dtype),
                             str(opened.dtype))
            why.append("dtype %s (its samples are %s)" % (self.dtype, got_dtype))
        if self.fields is not None:
            got_names = [str(f.name) for f in opened.fields]
            if sorted(got_names) != sorted(self.fields):
                why.append("fields [%s] (its fields: [%s])"
                           % (", ".join(self.fields), ", ".join(got_names)))
        return "; ".join(why) or None

    def describe(self) -> str:
        """The choices as open_stream's keywords, for messages."""
        parts = []
        if self.size is not None:
            parts.append("size=%r" % (self.size,))
        if self.dtype is not None:
            parts.append("dtype=%r" % self.dtype)
        if self.fields is not None:
            parts.append("fields=%r" % (list(self.fields),))
        return ", ".join(parts)

