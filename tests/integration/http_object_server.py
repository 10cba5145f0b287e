"""A small HTTP/1.1 object server for the remote-dataset tests and the HTTP
benchmark: serves the files below a folder with GET and HEAD, single Range
requests ("bytes=a-b", "bytes=a-", "bytes=-n"; 206 with Content-Range, 416
past the end), keep-alive connections, and induced trouble:

  --latency-ms N      wait N ms before answering every request
  --fail-fraction F   answer a fraction F of requests 503
  --drop-fraction F   close the connection without an answer for a fraction F,
                      half of them after sending part of the body
  --ignore-range      answer Range requests 200 with the whole object
  --chunked           send 2xx bodies with Transfer-Encoding: chunked (no
                      Content-Length)
  --close-after-answers K
                      on a connection that has carried K answers, meet the
                      next request by closing it unanswered (as a server does
                      that closes an idle keep-alive connection just as a
                      request arrives)
  --stall-after N     after N answers in all, answer nothing more (hold the
                      connections open)
  --wrong-content-range F
                      answer a fraction F of Range requests 206 with as many
                      bytes of another range of the object (the next one, else
                      the one before) and a Content-Range that names it
  --fail-path SUBSTR  answer 503 to every request for a path containing SUBSTR
  --trickle-body-ms N send each answer's head at once, then its body one byte
                      every N ms (a slow host: no worker may wait for it)
  --busy-above K       answer 503 to a request that arrives while K others are
                      being answered (in their --latency-ms wait): an
                      overloaded server that sheds load
  --seed S            the trouble is drawn from random.Random(S)
  --max-age N         answers say "Cache-Control: max-age=N"

One thread, asyncio: a request's latency is a timer, not a sleeping thread,
so the server costs little CPU per request (it shares the benchmark's
machine with the decoders); only the bytes asked are read from the file.

Prints "PORT <n>" on stdout once listening (--port 0 picks a free one).
Answers carry ETag and Last-Modified (from the file's inode, mtime and size),
and with --max-age N "Cache-Control: max-age=N" (declared fresh for N s).
GET /__stats answers JSON counts: requests, failed, dropped, served (GET
bodies per path), heads (HEAD answers per path),
and cpu_s, the CPU seconds this server process has used (benchmarks report
the server's cost per request from it).
Run: python3 http_object_server.py --root DIR [--port 0] [options]"""

import argparse
import asyncio
import json
import os
import random
import socket
import struct
import sys
import time
from email.utils import formatdate
from urllib.parse import unquote, urlsplit

REASONS = {200: "OK", 206: "Partial Content", 400: "Bad Request", 404: "Not Found",
           416: "Range Not Satisfiable", 501: "Not Implemented", 503: "Service Unavailable"}
MAX_HEADER_BYTES = 64 << 10


class State:
    def __init__(self, args, root):
        self.args = args
        self.root = root
        self.rng = random.Random(args.seed)
        self.requests = 0
        self.failed = 0
        self.dropped = 0
        self.closed = 0   # --close-after-answers
        self.answered = 0
        self.served = {}
        self.heads = {}
        self.wrong_ranges = 0  # --wrong-content-range
        self.path_failed = 0   # --fail-path
        self.in_progress = 0   # requests in their latency wait now
        self.busy = 0          # --busy-above: answered 503
        self.max_in_progress = 0

    def draw(self):
        """'fail', 'drop', 'cut' or 'ok' for the next request."""
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


def response_head(status, headers, length, keep_alive, chunked=False):
    lines = ["HTTP/1.1 %d %s" % (status, REASONS.get(status, "Status"))]
    lines += ["%s: %s" % kv for kv in headers.items()]
    lines.append("Transfer-Encoding: chunked" if chunked else "Content-Length: %d" % length)
    if not keep_alive:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def reset(writer):
    """Resets the connection (RST, no answer or a cut one)."""
    sock = writer.get_extra_info("socket")
    try:
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    writer.transport.abort()


