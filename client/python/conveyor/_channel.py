"""The daemon's address and gRPC channel, and its one-shot calls
(ListPipelines, GetStats).

Addresses: "unix:///path.sock", "unix:path", an absolute socket path, or
"host:port"; default_address() is $CONVEYOR_SERVER, else the node's default
socket. Channels carry 1 GiB message limits (inline batches travel in one
message) and the client's Security (TLS for TCP, the bearer token).
Functions only; a grpc.Channel is thread-safe.
"""

from __future__ import annotations

import os
from typing import Any, List, Optional, Sequence, Tuple, Union

import grpc

from . import _fork
from ._security import Security
from ._stubs import pb, pb_grpc
from .errors import InvalidRequest, from_rpc_error

MAX_MESSAGE_BYTES = 1 << 30  # 1 GiB: inline batches travel in one message
DEFAULT_ADDRESS = "unix:///run/conveyor/conveyor.sock"


def default_address() -> str:
    """$CONVEYOR_SERVER, else the daemon's default unix socket."""
    return os.environ.get("CONVEYOR_SERVER") or DEFAULT_ADDRESS


def grpc_target(address: str) -> str:
    """The gRPC target for an address: "unix:///path.sock", "unix:path",
    an absolute socket path, or "host:port"."""
    if not address:
        raise InvalidRequest("empty server address")
    if address.startswith("/"):
        return "unix://" + address
    return address


def make_channel(address: str, options: Sequence[Tuple[str, Any]] = (),
                 security: Optional[Security] = None) -> grpc.Channel:
    """A gRPC channel to the daemon with 1 GiB message limits. `security`
    (a conveyor.Security; default Security.from_env()): TLS for TCP
    addresses when it names a CA, its bearer token on every call.
    In a forked child where gRPC is not safe (conveyor/_fork.py) it raises
    FailedPrecondition, naming the "spawn" / "forkserver" contexts."""
    _fork.child_may_use_grpc()
    _fork.note_channel()
    opts = [("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES)]
    opts.extend(options)
    if security is None:
        security = Security.from_env()
    return security.channel(grpc_target(address), opts)


def stub_for(channel_or_address: Union[str, grpc.Channel],
             security: Optional[Security] = None) -> Tuple[grpc.Channel, Any, bool]:
    """(channel, Conveyor stub, whether the caller owns the channel and must
    close it): a new channel for an address, else the channel given."""
    if isinstance(channel_or_address, str):
        ch = make_channel(channel_or_address, security=security)
        return ch, pb_grpc.ConveyorStub(ch), True
    return channel_or_address, pb_grpc.ConveyorStub(channel_or_address), False


def list_pipelines(address: Union[str, grpc.Channel, None] = None, timeout: float = 10.0,
                   security: Optional[Security] = None) -> List[Any]:
    """The daemon's pipelines (those this client may open): a list of
    conveyor_pb2.PipelineInfo."""
    ch, stub, owned = stub_for(address or default_address(), security)
    try:
        return list(stub.ListPipelines(pb.ListPipelinesRequest(), timeout=timeout).pipelines)
    except grpc.RpcError as e:
        raise from_rpc_error(e, "ListPipelines") from None
    finally:
        if owned:
            ch.close()


def stats(address: Union[str, grpc.Channel, None] = None, timeout: float = 10.0,
          security: Optional[Security] = None) -> Any:
    """The daemon's per-stage and per-stream figures: conveyor_pb2.GetStatsResponse."""
    ch, stub, owned = stub_for(address or default_address(), security)
    try:
        return stub.GetStats(pb.GetStatsRequest(), timeout=timeout)
    except grpc.RpcError as e:
        raise from_rpc_error(e, "GetStats") from None
    finally:
        if owned:
            ch.close()
