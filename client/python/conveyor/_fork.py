"""Fork safety of the client: what a forked child (a torch DataLoader worker
under the default "fork" context, multiprocessing, os.fork) may do with the
gRPC state it inherited, and what it may not.

gRPC's C core runs threads of its own. A process forked while a stream is
open (a TorchLoader mid-epoch while a validation DataLoader starts its
workers) inherits that core's memory - locks held by threads that do not
exist in the child, the poller's epoll fd shared with the parent - and
any gRPC call in the child can then hang or crash (Debian's grpcio 1.51:
most tries hang). gRPC's fork support (GRPC_ENABLE_FORK_SUPPORT=1, with
the default "epoll1" or the "poll" poller; grpc's doc/fork_support.md)
fixes exactly that: its fork handlers pause gRPC's threads around fork()
and reset the core in the child, whose new channels then work.

So, in this order:
  * prepare_grpc_import() (conveyor/__init__.py, before the package first
    imports grpc) sets GRPC_ENABLE_FORK_SUPPORT=1 unless the environment
    names a value already or grpc is imported already (then its choice
    stands: see fork_support_active()).
  * os.register_at_fork(after_in_child=...) detaches, in the child, every
    stream and loader it inherited (conveyor/_exit.py knows them all): their
    calls, channels and transports are kept referenced and never closed nor
    collected there (closing an inherited call in the child can hang; a
    data socket's shutdown would end the parent's connection), their locks
    are new. The parent's objects are untouched.
  * child_may_use_grpc() (Loader and Stream call it before opening a
    channel): in a child of a process that had conveyor connections open,
    raises FailedPrecondition at once, naming
    multiprocessing_context="spawn" / "forkserver", when gRPC's fork support
    is not active in this process (or its fork handler failed) - instead of
    the hang. When it may, the child is armed to die with its parent
    (PR_SET_PDEATHSIG; a watch thread where prctl is missing): a worker
    whose trainer was killed never stays behind.

Shared memory stays correct in the child: mappings inherited from the
parent are MAP_SHARED views of the parent's slots, left as they are (the
child's own streams get memfds of their own from the daemon).

Thread-safety: the at-fork hook runs in the single thread of a new child;
the other functions may be called from any thread.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from typing import Any, List, Optional

ENV = "GRPC_ENABLE_FORK_SUPPORT"
_TRUE = ("1", "true", "yes", "on")
_POLLERS = ("", "epoll1", "poll")  # the pollers gRPC's fork support works with

# The pid of the last process that opened a conveyor channel (0: none yet).
# A child sees its parent's value: the parent had gRPC connections open.
_grpc_user_pid = 0
# Set in a child whose parent had gRPC connections open: that parent's pid.
_forked_from = 0
# What the at-fork hook detached: referenced forever, so that their
# finalizers never run in the child.
_INHERITED: List[Any] = []
_set_by_conveyor = False  # prepare_grpc_import set ENV itself
_armed_pid = 0            # the process whose parent-death signal is armed
_lock = threading.Lock()


def prepare_grpc_import() -> None:
    """Before grpc is first imported: ask for gRPC's fork support unless
    the user said otherwise (or imported grpc already: too late)."""
    global _set_by_conveyor
    if "grpc" in sys.modules or ENV in os.environ:
        return
    os.environ[ENV] = "1"
    _set_by_conveyor = True


def set_by_conveyor() -> bool:
    """True when this process's GRPC_ENABLE_FORK_SUPPORT is conveyor's own
    setting (the launcher does not pass it on to conveyord)."""
    return _set_by_conveyor and os.environ.get(ENV) == "1"


def fork_support_active() -> bool:
    """Whether gRPC's fork handlers run in this process: grpc's own flag
    (read when grpc was imported) and a poller they work with."""
    try:
        from grpc._cython import cygrpc  # noqa: PLC0415
        enabled = bool(cygrpc.is_fork_support_enabled())
    except (ImportError, AttributeError):
        enabled = os.environ.get(ENV, "").strip().lower() in _TRUE
    poller = os.environ.get("GRPC_POLL_STRATEGY", "").strip().lower()
    return enabled and poller in _POLLERS


def _fork_handler_failed() -> bool:
    """gRPC could not pause its threads before this fork (its handler says
    so): the child's gRPC state is undefined."""
    try:
        from grpc._cython import cygrpc  # noqa: PLC0415
        return bool(getattr(cygrpc, "_fork_handler_failed", False))
    except ImportError:
        return False


