"""The CUDA calls of the client-side device= path, behind a small seam, so
that the release-after-event logic (conveyor/_device_feed.py) is tested
without a GPU against a host model whose copies complete later.

A copier (one per Loader: its own CUDA stream) has
  device               what the tensors are on ("cuda:0")
  start(images)        starts the host-to-device copy of `images` (a numpy
                       view of a pinned slot) on the copier's stream, records
                       an event after it, and returns a Copy
A Copy has
  done()               True once the copy's event completed (never blocks)
  wait()               blocks until it has
  hand_over()          the device tensor, for the consumer: its current
                       stream waits on the event first (no host block)

TorchCopier is the implementation: torch.cuda.Stream, Tensor.to(device,
non_blocking=True) under torch.cuda.stream(), torch.cuda.Event; the tensor
is recorded on the consumer's stream (the caching allocator then keeps its
memory until that stream is done with it).

Thread-safety: a copier and its copies are used by the thread iterating
the loader's stream.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._pinning import require_cuda


class TorchCopy:
    __slots__ = ("_torch", "_tensor", "_event", "_source")

    def __init__(self, torch: Any, tensor: Any, event: Any, source: Any) -> None:
        self._torch = torch
        self._tensor = tensor
        self._event = event
        self._source = source  # the host view stays referenced until the copy is done

    def done(self) -> bool:
        if self._event.query():
            self._source = None
            return True
        return False

    def wait(self) -> None:
        self._event.synchronize()
        self._source = None

    def hand_over(self) -> Any:
        stream = self._torch.cuda.current_stream(self._tensor.device)
        stream.wait_event(self._event)
        self._tensor.record_stream(stream)
        return self._tensor


class TorchCopier:
    def __init__(self, device: str) -> None:
        torch = require_cuda("device=%r" % device)
        self._torch = torch
        self.device = torch.device(device)
        if self.device.type != "cuda":
            from .errors import InvalidRequest  # noqa: PLC0415
            raise InvalidRequest("device must be a CUDA device (\"cuda\" or \"cuda:N\"), got %r"
                                 % device)
        if self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self._stream = torch.cuda.Stream(device=self.device)

    def start(self, images: np.ndarray) -> TorchCopy:
        torch = self._torch
        source = torch.from_numpy(images)
        with torch.cuda.stream(self._stream):
            tensor = source.to(self.device, non_blocking=True)
            event = torch.cuda.Event()
            event.record(self._stream)
        return TorchCopy(torch, tensor, event, source)


def make_copier(device: str) -> Any:
    """The copier of a Loader(device=...) (tests replace this function)."""
    return TorchCopier(device)
