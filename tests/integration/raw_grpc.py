"""A gRPC call written by hand over cleartext HTTP/2, for requests no gRPC
library will send: a message flagged compressed whose bytes the test
compressed itself (a decompression bomb that the test never holds
inflated), an unknown grpc-encoding, arbitrary headers.

raw_call(host, port, path, body, headers=...) opens one TCP connection,
sends the client preface, a SETTINGS frame, the request's HEADERS (HPACK
literals, no Huffman, no indexing) and `body` in DATA frames (within the
server's flow-control windows), then reads until the stream ends (trailers
with END_STREAM, RST_STREAM, GOAWAY or the connection closing) and returns
a RawReply: the response headers and trailers decoded (HPACK with its
static and dynamic tables; Huffman-coded strings, which gRPC's own encoder
does not use for these headers, come back as None), the RST_STREAM error
code, and the gRPC messages' payloads.

grpc_frame(payload, compressed) builds one length-prefixed gRPC message.

Thread-safety: each raw_call is independent; calls may run in parallel.
"""

import socket
import struct
import threading
import time

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = (
    0, 1, 3, 4, 6, 7, 8, 9)
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY = 0x1, 0x1, 0x4, 0x8, 0x20
SETTINGS_INITIAL_WINDOW_SIZE, SETTINGS_MAX_FRAME_SIZE = 0x4, 0x5
STREAM = 1  # the one stream of a raw call

# RFC 7541 appendix A.
_STATIC = [
    (":authority", ""), (":method", "GET"), (":method", "POST"), (":path", "/"),
    (":path", "/index.html"), (":scheme", "http"), (":scheme", "https"), (":status", "200"),
    (":status", "204"), (":status", "206"), (":status", "304"), (":status", "400"),
    (":status", "404"), (":status", "500"), ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"), ("accept-language", ""), ("accept-ranges", ""),
    ("accept", ""), ("access-control-allow-origin", ""), ("age", ""), ("allow", ""),
    ("authorization", ""), ("cache-control", ""), ("content-disposition", ""),
    ("content-encoding", ""), ("content-language", ""), ("content-length", ""),
    ("content-location", ""), ("content-range", ""), ("content-type", ""), ("cookie", ""),
    ("date", ""), ("etag", ""), ("expect", ""), ("expires", ""), ("from", ""), ("host", ""),
    ("if-match", ""), ("if-modified-since", ""), ("if-none-match", ""), ("if-range", ""),
    ("if-unmodified-since", ""), ("last-modified", ""), ("link", ""), ("location", ""),
    ("max-forwards", ""), ("proxy-authenticate", ""), ("proxy-authorization", ""),
    ("range", ""), ("referer", ""), ("refresh", ""), ("retry-after", ""), ("server", ""),
    ("set-cookie", ""), ("strict-transport-security", ""), ("transfer-encoding", ""),
    ("user-agent", ""), ("vary", ""), ("via", ""), ("www-authenticate", ""),
]


def grpc_frame(payload, compressed=False):
    """One gRPC length-prefixed message."""
    return struct.pack(">BI", 1 if compressed else 0, len(payload)) + payload


def _frame(ftype, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + struct.pack(">BBI", ftype, flags, stream) + payload


def _hpack_int(value, prefix_bits, first_byte_flags=0):
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first_byte_flags | value])
    out = bytearray([first_byte_flags | limit])
    value -= limit
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _hpack_literal(name, value):
    """A literal header field without indexing, new name, no Huffman."""
    name = name.encode() if isinstance(name, str) else name
    value = value.encode() if isinstance(value, str) else value
    return (b"\x00" + _hpack_int(len(name), 7) + name + _hpack_int(len(value), 7) + value)