def note_channel() -> None:
    """A conveyor channel is being made in this process."""
    global _grpc_user_pid
    _grpc_user_pid = os.getpid()


def forked_from() -> int:
    """The parent's pid when this process is a fork of one that had conveyor
    connections open; 0 otherwise."""
    return _forked_from if _forked_from and os.getpid() != _forked_from else 0


def child_may_use_grpc() -> None:
    """Raises FailedPrecondition in a child where gRPC is not safe (see the
    module docstring); otherwise arms the child to die with its parent."""
    parent = forked_from()
    if not parent:
        return
    if not fork_support_active() or _fork_handler_failed():
        from .errors import FailedPrecondition  # noqa: PLC0415
        why = ("gRPC's fork handler could not pause its threads before the fork"
               if fork_support_active() else
               "gRPC's fork support is off in this process (%s)" % _why_off())
        raise FailedPrecondition(
            "conveyor: this process (pid %d) is a fork of pid %d, which had conveyor streams or "
            "channels open, and %s: gRPC cannot be used safely here (it can hang). Start "
            "DataLoader workers with multiprocessing_context=\"spawn\" or \"forkserver\" "
            "(torch.utils.data.DataLoader(..., multiprocessing_context=\"spawn\")), or let "
            "conveyor enable gRPC's fork support: import conveyor before anything imports grpc, "
            "or set %s=1 in the environment" % (os.getpid(), parent, why, ENV))
    _die_with_parent(parent)


def _why_off() -> str:
    value = os.environ.get(ENV)
    poller = os.environ.get("GRPC_POLL_STRATEGY", "")
    if poller.strip().lower() not in _POLLERS:
        return "GRPC_POLL_STRATEGY=%s; fork support needs epoll1 or poll" % poller
    if value is not None and value.strip().lower() not in _TRUE:
        return "%s=%s" % (ENV, value)
    return "grpc was imported before conveyor without %s=1" % ENV


def _die_with_parent(parent: int) -> None:
    """The kernel kills this process when its parent dies (Linux); where
    prctl is missing, a daemon thread checks the parent every 0.2 s."""
    global _armed_pid
    with _lock:
        if _armed_pid == os.getpid():
            return
        _armed_pid = os.getpid()
    armed = False
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            PR_SET_PDEATHSIG = 1
            armed = libc.prctl(PR_SET_PDEATHSIG, 9, 0, 0, 0) == 0  # SIGKILL
        except (OSError, AttributeError):
            armed = False
    if os.getppid() != parent:  # it died before the signal was armed
        os._exit(1)
    if not armed:
        def watch() -> None:
            import time  # noqa: PLC0415
            while os.getppid() == parent:
                time.sleep(0.2)
            os._exit(1)
        threading.Thread(target=watch, name="conveyor-parent-watch", daemon=True).start()


def keep(*objs: Optional[Any]) -> None:
    """Keeps inherited gRPC objects (calls, channels, transports) referenced
    in the child for good: never closed there, never collected."""
    _INHERITED.extend(o for o in objs if o is not None)


def _after_fork_in_child() -> None:
    global _forked_from, _lock, _armed_pid
    _lock = threading.Lock()
    _armed_pid = 0
    if _grpc_user_pid:
        _forked_from = _grpc_user_pid
    from . import _exit  # noqa: PLC0415
    for obj in _exit.after_fork():
        detach = getattr(obj, "_detach_after_fork", None)
        if detach is not None:
            try:
                detach()
            except Exception:  # never fail a fork over an object half made
                pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
