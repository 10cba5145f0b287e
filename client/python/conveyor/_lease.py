"""Leases: a batch's slot stays the client's while any array views it.

With lifetime="safe" (the default) a batch's images are a numpy array whose
base object is a SlotLease. Every view of it (slices, reshapes,
torch.from_numpy, DLPack capsules made by numpy's __dlpack__) keeps a
reference to that base, so the lease lives exactly as long as the last of
them. The Batch itself holds one reference until it is released; when the
lease is collected (reference count zero) it sends the slot's Release, and
only then may the daemon write the slot again.

Thread-safety: a lease may die on any thread, at any allocation (the garbage
collector), even while that thread holds a lock of the stream. So the release
path takes no lock: it puts the message on a queue.SimpleQueue (reentrant by
design) and discards the slot from a set (one C-level call), and a
non-blocking Lock.acquire(False) makes release happen once.
"""

from __future__ import annotations

import queue
import threading
from typing import Any, Callable, Dict, Set

import numpy as np


class LeaseBook:
    """The stream side of its leases: the slots leased now and how to send
    a Release. Shared by the stream and its leases (no reference back to the
    stream, so an abandoned stream is still collected while views live)."""

    def __init__(self, requests: "queue.SimpleQueue[Any]", make_release: Callable[[int, int], Any]):
        self.requests = requests
        self.make_release = make_release
        self.leased: Set[int] = set()   # slots whose Release has not been sent
        self.done = False              # the call ended: Releases are not read any more

    def send_release(self, slot: int, sequence: int) -> None:
        self.leased.discard(slot)
        if not self.done:
            self.requests.put(self.make_release(slot, sequence))


class SlotReturn:
    """Sends one slot's Release when it is collected (or when release() is
    called by the stream closing): the lease of a batch whose images are not
    a host array (DEVICE_MEMORY: conveyor/_device_array.py DeviceArray holds
    it, and so does every DLPack capsule or CUDA-array consumer of it)."""

    __slots__ = ("_book", "_slot", "_sequence", "_once", "__weakref__")

    def __init__(self, book: LeaseBook, slot: int, sequence: int):
        self._book = book
        self._slot = slot
        self._sequence = sequence
        self._once = threading.Lock()
        book.leased.add(slot)

    def release(self) -> None:
        if self._once.acquire(False):
            self._book.send_release(self._slot, self._sequence)

    def __del__(self) -> None:
        try:
            self.release()
        except Exception:  # interpreter shutdown
            pass


class SlotLease(SlotReturn):
    """The base object of one batch's images: exposes the slot's memory as
    an array interface and sends the Release when it is collected (or when
    release() is called by the stream closing)."""

    __slots__ = ("_backing", "_interface")

    def __init__(self, book: LeaseBook, slot: int, sequence: int, backing: np.ndarray):
        super().__init__(book, slot, sequence)
        self._backing = backing  # keeps the mapping / buffer itself alive
        self._interface: Dict[str, Any] = {
            "version": 3, "shape": backing.shape, "typestr": backing.dtype.str,
            "data": (backing.__array_interface__["data"][0], not backing.flags.writeable),
            "strides": None,
        }

    @property
    def __array_interface__(self) -> Dict[str, Any]:
        return self._interface


def leased_array(book: LeaseBook, slot: int, sequence: int, backing: np.ndarray) -> np.ndarray:
    """An array over `backing`'s memory (same shape and dtype, no copy)
    whose base is a new SlotLease of `slot`."""
    arr = np.asarray(SlotLease(book, slot, sequence, backing))
    assert arr.__array_interface__["data"][0] == backing.__array_interface__["data"][0]
    return arr
