"""conveyor: the Python client of conveyord, Conveyor's per-node data-loading daemon.

    import conveyor
    loader = conveyor.Loader("unix:///run/conveyor/conveyor.sock", pipeline="imagenet-train",
                             batch_size=256, seed=0)        # rank/world_size from $RANK/$WORLD_SIZE
    for batch in loader.epoch(0):
        x = torch.from_numpy(batch.images)   # zero-copy view of the daemon's shared memory
        y = torch.from_numpy(batch.labels)   # (kept tensors keep their slot: lifetime="safe")

A pipeline that declares sample fields (a caption, JSON metadata, the
sample's key) gives them as batch.fields: batch.fields["caption"][0] is the
first sample's caption (conveyor._fields).

See conveyor.loader for the stream, release and lifetime rules, conveyor.torch
for the PyTorch adapters (imported on its own: it needs torch), conveyor.retry for the
opt-in reconnection to a restarted daemon (RetryPolicy), conveyor.errors for
the exceptions. The CLI is `python3 -m conveyor --help`.
"""

from ._fork import prepare_grpc_import as _prepare_grpc_import
from ._stub_path import extend as _extend_path

# gRPC's fork support (GRPC_ENABLE_FORK_SUPPORT=1) before grpc is first
# imported: a forked DataLoader worker can then open streams of its own
# while the parent's are open (conveyor/_fork.py).
_prepare_grpc_import()

# The generated gRPC stubs (conveyor._proto) are in the package once it is
# installed, and in the build tree in a source checkout: conveyor/_stub_path.py.
__path__ = _extend_path(__path__, __name__)

from .errors import (AccessDenied, BatchReleasedError, ConveyorError, DataError,
                     FailedPrecondition, InvalidRequest, NotFound, ProtocolError, ResourceExhausted, Unavailable)
from .loader import (Batch, Loader, SampleFailure, Stream, default_address, list_pipelines,
                     make_channel, open_stream, stats)
from .retry import RetryingStream, RetryPolicy
from ._pool import PoolOptions, PoolStream
from ._device_array import DeviceArray
from ._device_feed import DeviceBatch, DeviceStream
from ._fields import FieldColumn
from ._security import Security

__version__ = "0.1.0"

__all__ = [
    "AccessDenied", "Batch", "BatchReleasedError", "ConveyorError", "DataError", "DeviceArray", "DeviceBatch",
    "DeviceStream", "FailedPrecondition", "FieldColumn",
    "InvalidRequest", "Loader",
    "NotFound", "PoolOptions", "PoolStream", "ProtocolError", "ResourceExhausted", "RetryPolicy", "RetryingStream", "SampleFailure", "Security", "Stream",
    "Unavailable", "default_address", "list_pipelines", "make_channel", "open_stream", "stats",
]