def read_request(head):
    """(method, target, headers, keep_alive) of a request head, or None."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        return None
    headers = {}
    for line in lines[1:]:
        if line:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
    conn = headers.get("connection", "").lower()
    keep_alive = conn != "close" if parts[2] == "HTTP/1.1" else conn == "keep-alive"
    return parts[0], parts[1], headers, keep_alive


async def answer(st, writer, method, target, headers, keep_alive):
    """Writes the answer to one request; False when the connection is gone."""
    head_only = method == "HEAD"

    def send(status, body, extra=None):
        chunked = st.args.chunked and 200 <= status < 300 and not head_only
        writer.write(response_head(status, extra or {}, len(body), keep_alive, chunked))
        if chunked:
            for at in range(0, len(body), 4096):
                piece = body[at:at + 4096]
                writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            writer.write(b"0\r\n\r\n")
        elif not head_only:
            writer.write(body)
        return True

    path = unquote(urlsplit(target).path)
    if method not in ("GET", "HEAD"):
        return send(501, b"only GET and HEAD")
    if path == "/__stats":
        body = json.dumps({"requests": st.requests, "failed": st.failed,
                           "dropped": st.dropped, "closed": st.closed, "served": st.served,
                           "heads": st.heads,
                           "wrong_ranges": st.wrong_ranges, "path_failed": st.path_failed,
                           "busy": st.busy, "max_in_progress": st.max_in_progress,
                           "cpu_s": time.process_time()}).encode()
        return send(200, body, {"Content-Type": "application/json"})
    if st.args.stall_after is not None and st.answered >= st.args.stall_after:
        await asyncio.sleep(3600)
    st.answered += 1
    if st.args.busy_above is not None and st.in_progress >= st.args.busy_above:
        st.busy += 1
        return send(503, b"busy")
    if st.args.latency_ms > 0:
        st.in_progress += 1
        st.max_in_progress = max(st.max_in_progress, st.in_progress)
        try:
            await asyncio.sleep(st.args.latency_ms / 1000.0)
        finally:
            st.in_progress -= 1
    if st.args.fail_path is not None and st.args.fail_path in path:
        st.path_failed += 1
        return send(503, b"this path always fails")
    what = st.draw()
    if what == "fail":
        return send(503, b"try again")
    if what == "drop":
        reset(writer)
        return False
    full = os.path.realpath(os.path.join(st.root, path.lstrip("/")))
    if not full.startswith(st.root + os.sep) or not os.path.isfile(full):
        return send(404, b"not found")
    info = os.stat(full)
    size = info.st_size
    rng = None if st.args.ignore_range else parse_range(headers.get("range"), size)
    if rng == "bad":
        return send(416, b"", {"Content-Range": "bytes */%d" % size})
    # Validators: a file replaced (new inode or mtime) or resized is a new version.
    status, extra = 200, {"Accept-Ranges": "bytes",
                          "ETag": '"%x-%x-%x"' % (info.st_ino, info.st_mtime_ns, size),
                          "Last-Modified": formatdate(info.st_mtime, usegmt=True)}
    if st.args.max_age is not None:
        extra["Cache-Control"] = "max-age=%d" % st.args.max_age
    start, end = 0, size
    if rng is not None:
        status = 206
        extra["Content-Range"] = "bytes %d-%d/%d" % (rng[0], rng[1] - 1, size)
        start, end = rng
        if st.args.wrong_content_range > 0 and st.rng.random() < st.args.wrong_content_range:
            # The same length from elsewhere in the object, and a
            # Content-Range that says so.
            n = end - start
            other = end if end + n <= size else (start - n if start >= n else size - n)
            if other != start:
                st.wrong_ranges += 1
                start, end = other, other + n
                extra["Content-Range"] = "bytes %d-%d/%d" % (start, end - 1, size)
    if head_only:
        st.heads[path] = st.heads.get(path, 0) + 1
        writer.write(response_head(status, extra, end - start, keep_alive))
        return True
    # Only the bytes asked are read: a member costs what the member costs.
    with open(full, "rb") as f:
        f.seek(start)
        data = f.read(end - start)
    if what == "cut" and len(data) > 1:
        # Announce the whole body, send half, then reset the connection.
        writer.write(response_head(status, {}, len(data), True))
        writer.write(data[:len(data) // 2])
        await writer.drain()
        reset(writer)
        return False
    st.served[path] = st.served.get(path, 0) + 1
    if st.args.trickle_body_ms is not None and not head_only:
        writer.write(response_head(status, extra, len(data), keep_alive))
        for at in range(len(data)):
            writer.write(data[at:at + 1])
            await writer.drain()
            await asyncio.sleep(st.args.trickle_body_ms / 1000.0)
        return True
    return send(status, data, extra)


async def serve_connection(st, reader, writer):
    answers = 0
    try:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                return
            req = read_request(head)
            if req is None:
                writer.write(response_head(400, {}, 0, False))
                await writer.drain()
                return
            method, target, headers, keep_alive = req
            if st.args.close_after_answers is not None and answers >= st.args.close_after_answers:
                st.closed += 1
                return  # (closed unanswered by the finally below)
            answers += 1
            try:
                body_len = int(headers.get("content-length", "0") or "0")
                if body_len > 0:
                    await reader.readexactly(body_len)  # request bodies are ignored
            except (ValueError, asyncio.IncompleteReadError, ConnectionError):
                return
            if not await answer(st, writer, method, target, headers, keep_alive):
                return
            await writer.drain()
            if not keep_alive:
                return
    except ConnectionError:
        return
    finally:
        if not writer.transport.is_closing():
            writer.close()


async def run(args):
    st = State(args, os.path.realpath(args.root))
    server = await asyncio.start_server(lambda r, w: serve_connection(st, r, w), args.host,
                                        args.port, backlog=1024, reuse_address=True,
                                        limit=MAX_HEADER_BYTES)
    print("PORT %d" % server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--latency-ms", type=float, default=0)
    p.add_argument("--fail-fraction", type=float, default=0)
    p.add_argument("--drop-fraction", type=float, default=0)
    p.add_argument("--ignore-range", action="store_true")
    p.add_argument("--chunked", action="store_true")
    p.add_argument("--close-after-answers", type=int)
    p.add_argument("--stall-after", type=int)
    p.add_argument("--wrong-content-range", type=float, default=0)
    p.add_argument("--fail-path")
    p.add_argument("--trickle-body-ms", type=float)
    p.add_argument("--busy-above", type=int)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-age", type=int)
    args = p.parse_args()
    try:
        asyncio.run(run(args))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
