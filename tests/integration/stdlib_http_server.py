"""Python's own http.server as `python3 -m http.server` runs it
(ThreadingHTTPServer + SimpleHTTPRequestHandler: HTTP/1.0, one connection
per request, one thread per connection, socketserver's listen backlog of 5),
serving the files below a folder, for the tests and benchmarks of remote
reads against an ordinary server:

  --backlog N      the listen backlog (socketserver's request_queue_size;
                   default 5, the stdlib's)
  --delay-ms N     wait N ms in the handler's thread before answering (an
                   added latency: the connect itself is not delayed)
  --ranges         answer single Range requests "bytes=a-b" with 206 and
                   Content-Range (the stdlib handler answers every GET 200
                   with the whole file; tar shards are read by ranges)

GET /__stats answers JSON {"requests": answered so far (not counting these)}.
Prints "PORT <n>" on stdout once listening (--port 0 picks a free one).
Run: python3 stdlib_http_server.py --root DIR [--port 0] [options]"""

import argparse
import functools
import http.server
import json
import os
import re
import sys
import threading
import time

_RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")


class Handler(http.server.SimpleHTTPRequestHandler):
    delay_s = 0.0
    ranges = False
    counter = None  # [count, lock]

    def log_message(self, *args):  # quiet: the tests read stdout for PORT only
        pass

    def _count(self):
        with self.counter[1]:
            self.counter[0] += 1

    def do_GET(self):
        if self.path == "/__stats":
            body = json.dumps({"requests": self.counter[0]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if self.delay_s:
            time.sleep(self.delay_s)
        self._count()
        m = _RANGE.match(self.headers.get("Range", "")) if self.ranges else None
        if m is None:
            return super().do_GET()
        path = self.translate_path(self.path)
        try:
            f = open(path, "rb")
        except OSError:
            return self.send_error(404)
        with f:
            size = os.fstat(f.fileno()).st_size
            first = int(m.group(1))
            last = min(int(m.group(2)) if m.group(2) else size - 1, size - 1)
            if first >= size or last < first:
                self.send_response(416)
                self.send_header("Content-Range", "bytes */%d" % size)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            f.seek(first)
            body = f.read(last - first + 1)
        self.send_response(206)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Range", "bytes %d-%d/%d" % (first, last, size))
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_HEAD(self):
        if self.delay_s:
            time.sleep(self.delay_s)
        self._count()
        return super().do_HEAD()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--backlog", type=int, default=5)
    ap.add_argument("--delay-ms", type=float, default=0)
    ap.add_argument("--ranges", action="store_true")
    args = ap.parse_args()

    class Server(http.server.ThreadingHTTPServer):
        request_queue_size = args.backlog

    handler = type("H", (Handler,), {"delay_s": args.delay_ms / 1000.0, "ranges": args.ranges,
                                     "counter": [0, threading.Lock()]})
    server = Server(("127.0.0.1", args.port),
                    functools.partial(handler, directory=os.path.abspath(args.root)))
    print("PORT %d" % server.server_address[1], flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
