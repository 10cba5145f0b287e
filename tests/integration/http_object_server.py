"""A small HTTP/1.1 object server for the remote-dataset tests and the HTTP
benchmark: serves the files below a folder with GET and HEAD, single Range
requests ("bytes=a-b", "bytes=a-", "bytes=-n"; 206 with Content-Range, 416
past the end), and induced trouble:

  --latency-ms N      sleep N ms before answering every request
  --fail-fraction F   answer a fraction F of requests 503
  --drop-fraction F   close the connection without an answer for a fraction F,
                      half of them after sending part of the body
  --ignore-range      answer Range requests 200 with the whole object
  --seed S            the trouble is drawn from random.Random(S)

Prints "PORT <n>" on stdout once listening (--port 0 picks a free one).
GET /__stats answers JSON counts: requests, failed, dropped, served (per path).
Run: python3 http_object_server.py --root DIR [--port 0] [options]"""

import argparse
import json
import os
import random
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit


class State:
    def __init__(self, args):
        self.args = args
        self.rng = random.Random(args.seed)
        self.lock = threading.Lock()
        self.requests = 0
        self.failed = 0
        self.dropped = 0
        self.served = {}

    def draw(self):
        """'fail', 'drop', 'cut' or 'ok' for the next request."""
        with self.lock:
            self.requests += 1
            r = self.rng.random()
            if r < self.args.fail_fraction:
                self.failed += 1
                return "fail"
            r -= self.args.fail_fraction
            if r < self.args.drop_fraction:
                self.dropped += 1
                return "drop" if self.rng.random() < 0.5 else "cut"
            return "ok"


def parse_range(header, size):
    """(start, end_exclusive) of a single 'bytes=' range, None when absent or
    unparsable (answered whole), 'bad' when unsatisfiable."""
    if not header or not header.startswith("bytes=") or "," in header:
        return None
    a, _, b = header[6:].partition("-")
    try:
        if a == "":
            n = int(b)
            return (max(0, size - n), size) if n > 0 else "bad"
        start = int(a)
        end = int(b) + 1 if b else size
    except ValueError:
        return None
    if start >= size or end <= start:
        return "bad"
    return start, min(end, size)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "ObjectServer/1"

    def log_message(self, fmt, *args):  # quiet
        pass

    def do_HEAD(self):
        self._answer(head=True)

    def do_GET(self):
        self._answer(head=False)

    def _answer(self, head):
        st = self.server.state
        path = unquote(urlsplit(self.path).path)
        if path == "/__stats":
            with st.lock:
                body = json.dumps({"requests": st.requests, "failed": st.failed,
                                   "dropped": st.dropped, "served": st.served}).encode()
            return self._send(200, body, {"Content-Type": "application/json"}, head)
        if st.args.latency_ms > 0:
            time.sleep(st.args.latency_ms / 1000.0)
        what = st.draw()
        if what == "fail":
            return self._send(503, b"try again", {}, head)
        if what == "drop":
            return self._drop()
        full = os.path.realpath(os.path.join(self.server.root, path.lstrip("/")))
        if not full.startswith(self.server.root + os.sep) or not os.path.isfile(full):
            return self._send(404, b"not found", {}, head)
        with open(full, "rb") as f:
            data = f.read()
        rng = None if st.args.ignore_range else parse_range(self.headers.get("Range"), len(data))
        if rng == "bad":
            return self._send(416, b"", {"Content-Range": "bytes */%d" % len(data)}, head)
        status, headers = 200, {"Accept-Ranges": "bytes"}
        if rng is not None:
            status = 206
            headers["Content-Range"] = "bytes %d-%d/%d" % (rng[0], rng[1] - 1, len(data))
            data = data[rng[0]:rng[1]]
        if what == "cut" and not head and len(data) > 1:
            # Announce the whole body, send half, then reset the connection.
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data[:len(data) // 2])
            self.wfile.flush()
            return self._drop()
        with st.lock:
            st.served[path] = st.served.get(path, 0) + 1
        self._send(status, data, headers, head)

    def _send(self, status, body, headers, head):
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _drop(self):
        """Resets the connection (RST, no answer or a cut one)."""
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                       b"\x01\x00\x00\x00\x00\x00\x00\x00")
        except OSError:
            pass
        self.close_connection = True
        self.connection.close()


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024

    def handle_error(self, request, client_address):
        """Connections the server drops on purpose end in errors: quiet."""


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--latency-ms", type=float, default=0)
    p.add_argument("--fail-fraction", type=float, default=0)
    p.add_argument("--drop-fraction", type=float, default=0)
    p.add_argument("--ignore-range", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    srv = Server((args.host, args.port), Handler)
    srv.root = os.path.realpath(args.root)
    srv.state = State(args)
    print("PORT %d" % srv.server_address[1], flush=True)
    try:
        srv.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
