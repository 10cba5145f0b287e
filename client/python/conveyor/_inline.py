"""Inline transport: the image bytes of INLINE streams travel inside each
Batch message (a client that cannot map the daemon's memory nor reach its
data socket). One of the stream transports of conveyor/_transport.py.

The images are a read-only numpy view of the message's bytes: the batch
owns them (no slot behind them), so releasing the batch never invalidates
them; `batch.copy()` gives a writable array. Stateless: thread-safe.
"""

import numpy as np

from .errors import ConveyorError


class InlineTransport:
    name = "inline"
    slot_backed = False  # the bytes are the message's own, not a reused slot

    def images(self, m, dtype, shape, nbytes):
        """The images of Batch message `m`, viewed in its `images` bytes."""
        data = m.images  # each read of a bytes field copies it: read it once
        if len(data) != nbytes:
            raise ConveyorError("batch %d: %d inline bytes do not match shape %s of %s"
                                % (m.sequence, len(data), shape, dtype))
        return np.frombuffer(data, dtype=dtype).reshape(shape)

    def close(self):
        pass
