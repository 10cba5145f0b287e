"""`conveyor top`: a live view of a running daemon.

Polls GetStats every --interval seconds and shows, per stage, items/s in and
out (with their units), the share of the worker pool's time the stage took
(busy %), queue fill, failures, and the bottleneck when there is load; per
open stream images/s, credits in use and the client's identity.

render() is pure (a frame dict from stats_view.top_frame in, screen lines
out) so it is tested without a terminal; run_curses() only draws those lines
with the standard library's curses and reads keys (q quits; Ctrl-C too);
run_json() writes one frame per line for scripts. A daemon that goes away
while the view is up is shown as a message and polled again; the first poll
must succeed (its error is the command's).
"""

import json
import time

from . import errors
from ._text import table
from .loader import make_channel, stats
from .stats_view import top_frame

MIN_WIDTH = 30
MIN_HEIGHT = 5


def _rate(value, unit):
    if value is None:
        return "-"
    return "%.1f %s/s" % (value, unit)


def _stage_rows(frame):
    rows = []
    for s in frame["stages"]:
        queue = "-"
        if s["queue_capacity"]:
            queue = "%d/%d %s" % (s["queue_size"], s["queue_capacity"], s["queue_unit"])
        busy = "-" if s["busy_pct"] is None else "%.0f%%" % s["busy_pct"]
        mark = "<- bottleneck" if frame["bottleneck"] == s["name"] else ""
        rows.append([s["name"], _rate(s["in_per_s"], s["unit_in"]),
                     _rate(s["out_per_s"], s["unit_out"]), busy, queue, s["in_flight"],
                     s["failures"], mark])
    return rows


def _stream_rows(frame):
    return [[st["stream_id"], st["pipeline"], "%.1f" % st["images_per_s"],
             "%d/%d" % (st["credits_in_use"], st["credits"]), st["batches"],
             st["samples_failed"], st["client"] or "-"] for st in frame["streams"]]


def _status_line(frame, problem):
    if problem:
        return "daemon unavailable: %s (retrying)" % problem
    if frame is None:
        return ""
    if frame["load"] is None:
        return "measuring..."
    if not frame["load"]:
        return "bottleneck: none (no load)"
    return "bottleneck: %s" % (frame["bottleneck"] or "none named")


def render(frame, width, height, address="", interval=1.0, problem=None):
    """The screen as at most `height` lines of fewer than `width` characters
    (the last column of a terminal is left free). `frame`: the latest
    stats_view.top_frame (None before the first), `problem`: why the last
    poll failed (None when it worked)."""
    if width < MIN_WIDTH or height < MIN_HEIGHT:
        msg = ["terminal too small", "(%dx%d; need %dx%d)" % (width, height, MIN_WIDTH,
                                                              MIN_HEIGHT), "q quits"]
        return [m[:max(width - 1, 0)] for m in msg[:height]]
    lines = ["conveyor top  %s  every %gs  (q quits)" % (address, interval)]
    if frame is not None:
        lines.append("threads %d  uptime %.1f s  streams open %d (total %d)  "
                     "slot memory %.1f/%.1f MiB"
                     % (frame["threads"], frame["uptime_s"], frame["streams_open"],
                        frame["streams_total"], frame["slot_bytes_in_use"] / 2**20,
                        frame["slot_bytes_budget"] / 2**20))
    status = _status_line(frame, problem)
    body = []
    if frame is not None:
        body.append("")
        body += table(["stage", "in", "out", "busy", "queue", "in flight", "failed", ""],
                      _stage_rows(frame), left=(0, 7))
        body.append("")
        if frame["streams"]:
            body += table(["stream", "pipeline", "images/s", "credits", "batches", "failed",
                           "client"], _stream_rows(frame), left=(1, 6))
        else:
            body.append("no stream open")
    room = height - len(lines) - 1  # the status line goes last
    if len(body) > room:
        hidden = len(body) - room + 1
        body = body[:room - 1] + ["... %d more line(s): enlarge the terminal" % hidden]
    lines += body + [status]
    return [line[:width - 1] for line in lines[:height]]


class Poller:
    """GetStats on one channel, made again after a failure (so a restarted
    daemon is found at once rather than after gRPC's reconnect back-off)."""

    def __init__(self, address, security, timeout):
        self.address = address
        self.security = security
        self.timeout = timeout
        self.channel = None

    def poll(self):
        if self.channel is None:
            self.channel = make_channel(self.address, security=self.security)
        try:
            return stats(self.channel, timeout=self.timeout, security=self.security)
        except errors.ConveyorError:
            self.close()
            raise

    def close(self):
        if self.channel is not None:
            self.channel.close()
            self.channel = None


def run_json(poller, interval, count, out):
    """Writes one top_frame per line to `out` every `interval` s (`count`
    lines, 0: until interrupted). A failed poll raises (the command's
    error)."""
    prev = None
    n = 0
    while True:
        cur = poller.poll()
        out.write(json.dumps(top_frame(cur, prev), sort_keys=True) + "\n")
        out.flush()
        prev = cur
        n += 1
        if count and n >= count:
            return
        time.sleep(interval)


def run_curses(poller, interval, count, address):
    """The live view until q, Ctrl-C or `count` refreshes (0: no limit).
    The terminal is restored whatever happens (curses.wrapper)."""
    import curses

    first = poller.poll()  # a daemon that is not there is the command's error

    def loop(scr):
        try:
            curses.curs_set(0)
        except curses.error:
            pass  # a terminal that cannot hide the cursor
        scr.timeout(100)
        prev, cur, problem = None, first, None
        frame = top_frame(cur)
        polls = 1
        next_poll = time.monotonic() + interval
        while True:
            height, width = scr.getmaxyx()
            scr.erase()
            for y, line in enumerate(render(frame, width, height, address, interval, problem)):
                try:
                    scr.addstr(y, 0, line)
                except curses.error:
                    pass  # a resize between getmaxyx and here
            scr.refresh()
            if count and polls >= count:
                return
            while True:
                key = scr.getch()
                if key in (ord("q"), ord("Q")):
                    return
                if key == curses.KEY_RESIZE or time.monotonic() >= next_poll:
                    break
            if time.monotonic() < next_poll:
                continue  # resized: draw again, poll on schedule
            next_poll = time.monotonic() + interval
            polls += 1
            try:
                prev, cur = cur, poller.poll()
                frame, problem = top_frame(cur, prev), None
            except errors.ConveyorError as e:
                problem = str(e)
                prev = cur = None
                frame = None

    try:
        curses.wrapper(loop)
    except KeyboardInterrupt:
        pass  # Ctrl-C quits like q
