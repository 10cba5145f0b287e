"""ClosesOnExit: the one lifetime rule of the client's resources (streams,
retrying streams, shared regions): close() when a `with` block ends and when
the object is garbage-collected, never raising from the collector."""


class ClosesOnExit:
    """Mix-in for classes with an idempotent close()."""

    def close(self):
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # a half-built object, or interpreter shutdown
            pass
