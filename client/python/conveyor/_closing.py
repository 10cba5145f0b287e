"""ClosesOnExit: the one lifetime rule of the client's resources (streams,
retrying streams, shared regions): close() when a `with` block ends and when
the object is garbage-collected, never raising from the collector.

Not while the interpreter shuts down: by then gRPC's daemon threads are
frozen wherever they were, maybe holding a call's lock, and cancelling a
call from a finalizer could wait for that lock forever. Streams and loaders
still open then were closed by the atexit handler of conveyor/_exit.py;
whatever is left, the kernel closes with the process, and the daemon frees
a stream when its connection goes."""

import sys


class ClosesOnExit:
    """Mix-in for classes with an idempotent close()."""

    def close(self):
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if sys.is_finalizing():
            return
        try:
            self.close()
        except Exception:  # a half-built object, or interpreter shutdown
            pass
