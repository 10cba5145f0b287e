"""A file whose reads never return, for tests of stuck I/O (a hung network
filesystem, a dying disk): a tiny FUSE filesystem served by a thread of the
test process, speaking the kernel's protocol on /dev/fuse directly (no
libfuse, no fusermount). It holds one regular file; lookups, attributes and
opens are answered, every READ is left unanswered, so the reader sits in
pread(2) as on a hung hard NFS mount: nothing but its process's death (the
kernel's INTERRUPT on a fatal signal, answered EINTR) gets it out.

    with StuckFile(mountpoint, "stuck.jpg", size=4096) as fs:
        ...                        # mountpoint/stuck.jpg: open and fstat work
        fs.wait_for_read(timeout)  # True once someone is stuck reading it

Needs root (mount(2) of type fuse) and /dev/fuse; `available()` says why
not otherwise. Leaving the block fails every unanswered read with EIO,
unmounts (lazily) and closes the device. Only what a reader of one
file needs is implemented: other requests are answered ENOSYS.
"""

import ctypes
import errno
import os
import stat
import struct
import threading

# Opcodes of the FUSE protocol (linux/fuse.h).
LOOKUP, FORGET, GETATTR, OPEN, READ, RELEASE, FLUSH, INIT = 1, 2, 3, 14, 15, 18, 25, 26
INTERRUPT, DESTROY, BATCH_FORGET = 36, 38, 42
NO_REPLY = {FORGET, BATCH_FORGET}

IN_HEADER = struct.Struct("=IIQQIIIHH")  # len, opcode, unique, nodeid, uid, gid, pid, extlen, pad
OUT_HEADER = struct.Struct("=IiQ")       # len, error, unique
ROOT_ID, FILE_ID = 1, 2
MNT_DETACH = 2

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]


def available():
    """None when a StuckFile can be mounted here, else why not."""
    if os.geteuid() != 0:
        return "needs root: mounting a FUSE filesystem"
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse"
    return None


def _attr(node, size):
    """fuse_attr: ino, size, blocks, atime, mtime, ctime, their nsecs, mode,
    nlink, uid, gid, rdev, blksize, flags."""
    mode = (stat.S_IFDIR | 0o755) if node == ROOT_ID else (stat.S_IFREG | 0o644)
    return struct.pack("=QQQQQQIIIIIIIIII", node, size if node == FILE_ID else 0,
                       (size + 511) // 512, 0, 0, 0, 0, 0, 0, mode, 1, 0, 0, 0, 4096, 0)


class StuckFile:
    def __init__(self, mountpoint, name, size=4096):
        self.mountpoint = os.fspath(mountpoint)
        self.name = os.fsencode(name)
        self.size = size
        self._fd = -1
        self._thread = None
        self._stuck_reads = []  # unique ids of the READs left unanswered
        self._cv = threading.Condition()
        self._closing = False
        self.interrupted = 0  # stuck reads given up by their reader's death

    def __enter__(self):
        why = available()
        if why:
            raise OSError(errno.EPERM, why)
        self._fd = os.open("/dev/fuse", os.O_RDWR | os.O_CLOEXEC)
        opts = "fd=%d,rootmode=40000,user_id=0,group_id=0,allow_other" % self._fd
        if _libc.mount(b"conveyor-stuck", os.fsencode(self.mountpoint), b"fuse", 0,
                       opts.encode()) != 0:
            err = ctypes.get_errno()
            os.close(self._fd)
            raise OSError(err, "mount fuse on %s: %s" % (self.mountpoint, os.strerror(err)))
        self._thread = threading.Thread(target=self._serve, name="stuck-fuse", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        with self._cv:  # whoever still waits gets EIO
            pending, self._stuck_reads = self._stuck_reads, []
            self._closing = True
        for unique in pending:
            try:
                self._reply(unique, errno.EIO)
            except OSError:
                pass
        _libc.umount2(os.fsencode(self.mountpoint), MNT_DETACH)
        os.close(self._fd)
        self._thread.join(timeout=5)

    def wait_for_read(self, timeout):
        """True once a READ of the file is waiting for its answer."""
        with self._cv:
            return bool(self._cv.wait_for(lambda: self._stuck_reads, timeout))

    def _reply(self, unique, error=0, body=b""):
        os.write(self._fd, OUT_HEADER.pack(OUT_HEADER.size + len(body), -error, unique) + body)

    def _serve(self):
        while True:
            try:
                req = os.read(self._fd, 1 << 20 | 4096)
            except OSError as e:
                if e.errno in (errno.EINTR, errno.ENOENT):  # ENOENT: request interrupted
                    continue
                return  # ENODEV once unmounted, EBADF once closed
            _, opcode, unique, node, *_ = IN_HEADER.unpack_from(req)
            arg = req[IN_HEADER.size:]
            try:
                self._handle(opcode, unique, node, arg)
            except OSError:
                return

    def _handle(self, opcode, unique, node, arg):
        if opcode in NO_REPLY:
            return
        if opcode == INIT:
            _, minor = struct.unpack_from("=II", arg)
            # fuse_init_out: major, minor, max_readahead, flags, max_background,
            # congestion_threshold, max_write, time_gran, max_pages,
            # map_alignment, flags2, unused[7].
            body = struct.pack("=IIIIHHIIHHI7I", 7, min(minor, 31), 0, 0, 16, 12, 1 << 20, 1,
                               0, 0, 0, *([0] * 7))
            self._reply(unique, body=body)
        elif opcode == LOOKUP:
            if node == ROOT_ID and arg.rstrip(b"\0") == self.name:
                # fuse_entry_out: nodeid, generation, entry/attr valid (s, ns), attr.
                self._reply(unique, body=struct.pack("=QQQQII", FILE_ID, 0, 60, 60, 0, 0) +
                            _attr(FILE_ID, self.size))
            else:
                self._reply(unique, errno.ENOENT)
        elif opcode == GETATTR:
            self._reply(unique, body=struct.pack("=QII", 60, 0, 0) + _attr(node, self.size))
        elif opcode == OPEN:
            self._reply(unique, body=struct.pack("=QII", 1, 0, 0))  # fh 1, no flags
        elif opcode == READ:
            with self._cv:  # never answered: the reader is stuck
                if self._closing:
                    self._reply(unique, errno.EIO)
                    return
                self._stuck_reads.append(unique)
                self._cv.notify_all()
        elif opcode == INTERRUPT:
            # The kernel asks on behalf of a reader with a signal: a fatal
            # one, since no other reaches the daemon's workers (it blocks them
            # all). Like a hard NFS mount, the hung read gives way to SIGKILL
            # and exit, to nothing else. (No reply to INTERRUPT itself.)
            (target,) = struct.unpack_from("=Q", arg)
            with self._cv:
                if target not in self._stuck_reads:
                    return
                self._stuck_reads.remove(target)
                self.interrupted += 1
            self._reply(target, errno.EINTR)
        elif opcode in (FLUSH, RELEASE):
            self._reply(unique)
        elif opcode == DESTROY:
            self._reply(unique)
        else:
            self._reply(unique, errno.ENOSYS)
