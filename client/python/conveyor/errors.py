"""Exceptions of the conveyor client.

Every error the client raises is a ConveyorError. Errors that come from the
daemon as a gRPC status are mapped to a subclass by status code, and keep the
daemon's message (which says what to fix):

    INVALID_ARGUMENT, OUT_OF_RANGE                        -> InvalidRequest
    FAILED_PRECONDITION                                   -> FailedPrecondition
                                                             (an InvalidRequest)
    NOT_FOUND                                             -> NotFound
    RESOURCE_EXHAUSTED                                    -> ResourceExhausted
    DATA_LOSS                                             -> DataError
    UNAVAILABLE (and failures to connect)                 -> Unavailable
    anything else                                         -> ConveyorError

A message from the daemon that this client cannot parse (gRPC reports it as
INTERNAL "Exception deserializing response!", e.g. a string field that is
not valid UTF-8, or a daemon of another protocol version) or a batch whose
fields do not fit together is a ProtocolError: the call cannot go on, but
the client raises it as any other ConveyorError instead of dying.

`error.code` is the grpc.StatusCode (None for errors raised by the client
itself) and `error.details` the daemon's text.
"""

from typing import Any, Optional

import grpc


class ConveyorError(Exception):
    """Base class of every error raised by the conveyor client."""

    def __init__(self, message: str, code: Any = None, details: Optional[str] = None) -> None:
        super().__init__(message)
        self.code = code
        self.details = details if details is not None else message


class InvalidRequest(ConveyorError):
    """The request is wrong (a field, a resume position, or a transport this
    connection cannot carry). Do not retry: fix the request."""


class FailedPrecondition(InvalidRequest):
    """The daemon cannot serve this request as things are on its host (e.g.
    a DEVICE_MEMORY stream on a host without a usable GPU: the message says
    why). Also raised by the client when this process lacks what a request
    needs (device=, pin_memory=True without PyTorch/CUDA). Do not retry
    as is: fix the setup or ask for another transport."""


class NotFound(ConveyorError):
    """The daemon has no pipeline of that name."""


class ResourceExhausted(ConveyorError):
    """The daemon's limits (slot memory, streams) are reached; retry later."""


class DataError(ConveyorError):
    """The stream failed on bad samples (the pipeline's error policy)."""


class Unavailable(ConveyorError):
    """The daemon cannot be reached or is shutting down."""


class AccessDenied(ConveyorError):
    """The daemon refused this client: no valid credentials (UNAUTHENTICATED:
    a bearer token or client certificate is missing or wrong), or valid ones
    that do not allow this (PERMISSION_DENIED: a pipeline the token may not
    open). Do not retry: fix the credentials."""


class ProtocolError(ConveyorError):
    """The daemon sent a message this client cannot parse or use (invalid
    UTF-8 in a string field, a field out of range, another protocol version).
    Not retried: report it, with the daemon's version and log."""


class BatchReleasedError(ConveyorError, RuntimeError):
    """A released batch's images were accessed: its slot belongs to the daemon
    again and may already hold another batch. Use Batch.copy() to keep data."""


_BY_CODE = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidRequest,
    grpc.StatusCode.OUT_OF_RANGE: InvalidRequest,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
    grpc.StatusCode.DATA_LOSS: DataError,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.UNAUTHENTICATED: AccessDenied,
    grpc.StatusCode.PERMISSION_DENIED: AccessDenied,
}


# What grpcio's channel reports when a response fails to deserialize.
_DESERIALIZE_FAILED = "Exception deserializing response!"


def from_rpc_error(error: Any, what: str = "request") -> ConveyorError:
    """Maps a grpc.RpcError (a failed call) to the matching ConveyorError."""
    code = error.code() if hasattr(error, "code") else None
    details = error.details() if hasattr(error, "details") else None
    details = details or str(error)
    if code == grpc.StatusCode.INTERNAL and details == _DESERIALIZE_FAILED:
        return ProtocolError(
            "%s failed: the daemon sent a message this client cannot parse (invalid UTF-8 in a "
            "string field, or a daemon of another protocol version); the call was ended "
            "(gRPC: INTERNAL: %s)" % (what, details), code=code, details=details)
    cls = _BY_CODE.get(code, ConveyorError)
    name = code.name if code is not None else "ERROR"
    return cls("%s failed: %s: %s" % (what, name, details), code=code, details=details)
