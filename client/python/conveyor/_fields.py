"""Sample fields: what each sample of a batch carries beside its media (a
caption, JSON metadata, raw bytes, the sample's key), as Batch.fields.

    batch.fields["caption"][0]          # str, or None where the sample has none
    batch.fields["meta"][3]["boxes"]    # JSON, parsed on first access

Each field of a batch is a FieldColumn: a read-only sequence of the batch's
num_samples values, built from a conveyor_pb2.FieldColumn message (Arrow
style: sample i's value is data[offsets[i]:offsets[i + 1]], present[i] says
whether the sample has it). Values by type: "text" -> str (strict UTF-8),
"bytes" -> bytes, "json" -> the value json.loads gives (parsed when first
read, then cached: the same object on every access), "npy" -> a read-only
numpy array (np.load without pickles; cached likewise; boxes the daemon
moved with the image are float32 [N, 4 + k]), "mask" -> a read-only
uint8 array [height, width] (a segmentation mask moved with the image),
"key" -> str (invalid
UTF-8 bytes kept as surrogate escapes, so name.encode("utf-8",
"surrogateescape") gives the key's bytes back); an absent value is None.
`offsets`, `data` and `present` are there for readers that want the bytes
without a Python object per sample.

A column is checked against the batch when it is built (offsets, lengths,
type, names; build_fields), so indexing never reads outside `data`; a value
that does not decode (text that is not UTF-8, JSON that does not parse)
raises ProtocolError naming the field and the sample when it is read.
Columns hold their own bytes (they come with the batch's header, not in its
slot): they stay readable after the batch is released.

Thread-safety: columns are immutable but for the JSON cache, whose worst
race parses a value twice; reading from several threads is safe.
"""

from __future__ import annotations

import io
import json
import operator
from collections.abc import Sequence as _SequenceABC
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Union, overload

import numpy as np

from ._stubs import pb
from .errors import InvalidRequest, ProtocolError

__all__ = ["FieldColumn", "build_fields", "select_fields", "field_names", "TYPE_NAMES"]

# conveyor_pb2.FieldType -> FieldColumn.type
TYPE_NAMES: Dict[int, str] = {pb.FIELD_TEXT: "text", pb.FIELD_BYTES: "bytes",
                              pb.FIELD_JSON: "json", pb.FIELD_KEY: "key", pb.FIELD_NPY: "npy",
                              pb.FIELD_MASK: "mask"}

_UNPARSED = object()  # a JSON value not read yet
_OFFSET = np.dtype("<u4")


