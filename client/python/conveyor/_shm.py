"""Shared-memory transport: the memfd hand-over and the client's mapping.

receive_region_fd() performs the hand-over described in StreamOpened: connect
to the daemon's fd socket, send the 8-byte little-endian stream id and the
32-byte secret, and receive one status byte (0 = ok) that carries the region's
memfd as SCM_RIGHTS ancillary data (1 = refused: HandOverRefused, 2 = the
daemon is out of fds for the moment: Unavailable, which a RetryPolicy
retries). The daemon drops a stream's entry when the stream ends, so a
stream that failed before its client fetched the memfd is refused here: the
stream (conveyor/_stream.py) then reports the call's own error instead.

SharedRegion maps the whole region once (MAP_SHARED) and hands out numpy views
of it; it is the shared-memory transport of a stream (conveyor/_transport.py:
name, slot_backed, images(), close()). It owns the mapping: close() (or leaving a `with` block, or garbage
collection) unmaps it - unless numpy views of it are still alive, in which
case the mapping stays until the last view is gone (Python's mmap refuses to
unmap exported buffers, so a stale view can never touch unmapped memory).

pin(registrar) page-locks the whole mapping once for this process's CUDA
context (pin_memory=True, conveyor/_pinning.py); close() unregisters it
before unmapping.
"""

import mmap
import os
import socket
import struct

import numpy as np

from ._closing import ClosesOnExit
from .errors import ConveyorError, Unavailable

SECRET_BYTES = 32


class HandOverRefused(ConveyorError):
    """The daemon refused the fd hand-over (status 1): no such stream (any
    more), a wrong secret, or another user's stream."""


def receive_region_fd(fd_socket, stream_id, secret, timeout=10.0):
    """Returns the memfd of stream `stream_id` (an int the caller must close)."""
    if len(secret) != SECRET_BYTES:
        raise ConveyorError("daemon sent a %d-byte secret, expected %d" % (len(secret), SECRET_BYTES))
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        try:
            sock.connect(fd_socket)
        except OSError as e:
            raise Unavailable("cannot connect to the daemon's fd socket %s: %s" % (fd_socket, e)) from e
        try:
            sock.sendall(struct.pack("<Q", stream_id) + bytes(secret))
            msg, fds, _flags, _addr = socket.recv_fds(sock, 1, 4)
        except OSError as e:
            raise Unavailable("fd hand-over on %s failed: %s" % (fd_socket, e)) from e
    finally:
        sock.close()
    status = msg[0] if msg else None
    if status != 0 or len(fds) != 1:
        for fd in fds:
            os.close(fd)
        if status is None:
            raise ConveyorError("fd hand-over on %s: the daemon closed the connection" % fd_socket)
        if status == 2:
            raise Unavailable("fd hand-over on %s: the daemon is out of resources (file "
                              "descriptors); retry" % fd_socket)
        if status != 0:
            raise HandOverRefused("fd hand-over on %s refused by the daemon (status %d)"
                                  % (fd_socket, status))
        raise ConveyorError("fd hand-over on %s: expected 1 fd, got %d" % (fd_socket, len(fds)))
    return fds[0]


class SharedRegion(ClosesOnExit):
    """One stream's slot region, mapped once.

    The mapping is read-write (PROT_READ | PROT_WRITE, MAP_SHARED) so that
    numpy views are writable and torch.from_numpy shares them without a
    warning. Writes land in the daemon's slot: treat batches as read-only
    unless you know the slot is yours (it is, until you release the batch).
    If the daemon sealed the memfd against writing, the mapping falls back to
    read-only.
    """

    name = "shared_memory"
    slot_backed = True  # a batch's images are its slot: reused after release

    def __init__(self, fd, size):
        self.size = int(size)
        self._pinned = None  # (registrar, address) while page-locked
        try:
            self._mm = mmap.mmap(fd, self.size, flags=mmap.MAP_SHARED,
                                 prot=mmap.PROT_READ | mmap.PROT_WRITE)
            self.writable = True
        except PermissionError:
            self._mm = mmap.mmap(fd, self.size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
            self.writable = False

    @classmethod
    def receive(cls, fd_socket, stream_id, secret, size, timeout=10.0):
        """Receives the memfd, maps it and closes the fd (the mapping stays)."""
        fd = receive_region_fd(fd_socket, stream_id, secret, timeout)
        try:
            st = os.fstat(fd)
            if st.st_size < size:
                raise ConveyorError("memfd holds %d bytes, the daemon announced %d" % (st.st_size, size))
            return cls(fd, size)
        finally:
            os.close(fd)

    def view(self, offset, nbytes, dtype, shape):
        """A numpy array over [offset, offset + nbytes) of the region; no copy."""
        if self._mm is None:
            raise ConveyorError("the shared region is closed")
        dtype = np.dtype(dtype)
        count = nbytes // dtype.itemsize
        if offset + nbytes > self.size:
            raise ConveyorError("batch at [%d, %d) lies outside the %d-byte region"
                                % (offset, offset + nbytes, self.size))
        arr = np.frombuffer(self._mm, dtype=dtype, count=count, offset=offset)
        return arr.reshape(shape)

    def images(self, m, dtype, shape, nbytes):
        """The images of Batch message `m`: a view of its slot, no copy."""
        return self.view(m.images_offset, nbytes, dtype, shape)

    @property
    def address(self):
        """The mapping's first byte, as an integer."""
        if self._mm is None:
            raise ConveyorError("the shared region is closed")
        return int(np.frombuffer(self._mm, dtype=np.uint8, count=1).ctypes.data)

    @property
    def pinned(self):
        return self._pinned is not None

    def pin(self, registrar):
        """Page-locks the whole mapping once (idempotent)."""
        if self._pinned is not None:
            return
        ptr = self.address
        registrar.register(ptr, self.size, self.writable)
        self._pinned = (registrar, ptr)

    @property
    def closed(self):
        return self._mm is None

    def close(self):
        mm, self._mm = self._mm, None
        if mm is None:
            return
        pinned, self._pinned = self._pinned, None
        if pinned is not None:
            registrar, ptr = pinned
            registrar.unregister(ptr)  # before the mapping goes
        try:
            mm.close()
        except BufferError:
            # Views are still alive: the mapping goes when the last one does.
            pass
