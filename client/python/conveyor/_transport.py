"""How a stream's batch images reach the client: one transport object per
kind, chosen by the daemon's StreamOpened and made by open_transport().

  shared_memory  conveyor/_shm.py SharedRegion: the stream's memfd, handed
                 over on the daemon's fd socket and mapped once; images are
                 views of their slots
  data_socket    conveyor/_datasock.py DataSocket: a TCP (or TLS) connection
                 beside the gRPC call; images are read into a buffer per slot
  inline         conveyor/_inline.py InlineTransport: the bytes inside each
                 Batch message
  device_memory  conveyor/_device.py DeviceRegion: the daemon's ring of GPU
                 buffers, its fd handed over as the memfd is and imported
                 with the CUDA driver API (a memfd mapped under the daemon's
                 host model); images are DeviceArrays (CUDA Array
                 Interface, DLPack)
open_transport() dispatches on StreamOpened.details (its oneof).

Every transport has
  name           the kind, as above (Stream.transport)
  slot_backed    True when a batch's images live in its slot, which the
                 daemon (or the next batch of that slot) reuses after the
                 batch is released: the stream then checks images_bytes and
                 leases the slot under lifetime="safe"
  images(m, dtype, shape, nbytes)  the images of Batch message m (nbytes > 0)
  on_device      (device_memory only) True: dtype_of(enum) gives the images'
                 DeviceDType, images() takes the slot's lease
  close()        idempotent; images still viewed stay valid (the mapping and
                 the buffers live while views do)
A transport is used by the thread that iterates its stream.
"""

from typing import Any, Optional

from ._datasock import DataSocket
from ._device import DeviceRegion
from ._inline import InlineTransport
from ._security import Security
from ._shm import SharedRegion
from ._stubs import pb
from .errors import ConveyorError, FailedPrecondition

# The names a caller may ask for (open_stream's transport=) and those of
# StreamOpened.transport.
BY_NAME = {"auto": pb.TRANSPORT_AUTO, "shm": pb.SHARED_MEMORY, "shared_memory": pb.SHARED_MEMORY,
           "inline": pb.INLINE, "data_socket": pb.DATA_SOCKET,
           "device_memory": pb.DEVICE_MEMORY}
NAMES = {pb.TRANSPORT_AUTO: "auto", pb.SHARED_MEMORY: "shared_memory", pb.INLINE: "inline",
         pb.DATA_SOCKET: "data_socket", pb.DEVICE_MEMORY: "device_memory"}


def open_transport(opened: Any, *, data_host: Optional[str], security: Security,
                   timeout: float, registrar: Optional[Any] = None,
                   device_ordinal: Optional[int] = None) -> Any:
    """The transport StreamOpened `opened` chose, connected (the memfd
    received, the data socket's handshake done). data_host: where to reach
    the data socket (None: this client has none). registrar: page-lock a
    shared-memory region with it (pin_memory=True, conveyor/_pinning.py). device_ordinal: this
    process's CUDA device of a DEVICE_MEMORY stream (None: find it by the
    UUID the daemon names)."""
    details = opened.WhichOneof("details")
    if registrar is not None and details != "shared_memory":
        raise FailedPrecondition("pin_memory=True needs a shared_memory stream; the daemon chose %s "
                                 "(pin_memory applies to the memfd of a unix-socket stream)"
                                 % NAMES.get(opened.transport, details))
    if details == "shared_memory":
        shm = opened.shared_memory
        region = SharedRegion.receive(shm.fd_socket, opened.stream_id, shm.secret,
                                      shm.region_bytes, timeout=timeout)
        if registrar is not None:
            try:
                region.pin(registrar)
            except BaseException:
                region.close()
                raise
        return region
    if details == "data_socket":
        if data_host is None:
            raise ConveyorError("protocol error: DATA_SOCKET chosen but this client knows no "
                                "host for it (pass data_host, or ask for transport='inline')")
        return DataSocket(data_host, opened.data_socket.data_port, opened.stream_id,
                          opened.data_socket.secret,
                          timeout=timeout, ssl_context=security.data_socket_context(),
                          server_name=security.tls_server_name or data_host)
    if details == "inline_message":
        return InlineTransport()
    if details == "device_memory":
        return DeviceRegion.receive(opened.device_memory, opened.stream_id, device_ordinal,
                                    timeout=timeout)
    raise ConveyorError("protocol error: the daemon chose transport %r without its details (%r)"
                        % (opened.transport, details))
