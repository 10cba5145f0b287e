"""Data-socket transport: the image bytes of DATA_SOCKET streams (TCP).

The daemon sends each batch's header (labels, shape, slot) over gRPC and the
batch's images on a plain TCP connection (see DataSocketOpened in
conveyor.proto): connect to the daemon's host at `data_port`, send the 8-byte
little-endian stream id and the 32-byte secret, read one status byte (0 = ok).
Then, for every Batch message in order, exactly `images_bytes` bytes follow.
With a TLS daemon (listen.tls) the connection is TLS first, checked against
the same CA as the gRPC channel.

DataSocket reads them straight into one numpy buffer per slot (no copy in
Python, no gRPC message assembly): the buffer of a slot is reused for the
next batch in that slot, which the daemon sends only after the client
released the previous one - the same rule as for shared-memory views. It is
the data-socket transport of a stream (conveyor/_transport.py: name,
slot_backed, images(), close()).
"""

import socket
import ssl
import struct

import numpy as np

from .errors import ConveyorError, Unavailable

SECRET_BYTES = 32

# Under TLS 1.3 the daemon checks the client's certificate after the client
# thinks the handshake is done: a refusal shows as the connection ending.
_TLS_HINT = (" (a TLS daemon that requires client certificates ends the connection when"
             " client_cert/client_key are missing or not signed by its client CA)")


def tcp_host(address):
    """The host of a TCP gRPC address ("host:port", "[v6]:port",
    "dns:///host:port", "ipv4:a.b.c.d:port", "ipv6:[v6]:port"), or None for a
    unix socket address."""
    if not isinstance(address, str) or not address:
        return None
    if address.startswith("/") or address.startswith("unix:") or address.startswith("unix-abstract:"):
        return None
    for prefix in ("dns:///", "dns:", "ipv4:", "ipv6:"):
        if address.startswith(prefix):
            address = address[len(prefix):]
            break
    address = address.split(",")[0]  # ipv4:a:p,b:p lists several: the first one
    host = address.rsplit(":", 1)[0] if ":" in address else address
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host or None


class DataSocket:
    """The connection of one DATA_SOCKET stream. Not thread-safe: the thread
    iterating the stream reads it."""

    name = "data_socket"
    slot_backed = True  # a batch's images live in its slot's buffer, reused after release

    def __init__(self, host, port, stream_id, secret, *, timeout=10.0, read_timeout=120.0,
                 ssl_context=None, server_name=None):
        if len(secret) != SECRET_BYTES:
            raise ConveyorError("daemon sent a %d-byte secret, expected %d" % (len(secret), SECRET_BYTES))
        self.where = "%s:%d" % (host, port)
        self._buffers = {}  # slot -> np.ndarray (uint8)
        try:
            sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as e:
            raise Unavailable("cannot connect to the daemon's data socket %s: %s" % (self.where, e)) from e
        if ssl_context is not None:
            # A TLS daemon's data socket speaks TLS too, with the gRPC
            # listener's certificate.
            try:
                sock = ssl_context.wrap_socket(sock, server_hostname=server_name or host)
            except (OSError, ssl.SSLError) as e:
                sock.close()
                raise Unavailable("data socket %s: TLS handshake failed: %s" % (self.where, e)) from e
        self._sock = sock
        try:
            self._sock.sendall(struct.pack("<Q", stream_id) + bytes(secret))
            status = self._sock.recv(1)
        except OSError as e:
            self._sock.close()
            raise Unavailable("data socket %s: handshake failed: %s%s"
                              % (self.where, e, _TLS_HINT if ssl_context is not None else "")) from e
        if not status and ssl_context is not None:
            self._sock.close()
            raise Unavailable("data socket %s: handshake failed: the daemon closed the TLS "
                              "connection%s" % (self.where, _TLS_HINT))
        if status != b"\x00":
            self._sock.close()
            raise ConveyorError("data socket %s: the daemon refused stream %d%s"
                                % (self.where, stream_id, "" if status else " (connection closed)"))
        # Batches follow their headers at once; a daemon silent for this long
        # in the middle of a batch is gone.
        self._sock.settimeout(read_timeout)

    def read(self, slot, nbytes):
        """The next `nbytes` bytes of the socket, in slot `slot`'s buffer
        (a uint8 array of exactly nbytes that views it)."""
        buf = self._buffers.get(slot)
        if buf is None or buf.nbytes < nbytes:
            buf = np.empty(nbytes, dtype=np.uint8)
            self._buffers[slot] = buf
        view = memoryview(buf)[:nbytes]
        got = 0
        try:
            while got < nbytes:
                n = self._sock.recv_into(view[got:], nbytes - got)
                if n == 0:
                    raise Unavailable("data socket %s closed after %d of %d bytes of a batch"
                                      % (self.where, got, nbytes))
                got += n
        except OSError as e:
            raise Unavailable("data socket %s: %s after %d of %d bytes of a batch"
                              % (self.where, e, got, nbytes)) from e
        finally:
            view.release()
        return buf[:nbytes]

    def images(self, m, dtype, shape, nbytes):
        """The images of Batch message `m`, read from the socket into its
        slot's buffer."""
        return self.read(m.slot, nbytes).view(dtype).reshape(shape)

    def close(self):
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()
        self._buffers.clear()