class FieldColumn(_SequenceABC):
    """One field's values for the samples of a batch (see the module).

    len(), col[i] (negative i too), col[a:b] (a list), iteration. Attributes:
    name, type ("text", "bytes", "json" or "key"), offsets (uint32 numpy,
    num_samples + 1, offsets[0] == 0), data (bytes), present (bool numpy,
    num_samples), all read-only."""

    __slots__ = ("name", "type", "offsets", "data", "present", "value_shape", "_where", "_json")

    name: str
    type: str
    offsets: np.ndarray
    data: bytes
    present: np.ndarray

    def __init__(self, message: Any, num_samples: int, *, where: str = "") -> None:
        """Checks `message` (a conveyor_pb2.FieldColumn) against a batch of
        `num_samples` samples; ProtocolError naming the field and what is
        wrong otherwise. `where` prefixes the messages ("batch 7")."""
        name = str(message.name)
        self.name = name
        self._where = where
        n = int(num_samples)

        def bad(why: str) -> ProtocolError:
            return ProtocolError("protocol error: %sfield %r: %s"
                                 % (where + ": " if where else "", name, why))

        if n < 0:
            raise bad("a batch of %d samples" % n)
        kind = TYPE_NAMES.get(int(message.type))
        if kind is None:
            raise bad("unknown type %d (this client knows %s)"
                      % (int(message.type), ", ".join(sorted(TYPE_NAMES.values()))))
        self.type = kind
        raw_offsets = bytes(message.offsets)
        data = bytes(message.data)
        raw_present = bytes(message.present)
        if len(raw_offsets) != 4 * (n + 1):
            raise bad("%d bytes of offsets for %d samples (%d expected: %d uint32)"
                      % (len(raw_offsets), n, 4 * (n + 1), n + 1))
        if len(raw_present) != n:
            raise bad("%d bytes of present for %d samples" % (len(raw_present), n))
        offsets = np.frombuffer(raw_offsets, dtype=_OFFSET)
        if offsets[0] != 0:
            raise bad("offsets start at %d, not 0" % offsets[0])
        down = np.flatnonzero(offsets[1:] < offsets[:-1])
        if down.size:
            i = int(down[0])
            raise bad("offsets decrease at sample %d (%d after %d)"
                      % (i, offsets[i + 1], offsets[i]))
        if int(offsets[-1]) != len(data):
            raise bad("offsets end at %d but data has %d bytes" % (offsets[-1], len(data)))
        flags = np.frombuffer(raw_present, dtype=np.uint8)
        odd = np.flatnonzero(flags > 1)
        if odd.size:
            raise bad("present[%d] is %d (0 or 1 expected)" % (odd[0], flags[odd[0]]))
        present = flags.view(np.bool_)
        stray = np.flatnonzero(~present & (offsets[1:] != offsets[:-1]))
        if stray.size:
            raise bad("sample %d is absent but has %d bytes"
                      % (stray[0], offsets[stray[0] + 1] - offsets[stray[0]]))
        shape = tuple(int(d) for d in message.value_shape)
        if kind == "mask":
            if len(shape) != 2 or min(shape) <= 0 or shape[0] * shape[1] > (1 << 31):
                raise bad("a mask column's value_shape is %r, not [height, width]" % (shape,))
            sizes = (offsets[1:] - offsets[:-1]).astype(np.int64)
            wrong = np.flatnonzero(present & (sizes != shape[0] * shape[1]))
            if wrong.size:
                raise bad("mask of sample %d has %d bytes, not %d x %d"
                          % (wrong[0], sizes[wrong[0]], shape[0], shape[1]))
        elif shape:
            raise bad("value_shape %r on a %s column" % (shape, kind))
        self.value_shape = shape
        self.offsets = offsets
        self.data = data
        self.present = present
        # JSON and npy values are parsed when first read, then kept.
        self._json: Optional[List[Any]] = [_UNPARSED] * n if kind in ("json", "npy") else None

    def __len__(self) -> int:
        return len(self.present)

    @overload
    def __getitem__(self, index: int) -> Any: ...

    @overload
    def __getitem__(self, index: slice) -> List[Any]: ...

    def __getitem__(self, index: Union[int, slice]) -> Any:
        n = len(self.present)
        if isinstance(index, slice):
            return [self._value(i) for i in range(*index.indices(n))]
        i = operator.index(index)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("field %r: sample %d of %d" % (self.name, index, n))
        return self._value(i)

    def __iter__(self) -> Iterator[Any]:
        for i in range(len(self.present)):
            yield self._value(i)

    def raw(self, i: int) -> bytes:
        """Sample i's value as the daemon sent it (b"" where absent)."""
        n = len(self.present)
        i = operator.index(i)
        if not -n <= i < n:
            raise IndexError("field %r: sample %d of %d" % (self.name, i, n))
        i %= n
        return self.data[int(self.offsets[i]):int(self.offsets[i + 1])]

    def _value(self, i: int) -> Any:
        if not self.present[i]:
            return None
        cache = self._json
        if cache is not None:
            value = cache[i]
            if value is _UNPARSED:
                value = cache[i] = (self._parse_npy(i) if self.type == "npy"
                                    else self._parse_json(i))
            return value
        raw = self.data[int(self.offsets[i]):int(self.offsets[i + 1])]
        if self.type == "bytes":
            return raw
        if self.type == "mask":
            # Read-only: a view of the column's bytes (checked to be h × w).
            return np.frombuffer(raw, dtype=np.uint8).reshape(self.value_shape)
        if self.type == "key":
            return raw.decode("utf-8", "surrogateescape")
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise self._undecodable(i, "not UTF-8 text (%s)" % e) from None

    def _parse_json(self, i: int) -> Any:
        raw = self.data[int(self.offsets[i]):int(self.offsets[i + 1])]
        try:
            return json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as e:
            raise self._undecodable(i, "JSON that is not UTF-8 (%s)" % e) from None
        except RecursionError:
            raise self._undecodable(i, "JSON nested too deeply to parse") from None
        except ValueError as e:  # json.JSONDecodeError, int digit limits
            raise self._undecodable(i, "not valid JSON (%s)" % e) from None

    def _parse_npy(self, i: int) -> Any:
        raw = self.data[int(self.offsets[i]):int(self.offsets[i + 1])]
        # The header first, then the data checked against it before any
        # allocation: a hostile header cannot make the client allocate what
        # the bytes do not hold (np.load would, for a file-like object).
        fmt = np.lib.format
        try:
            f = io.BytesIO(raw)
            version = fmt.read_magic(f)
            if version == (1, 0):
                shape, fortran, dtype = fmt.read_array_header_1_0(f)
            elif version in ((2, 0), (3, 0)):
                shape, fortran, dtype = fmt.read_array_header_2_0(f)
            else:
                raise ValueError("format version %r" % (version,))
            if dtype.hasobject:
                raise ValueError("object arrays are refused")
            count = 1
            for d in shape:
                count *= int(d)
            body = raw[f.tell():]
            if count * dtype.itemsize != len(body):
                raise ValueError("shape %r of %s needs %d bytes, the value has %d"
                                 % (shape, dtype, count * dtype.itemsize, len(body)))
            array = np.frombuffer(body, dtype=dtype, count=count)
            array = array.reshape(shape, order="F" if fortran else "C")
        except (ValueError, OSError, EOFError, TypeError, SyntaxError) as e:
            raise self._undecodable(i, "not a .npy array (%s)" % e) from None
        array.flags.writeable = False  # one object per value, kept: shared by every reader
        return array

    def _undecodable(self, i: int, why: str) -> ProtocolError:
        return ProtocolError("protocol error: %sfield %r of sample %d (of %d): %s"
                             % (self._where + ": " if self._where else "", self.name, i,
                                len(self.present), why))

    def __repr__(self) -> str:
        return ("FieldColumn(name=%r, type=%r, num_samples=%d, present=%d, data_bytes=%d)"
                % (self.name, self.type, len(self.present), int(self.present.sum()),
                   len(self.data)))


