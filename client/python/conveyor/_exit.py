"""Closes the client's live streams and loaders when the interpreter exits
(atexit), while gRPC's threads still run.

Why: gRPC's Python call and channel objects take a lock of their own in
their finalizers, and gRPC's threads are daemon threads. Collected during
interpreter shutdown, when those threads are frozen wherever they were
(maybe holding that lock), such a finalizer waited forever: a script that
kept a stream or a batch in a global hung at exit. atexit handlers run
before that point, so everything tracked here is closed (calls cancelled,
channels closed, references to gRPC's objects dropped) while gRPC can still
finish its work.

Thread-safety: track() may be called from any thread.
"""

from __future__ import annotations

import atexit
import threading
import weakref
from typing import Any

_lock = threading.Lock()
_live: "weakref.WeakSet[Any]" = weakref.WeakSet()


def track(obj: Any) -> None:
    """Closes `obj` (its close(); streams before loaders, by the class
    attribute _exit_order) at interpreter exit unless it is gone by then."""
    with _lock:
        _live.add(obj)


def _close_all() -> None:
    with _lock:
        objs = list(_live)
    for obj in sorted(objs, key=lambda o: getattr(o, "_exit_order", 0)):
        try:
            obj.close()
        except Exception:  # exiting anyway: the kernel closes what is left
            pass


def after_fork() -> "list[Any]":
    """In a forked child (conveyor/_fork.py): a new lock (the parent's may
    have been held by another thread at the fork) and the objects inherited,
    which the child detaches rather than closes."""
    global _lock
    _lock = threading.Lock()
    return list(_live)


atexit.register(_close_all)