class _HpackDecoder:
    def __init__(self):
        self.dynamic = []  # newest first
        self.size = 0
        self.max_size = 4096

    def _evict(self):
        while self.size > self.max_size and self.dynamic:
            n, v = self.dynamic.pop()
            self.size -= len(n) + len(v) + 32

    def _add(self, name, value):
        self.dynamic.insert(0, (name, value))
        self.size += len(name or "") + len(value or "") + 32
        self._evict()

    def _entry(self, index):
        if 1 <= index <= len(_STATIC):
            return _STATIC[index - 1]
        return self.dynamic[index - len(_STATIC) - 1]

    @staticmethod
    def _int(data, pos, prefix_bits):
        limit = (1 << prefix_bits) - 1
        value = data[pos] & limit
        pos += 1
        if value < limit:
            return value, pos
        shift = 0
        while True:
            b = data[pos]
            pos += 1
            value += (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return value, pos

    def _str(self, data, pos):
        huffman = bool(data[pos] & 0x80)
        n, pos = self._int(data, pos, 7)
        raw = data[pos:pos + n]
        return (None if huffman else raw.decode("utf-8", "replace")), pos + n

    def decode(self, data):
        out = []
        pos = 0
        while pos < len(data):
            b = data[pos]
            if b & 0x80:  # indexed
                index, pos = self._int(data, pos, 7)
                out.append(self._entry(index))
            elif b & 0xC0 == 0x40:  # literal with incremental indexing
                index, pos = self._int(data, pos, 6)
                name = self._entry(index)[0] if index else None
                if not index:
                    name, pos = self._str(data, pos)
                value, pos = self._str(data, pos)
                self._add(name, value)
                out.append((name, value))
            elif b & 0xE0 == 0x20:  # dynamic table size update
                self.max_size, pos = self._int(data, pos, 5)
                self._evict()
            else:  # literal without indexing / never indexed
                index, pos = self._int(data, pos, 4)
                name = self._entry(index)[0] if index else None
                if not index:
                    name, pos = self._str(data, pos)
                value, pos = self._str(data, pos)
                out.append((name, value))
        return out


class RawReply:
    """What came back: headers (the first header block), trailers (the
    block that ended the stream; equal to headers for a trailers-only
    reply), rst (RST_STREAM's error code or None), goaway (GOAWAY's error
    code or None), messages (payloads of the gRPC messages received)."""

    def __init__(self):
        self.headers = None
        self.trailers = None
        self.rst = None
        self.goaway = None
        self.messages = []
        self.settings = {}  # the server's first SETTINGS: identifier -> value
        self.error = None   # what this client failed to decode, if anything

    def trailer(self, name):
        for block in (self.trailers, self.headers):
            for n, v in block or ():
                if n == name:
                    return v
        return None

    @property
    def grpc_status(self):
        v = self.trailer("grpc-status")
        return None if v is None else int(v)

    @property
    def grpc_message(self):
        return self.trailer("grpc-message")

    def __repr__(self):
        return ("RawReply(status=%r, message=%r, rst=%r, goaway=%r, error=%r, headers=%r, "
                "trailers=%r)" % (self.grpc_status, self.grpc_message, self.rst, self.goaway,
                                  self.error, self.headers, self.trailers))


class _Connection:
    def __init__(self, host, port, timeout, stop_after):
        self.stop_after = stop_after
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.send_lock = threading.Lock()
        self.cv = threading.Condition()
        self.conn_window = 65535
        self.stream_window = 65535
        self.max_frame = 16384
        self.done = False
        self.reply = RawReply()
        self.hpack = _HpackDecoder()
        self.block = b""
        self.block_ends_stream = False
        self.data = b""
        self.reader = threading.Thread(target=self._read_loop, daemon=True)

    def send(self, raw):
        with self.send_lock:
            self.sock.sendall(raw)

    def _recv_exact(self, n):
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise EOFError
            buf += chunk
        return buf

    def _finish(self):
        with self.cv:
            self.done = True
            self.cv.notify_all()

    def _read_loop(self):
        try:
            while True:
                head = self._recv_exact(9)
                length = struct.unpack(">I", b"\0" + head[:3])[0]
                ftype, flags = head[3], head[4]
                stream = struct.unpack(">I", head[5:9])[0] & 0x7FFFFFFF
                payload = self._recv_exact(length)
                if self._handle(ftype, flags, stream, payload):
                    break
        except (EOFError, OSError):
            pass  # the connection is over: the reply is what was read
        except Exception as e:  # a frame this client cannot decode
            self.reply.error = e
        self._finish()

    def _handle(self, ftype, flags, stream, payload):
        """Returns True when the stream is over."""
        if ftype == SETTINGS and not flags & ACK:
            with self.cv:
                for i in range(0, len(payload), 6):
                    ident, value = struct.unpack(">HI", payload[i:i + 6])
                    self.reply.settings.setdefault(ident, value)
                    if ident == SETTINGS_INITIAL_WINDOW_SIZE:
                        self.stream_window += value - 65535
                    elif ident == SETTINGS_MAX_FRAME_SIZE:
                        self.max_frame = value
                self.cv.notify_all()
            self.send(_frame(SETTINGS, ACK, 0))
        elif ftype == PING and not flags & ACK:
            self.send(_frame(PING, ACK, 0, payload))
        elif ftype == WINDOW_UPDATE:
            inc = struct.unpack(">I", payload)[0] & 0x7FFFFFFF
            with self.cv:
                if stream == 0:
                    self.conn_window += inc
                else:
                    self.stream_window += inc
                self.cv.notify_all()
        elif ftype == GOAWAY:
            self.reply.goaway = struct.unpack(">I", payload[4:8])[0]
            return True
        elif stream == STREAM and ftype == RST_STREAM:
            self.reply.rst = struct.unpack(">I", payload)[0]
            return True
        elif stream == STREAM and ftype in (HEADERS, CONTINUATION):
            if ftype == HEADERS:
                pos = 0
                pad = 0
                if flags & PADDED:
                    pad = payload[0]
                    pos = 1
                if flags & PRIORITY:
                    pos += 5
                payload = payload[pos:len(payload) - pad]
                self.block = b""
                self.block_ends_stream = bool(flags & END_STREAM)
            self.block += payload
            if flags & END_HEADERS:
                fields = self.hpack.decode(self.block)
                if self.reply.headers is None:
                    self.reply.headers = fields
                if self.block_ends_stream:
                    self.reply.trailers = fields
                    return True
        elif stream == STREAM and ftype == DATA:
            if payload:
                # Give the window back at once: the reply is small anyway.
                inc = struct.pack(">I", len(payload))
                self.send(_frame(WINDOW_UPDATE, 0, 0, inc) + _frame(WINDOW_UPDATE, 0, STREAM, inc))
            if flags & PADDED:
                payload = payload[1:len(payload) - payload[0]]
            self.data += payload
            while len(self.data) >= 5:
                n = struct.unpack(">I", self.data[1:5])[0]
                if len(self.data) < 5 + n:
                    break
                self.reply.messages.append(self.data[5:5 + n])
                self.data = self.data[5 + n:]
            if self.stop_after and len(self.reply.messages) >= self.stop_after:
                return True
            if flags & END_STREAM:
                return True
        return False

    def send_data(self, body, deadline):
        """Sends `body` on the stream within the flow-control windows, with
        END_STREAM on the last frame. Stops early (returns False) when the
        stream ended meanwhile (the server refused it)."""
        pos = 0
        while True:
            with self.cv:
                while not self.done and min(self.conn_window, self.stream_window) <= 0:
                    if not self.cv.wait(timeout=max(0.0, deadline - time.monotonic())):
                        raise TimeoutError("no flow-control window from the server")
                if self.done:
                    return False
                n = min(len(body) - pos, self.conn_window, self.stream_window, self.max_frame)
                self.conn_window -= n
                self.stream_window -= n
            last = pos + n >= len(body)
            try:
                self.send(_frame(DATA, END_STREAM if last else 0, STREAM, body[pos:pos + n]))
            except OSError:
                return False
            pos += n
            if last:
                return True


def raw_call(host, port, path, body, headers=(), timeout=30.0, encoding=None, stop_after=0):
    """One client-streaming-or-unary style call: the request is `body` (gRPC
    framed bytes, see grpc_frame), then half-close. `encoding` sets
    grpc-encoding; `headers` adds (name, value) pairs. Returns a RawReply
    once the stream is over (or `stop_after` messages came, if set), or
    raises TimeoutError after `timeout` s."""
    deadline = time.monotonic() + timeout
    c = _Connection(host, port, timeout, stop_after)
    try:
        # The preface goes first: the reader answers the server's SETTINGS
        # (which the server may send at once) and must not come before it.
        c.send(PREFACE + _frame(SETTINGS, 0, 0))
        c.reader.start()
        fields = [(":method", "POST"), (":scheme", "http"), (":path", path),
                  (":authority", "%s:%d" % (host, port)), ("content-type", "application/grpc"),
                  ("te", "trailers")]
        if encoding is not None:
            fields.append(("grpc-encoding", encoding))
        fields.extend(headers)
        block = b"".join(_hpack_literal(n, v) for n, v in fields)
        try:
            # The header block in frames of at most 16 KiB (HTTP/2's default
            # largest frame): HEADERS, then CONTINUATIONs.
            pieces = [block[i:i + 16384] for i in range(0, len(block), 16384)] or [b""]
            frames = [_frame(HEADERS if i == 0 else CONTINUATION,
                             END_HEADERS if i == len(pieces) - 1 else 0, STREAM, piece)
                      for i, piece in enumerate(pieces)]
            c.send(b"".join(frames))
            c.send_data(body, deadline)
        except OSError:
            pass  # the server closed the connection: what it said is read below
        with c.cv:
            while not c.done:
                if not c.cv.wait(timeout=max(0.0, deadline - time.monotonic())):
                    raise TimeoutError("the server did not end the call within %.0f s: %r" %
                                       (timeout, c.reply))
        return c.reply
    finally:
        try:
            c.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        c.sock.close()
        c.reader.join(timeout=5)