def build_fields(columns: Iterable[Any], num_samples: int,
                 declared: Optional[Sequence[Any]] = None, *,
                 where: str = "") -> Dict[str, FieldColumn]:
    """Batch.fields from a Batch message's `fields` (conveyor_pb2.FieldColumn
    messages) for `num_samples` samples: {name: FieldColumn} in their order.

    `declared` (PipelineInfo.fields, when the stream's pipeline is known):
    the batch must carry exactly those fields, in that order, with those
    types - except that a batch of no samples may carry none (its columns
    are then empty ones of the declared fields). Anything else, an unnamed
    or repeated field, or a column that does not fit the batch, raises
    ProtocolError."""
    out: Dict[str, FieldColumn] = {}
    prefix = where + ": " if where else ""
    for message in columns:
        name = str(message.name)
        if not name:
            raise ProtocolError("protocol error: %sa field without a name" % prefix)
        if name in out:
            raise ProtocolError("protocol error: %sfield %r comes twice" % (prefix, name))
        out[name] = FieldColumn(message, num_samples, where=where)
    if declared is None:
        return out
    expected = [(str(f.name), TYPE_NAMES.get(int(f.type), "type %d" % int(f.type)))
                for f in declared]
    if not out and num_samples == 0:
        for name, _ in expected:
            empty = pb.FieldColumn(name=name, type=_type_value(declared, name),
                                   offsets=bytes(4))
            out[name] = FieldColumn(empty, 0, where=where)
        return out
    got = [(c.name, c.type) for c in out.values()]
    if got != expected:
        raise ProtocolError("protocol error: %sthe batch's fields %s differ from the pipeline's %s"
                            % (prefix, _describe(got), _describe(expected)))
    return out


def _type_value(declared: Sequence[Any], name: str) -> int:
    return next(int(f.type) for f in declared if str(f.name) == name)


def _describe(fields: Sequence[Any]) -> str:
    return "[%s]" % ", ".join("%s (%s)" % nt for nt in fields) if fields else "(none)"


Selection = Union[bool, str, Sequence[str]]


def field_names(selection: Selection, available: Sequence[str]) -> List[str]:
    """The field names an adapter's `fields=` argument selects among
    `available` (the batch's or the pipeline's, in order): False -> none,
    True -> all, a name or a sequence of names -> those (InvalidRequest
    naming the ones that are not there)."""
    if selection is False or selection is None:
        return []
    if selection is True:
        return list(available)
    names = [selection] if isinstance(selection, str) else list(selection)
    if not all(isinstance(n, str) for n in names):
        raise InvalidRequest("fields= takes True, False, a field name or a list of names, got %r"
                             % (selection,))
    missing = [n for n in names if n not in available]
    if missing:
        raise InvalidRequest("no field %s in this pipeline (its fields: %s)"
                             % (", ".join(repr(n) for n in missing),
                                ", ".join(available) if available else "none"))
    return names


def select_fields(batch: Any, selection: Selection) -> Dict[str, List[Any]]:
    """{name: list of values} of the batch's fields that `selection` picks
    (field_names), the values as FieldColumn gives them (str, bytes, parsed
    JSON, None where absent)."""
    fields = getattr(batch, "fields", None) or {}
    return {name: list(fields[name]) for name in field_names(selection, list(fields))}
