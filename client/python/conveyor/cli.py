"""The `conveyor` command line: list pipelines, fetch batches to files, show stats.

    conveyor pipelines [--server ADDR] [--json]
    conveyor fetch --pipeline P (--batches N | --epochs K) --out DIR [--server ADDR] [--json] [...]
    conveyor stats [--server ADDR] [--json]
    conveyor top [--server ADDR] [--interval S] [--count N] [--json]

With --json a command writes one JSON object to stdout (top: one per
refresh), its error too ({"error": {...}}, with the same non-zero exit code);
the keys are documented in client/python/README.md.

The server address defaults to $CONVEYOR_SERVER, else
unix:///run/conveyor/conveyor.sock. Run with Debian's /usr/bin/python3.
"""

import argparse
import errno
import io
import json
import os
import sys
import time
import urllib.parse

import numpy as np

from . import _diagnose, errors, top
from ._channel import grpc_target
from ._security import Security
from ._text import table
from .loader import _TRANSPORTS, Loader, default_address, list_pipelines, open_stream, stats
from .stats_view import (delivered_totals, format_limits, format_object_cache,
                         format_output_caches, format_remote_hosts, stage_units, stats_dict,
                         stream_images_per_s)

EXIT_OK = 0
EXIT_OTHER = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_UNAVAILABLE = 4
EXIT_DATA = 5
EXIT_ACCESS = 6

EPILOG = """exit codes:
  0  success
  1  other error (e.g. daemon limits reached: RESOURCE_EXHAUSTED; fetch --out
     cannot be written, e.g. the disk is full: the batches written before are
     whole, the failed one left no file)
  2  usage error or invalid request (INVALID_ARGUMENT, OUT_OF_RANGE, FAILED_PRECONDITION)
  3  not found (unknown pipeline)
  4  server unavailable (cannot connect, or the daemon is shutting down)
  5  data error (the stream failed on bad samples: DATA_LOSS)
  6  access denied (no or wrong token or certificate: UNAUTHENTICATED; a
     pipeline the token may not open: PERMISSION_DENIED; a unix socket this
     user may not open: the message names its group; a TLS port reached
     without --tls-ca)

The server address is unix:///path.sock or host:port; it defaults to
$CONVEYOR_SERVER, else unix:///run/conveyor/conveyor.sock. A daemon that
requires a bearer token or TLS: --token-file, --tls-ca (and --client-cert,
--client-key for mutual TLS), or $CONVEYOR_TOKEN_FILE, $CONVEYOR_TLS_CA,
$CONVEYOR_CLIENT_CERT, $CONVEYOR_CLIENT_KEY.

With --json the result is one JSON object on stdout; an error is too,
{"error": {"command", "exit_code", "code" (the gRPC status name or null),
"message"}}, with the exit code above (the message also goes to stderr)."""

_DTYPE_NAMES = {1: "uint8", 2: "float32", 3: "float16"}
_LAYOUT_NAMES = {1: "nchw", 2: "nhwc"}


def exit_code_for(error):
    if isinstance(error, errors.AccessDenied):
        return EXIT_ACCESS
    if isinstance(error, errors.InvalidRequest):
        return EXIT_USAGE
    if isinstance(error, errors.NotFound):
        return EXIT_NOT_FOUND
    if isinstance(error, errors.Unavailable):
        return EXIT_UNAVAILABLE
    if isinstance(error, errors.DataError):
        return EXIT_DATA
    return EXIT_OTHER


def _table(headers, rows):
    """Left-aligned first column, right-aligned others."""
    return "\n".join(table(headers, rows))


def _print_json(obj):
    print(json.dumps(obj, sort_keys=True))


def _security(args):
    return Security(token_file=args.token_file, tls_ca=args.tls_ca, client_cert=args.client_cert,
                    client_key=args.client_key, tls_server_name=args.tls_server_name)


# --- pipelines ---------------------------------------------------------------
def cmd_pipelines(args):
    pipes = list_pipelines(args.server, security=_security(args))
    if args.json:
        _print_json({"pipelines": [{
            "name": p.name, "kind": p.kind or "image", "dataset_size": p.dataset_size, "num_classes": p.num_classes,
            "sample_shape": list(p.sample_shape), "dtype": _DTYPE_NAMES.get(p.dtype),
            "layout": _LAYOUT_NAMES.get(p.layout), "max_batch_size": p.max_batch_size,
            "augment": p.augment, "error_policy": p.error_policy} for p in pipes]})
        return EXIT_OK
    if not pipes:
        print("no pipelines")
        return EXIT_OK
    rows = []
    for p in pipes:
        rows.append([p.name, p.dataset_size, p.num_classes, "x".join(str(d) for d in p.sample_shape),
                     _DTYPE_NAMES.get(p.dtype, "?"), _LAYOUT_NAMES.get(p.layout, "?"),
                     p.max_batch_size, p.augment, p.error_policy])
    print(_table(["pipeline", "samples", "classes", "sample shape", "dtype", "layout",
                  "max batch", "augment", "errors"], rows))
    return EXIT_OK


# --- fetch -------------------------------------------------------------------
class _Progress:
    """A one-line text bar on stdout, redrawn in place and erased by
    finish() (the summary, or an error, then starts on a clean line); only
    when enabled (stdout is a terminal and no --json). `total` may be set
    later (None: not known yet)."""

    def __init__(self, total, enabled):
        self.total = total
        self.enabled = enabled
        self.t0 = time.monotonic()
        self.last = 0.0
        self.drawn = False

    def update(self, done, images, force=False):
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self.last < 0.1:
            return
        self.last = now
        width = 30
        total = self.total or 0
        filled = min(int(width * done / total), width) if total else 0
        rate = images / max(now - self.t0, 1e-9)
        # \r back to the line's start, ESC [K erases what a longer bar left
        sys.stdout.write("\r[%s%s] %d/%s batches  %.0f images/s\033[K" %
                         ("#" * filled, "." * (width - filled), done, total or "?", rate))
        sys.stdout.flush()
        self.drawn = True

    def finish(self):
        """Erases the bar's line and leaves the cursor at its start."""
        if self.enabled and self.drawn:
            sys.stdout.write("\r\033[K")
            sys.stdout.flush()
            self.drawn = False


class OutputError(errors.ConveyorError):
    """A batch file could not be written (disk full, permissions, ...)."""


def _field_arrays(batch):
    """(key, array) of the batch's sample fields, three arrays each, no
    Python objects: NAME_offsets (uint32, num_samples + 1: sample i's value
    is NAME_data[offsets[i]:offsets[i + 1]]), NAME_data (uint8) and
    NAME_present (bool). The name is percent-encoded but for letters,
    digits and _.-~ (no "/" reaches a file or archive member name)."""
    out = []
    for name, col in batch.fields.items():
        key = urllib.parse.quote(name, safe="")
        out += [(key + "_offsets", np.asarray(col.offsets, dtype=np.uint32)),
                (key + "_data", np.frombuffer(col.data, dtype=np.uint8)),
                (key + "_present", np.asarray(col.present, dtype=np.bool_))]
    return out


def _batch_files(batch, fmt):
    """(file name suffix, bytes) of one batch, serialized in memory: a failed
    write then fails on the disk only, with nothing half-built left open."""
    arrays = (("images", batch.images), ("labels", batch.labels),
              ("indices", batch.indices)) + tuple(_field_arrays(batch))
    if fmt == "npz":
        buf = io.BytesIO()
        np.savez(buf, **dict(arrays))
        return [(".npz", buf.getvalue())]
    files = []
    for key, value in arrays:
        buf = io.BytesIO()
        np.save(buf, value)
        files.append(("_%s.npy" % key, buf.getvalue()))
    return files


def _write_batch(out, number, fmt, batch):
    """Writes batch `number`'s files whole or not at all: each goes to a
    hidden temporary name first and is renamed once all of the batch's files
    are written; on an error every file of the batch is removed and
    OutputError names the file that failed."""
    base = os.path.join(out, "batch_%05d" % number)
    files = [(base + suffix, data) for suffix, data in _batch_files(batch, fmt)]
    temps, done = [], []
    target = files[0][0]
    try:
        for final, data in files:
            target = final
            tmp = os.path.join(out, ".%s.partial" % os.path.basename(final))
            temps.append(tmp)
            with open(tmp, "wb") as f:
                f.write(data)
        for (final, _), tmp in zip(files, temps):
            target = final
            os.replace(tmp, final)
            done.append(final)
    except OSError as e:
        for path in temps + done:
            try:
                os.unlink(path)
            except OSError:
                pass
        name = errno.errorcode.get(e.errno, "errno %s" % e.errno) if e.errno else "?"
        raise OutputError("cannot write batch %d to %s: %s (%s); %d complete batch(es) were "
                          "written to %s before it" % (number, target, e.strerror or e, name,
                                                       number, out)) from None


def cmd_fetch(args):
    # --batches N: N batches, across epochs if N needs them (an endless
    # stream, left after N); --epochs K: K whole epochs, the stream ends by
    # itself after the last batch of the last one (whatever their count).
    if args.batches is not None and args.batches < 1:
        raise errors.InvalidRequest("--batches must be at least 1")
    if args.epochs is not None and args.epochs < 1:
        raise errors.InvalidRequest("--epochs must be at least 1")
    os.makedirs(args.out, exist_ok=True)
    world = args.world_size if args.world_size is not None else 1
    rank = args.rank if args.rank is not None else 0
    progress = _Progress(args.batches, sys.stdout.isatty() and not args.json)
    images = 0
    failed = 0
    written = 0
    t0 = time.monotonic()
    if args.also_server:
        # Several daemons: the pooled Loader (conveyor/_pool.py), the same
        # batches in the same order as from --server alone.
        loader = Loader(servers=[args.server] + args.also_server, pipeline=args.pipeline,
                        batch_size=args.batch_size, seed=args.seed, rank=rank, world_size=world,
                        shuffle=not args.no_shuffle, transport=args.transport,
                        security=_security(args))
        opened = loader.stream(num_epochs=args.epochs or 0, first_epoch=args.epoch)
    else:
        opened = open_stream(args.server, args.pipeline, args.batch_size, seed=args.seed,
                             first_epoch=args.epoch, num_epochs=args.epochs or 0, rank=rank,
                             world_size=world, credits=args.credits, shuffle=not args.no_shuffle,
                             transport=args.transport, security=_security(args))
    try:
        with opened as stream:
            if args.epochs is not None:
                progress.total = args.epochs * stream.batches_per_epoch
            for batch in stream:
                _write_batch(args.out, written, args.format, batch)
                images += batch.num_samples
                failed += len(batch.failures)
                written += 1
                progress.update(written, images)
                if args.batches is not None and written >= args.batches:
                    break
            progress.update(written, images, force=True)
    finally:
        progress.finish()
    dt = time.monotonic() - t0
    if args.json:
        _print_json({"batches": written, "images": images, "failed_samples": failed,
                     "seconds": round(dt, 6), "images_per_s": round(images / max(dt, 1e-9), 3),
                     "out": args.out, "format": args.format})
        return EXIT_OK
    print("fetched %d batches, %d images (%d failed samples) in %.2f s: %.1f images/s -> %s"
          % (written, images, failed, dt, images / max(dt, 1e-9), args.out))
    return EXIT_OK


# --- stats -------------------------------------------------------------------
def _secs(ns):
    return "%.2f" % (ns / 1e9)


def _stage_rows(stages, bottleneck):
    """Every count carries its unit: collate takes samples and gives batches."""
    rows = []
    for s in stages:
        unit_in, unit_out, queue_unit = stage_units(s.name)
        fill = "-"
        if s.queue_capacity:
            fill = "%d/%d %s" % (s.queue_size, s.queue_capacity, queue_unit)
        mark = "<- bottleneck" if bottleneck and s.name == bottleneck else ""
        rows.append([s.name, "%d %s" % (s.items_in, unit_in), "%d %s" % (s.items_out, unit_out),
                     s.failures, _secs(s.busy_ns), _secs(s.wait_input_ns),
                     _secs(s.wait_output_ns), fill, s.in_flight, mark])
    return rows


def format_stats(resp):
    lines = []
    lines.append("threads %d  uptime %.1f s  streams open %d (total %d)  slot memory %.1f/%.1f MiB"
                 % (resp.num_threads, resp.uptime_ns / 1e9, resp.streams_open, resp.streams_total,
                    resp.slot_bytes_in_use / 2**20, resp.slot_bytes_budget / 2**20))
    headers = ["stage", "items in", "items out", "failures", "busy s", "wait-in s", "wait-out s",
               "queue fill", "in flight", ""]  # failures: in the unit of "items in"
    if resp.stages:
        lines.append("")
        lines.append(_table(headers, _stage_rows(resp.stages, resp.bottleneck)))
    lines.append("")
    lines.append("bottleneck: %s" % (resp.bottleneck or "none (idle)"))
    # Every stream's batches, those of closed (finished or cancelled)
    # streams too: the stream lines below are the open ones only.
    total = delivered_totals(resp)
    lines.append("delivered since start: %d batches, %d samples, %.1f MiB (all streams, closed "
                 "ones included)" % (total["batches"], total["samples"], total["bytes"] / 2**20))
    for d in resp.deliveries:
        if d.batches:
            lines.append("  pipeline %s over %s: %d batches, %d samples"
                         % (d.pipeline, d.transport, d.batches, d.images))
    if resp.streams:
        lines.append("")
        lines.append("streams:")
        for st in resp.streams:
            secs = st.elapsed_ns / 1e9
            rate = stream_images_per_s(st)
            lines.append("  stream %d  pipeline %s  peer %s  batches %d  samples %d  failed %d  "
                         "slots held %d/%d  %.1f s  %.1f images/s"
                         % (st.stream_id, st.pipeline, st.peer or "-", st.batches_emitted,
                            st.samples_emitted, st.samples_failed, st.slots_held_by_client,
                            st.slots_total, secs, rate))
            lines.append(format_limits(st.limits))
            if st.fetches_pending:
                f = st.oldest_fetch
                lines.append("    waiting on the network: %d fetch(es); the oldest %.1f s, %d bytes "
                             "so far, %s from %s"
                             % (st.fetches_pending, f.age_ns / 1e9, f.bytes_received,
                                f.object or "(starting)", f.host or "-"))
    else:
        lines.append("streams: none open")
    lines.extend(format_remote_hosts(resp))
    lines.extend(format_output_caches(resp))
    lines.extend(format_object_cache(resp))
    return "\n".join(lines)


def cmd_stats(args):
    resp = stats(args.server, security=_security(args))
    if args.json:
        _print_json(stats_dict(resp))
    else:
        print(format_stats(resp))
    return EXIT_OK


# --- top ---------------------------------------------------------------------
def cmd_top(args):
    if not args.interval > 0:
        raise errors.InvalidRequest("--interval must be above 0 seconds, got %s" % args.interval)
    if args.count < 0:
        raise errors.InvalidRequest("--count must be 0 (no limit) or more, got %d" % args.count)
    if not args.json and not sys.stdout.isatty():
        raise errors.InvalidRequest("top draws on a terminal and stdout is not one; use --json "
                                    "for one line of figures per refresh")
    poller = top.Poller(args.server, _security(args), timeout=max(2.0, min(args.interval, 10.0)))
    try:
        if args.json:
            top.run_json(poller, args.interval, args.count, sys.stdout)
        else:
            top.run_curses(poller, args.interval, args.count, args.server)
    except KeyboardInterrupt:
        pass  # Ctrl-C is how a live view is left: not an error
    finally:
        poller.close()
    return EXIT_OK


# --- main --------------------------------------------------------------------
_COMMANDS = ("pipelines", "fetch", "stats", "top")


class _Parser(argparse.ArgumentParser):
    """Usage errors as a JSON object on stdout too when --json was given."""

    argv = ()  # the command line being parsed, set by main()

    def error(self, message):
        if "--json" in _Parser.argv:
            command = next((a for a in _Parser.argv if a in _COMMANDS), None)
            _print_json({"error": {"command": command, "exit_code": EXIT_USAGE, "code": None,
                                   "message": message}})
        super().error(message)


def build_parser():
    fmt = argparse.RawDescriptionHelpFormatter
    parser = _Parser(
        prog="conveyor", formatter_class=fmt, epilog=EPILOG,
        description="Command line client of conveyord, Conveyor's data-loading daemon.")
    parser.add_argument("--version", action="version", version="conveyor 0.1.0")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    def add_server(p):
        p.add_argument("--server", default=default_address(), metavar="ADDR",
                       help="daemon address: unix:///path.sock or host:port (default: %(default)s)")
        p.add_argument("--token-file", metavar="FILE", default=os.environ.get("CONVEYOR_TOKEN_FILE"),
                       help="file holding a bearer token for the daemon (default: "
                            "$CONVEYOR_TOKEN_FILE)")
        p.add_argument("--tls-ca", metavar="PEM", default=os.environ.get("CONVEYOR_TLS_CA"),
                       help="CA to verify a TCP daemon's certificate with; TCP uses TLS when "
                            "given (default: $CONVEYOR_TLS_CA)")
        p.add_argument("--client-cert", metavar="PEM",
                       default=os.environ.get("CONVEYOR_CLIENT_CERT"),
                       help="client certificate for mutual TLS (default: $CONVEYOR_CLIENT_CERT)")
        p.add_argument("--client-key", metavar="PEM", default=os.environ.get("CONVEYOR_CLIENT_KEY"),
                       help="key of --client-cert (default: $CONVEYOR_CLIENT_KEY)")
        p.add_argument("--tls-server-name", metavar="NAME",
                       default=os.environ.get("CONVEYOR_TLS_SERVER_NAME"),
                       help="name the daemon's certificate must carry, when it is not the host "
                            "of --server")
        p.add_argument("--json", action="store_true",
                       help="write the result (or the error) as JSON to stdout")

    p = sub.add_parser("pipelines", help="list the daemon's pipelines", formatter_class=fmt,
                       epilog=EPILOG, description="List the pipelines the daemon serves.")
    add_server(p)
    p.set_defaults(func=cmd_pipelines)

    p = sub.add_parser("fetch", help="fetch batches into .npz/.npy files", formatter_class=fmt,
                       epilog=EPILOG, description=(
                           "Fetch N batches (or K whole epochs) of a pipeline and write each "
                           "one to DIR: "
                           "batch_00000.npz (arrays images, labels, indices) or, with --format npy, "
                           "batch_00000_images.npy, batch_00000_labels.npy, batch_00000_indices.npy. "
                           "A pipeline's sample fields add three arrays each: NAME_offsets "
                           "(uint32, one more than the samples: sample i's value is "
                           "NAME_data[offsets[i]:offsets[i+1]]), NAME_data (uint8) and "
                           "NAME_present (bool: False where a sample has no value). "
                           "Prints a summary with images/s (--json: as a JSON object), and a "
                           "progress bar while it runs when stdout is a terminal."))
    add_server(p)
    p.add_argument("--pipeline", required=True, help="pipeline name (see `conveyor pipelines`)")
    count = p.add_mutually_exclusive_group(required=True)
    count.add_argument("--batches", type=int, metavar="N",
                       help="batches to fetch (across epochs if N needs more than one)")
    count.add_argument("--epochs", type=int, metavar="K",
                       help="fetch K whole epochs, whatever their number of batches")
    p.add_argument("--out", required=True, metavar="DIR", help="output folder (created)")
    p.add_argument("--batch-size", type=int, default=32, metavar="B", help="default: %(default)s")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="default: %(default)s")
    p.add_argument("--epoch", type=int, default=0, metavar="E",
                   help="first epoch; later epochs follow if N or K needs them "
                        "(default: %(default)s)")
    p.add_argument("--rank", type=int, default=None, metavar="R", help="default: 0")
    p.add_argument("--world-size", type=int, default=None, metavar="W", help="default: 1")
    p.add_argument("--credits", type=int, default=4, metavar="C",
                   help="batches in flight (default: %(default)s)")
    p.add_argument("--format", choices=["npz", "npy"], default="npz", help="default: %(default)s")
    p.add_argument("--transport", choices=sorted(_TRANSPORTS), default="auto",
                   help="default: %(default)s (shared memory on a unix socket; on TCP the data "
                        "socket when the daemon has one, else inline)")
    p.add_argument("--no-shuffle", action="store_true", help="read samples in dataset order")
    p.add_argument("--also-server", action="append", default=[], metavar="ADDR",
                   help="another daemon serving the same pipeline (repeatable; host:port, a DNS "
                        "name for several, unix:///path.sock): the batches are spread over "
                        "--server and these, and come out as from --server alone")
    p.set_defaults(func=cmd_fetch)

    p = sub.add_parser("stats", help="per-stage statistics and the bottleneck", formatter_class=fmt,
                       epilog=EPILOG, description=(
                           "Show the engine's per-stage figures since the daemon started (items "
                           "in/out with their units: samples, batches or epochs; failures; busy "
                           "seconds, seconds waiting for input and for room in the output; queue "
                           "fill), the bottleneck stage of the open streams (none when idle), "
                           "and one line per open stream."))
    add_server(p)
    p.set_defaults(func=cmd_stats)

    p = sub.add_parser("top", help="live view of the stages and streams", formatter_class=fmt,
                       epilog=EPILOG, description=(
                           "A live view of the daemon, refreshed in place: per stage items/s "
                           "in and out, busy % (the share of the worker pool's time the stage "
                           "took), queue fill, failures, and the bottleneck while there is load; "
                           "per stream images/s, credits in use and the client. q or Ctrl-C "
                           "quits (exit 0). With --json: one JSON object per refresh, one per "
                           "line, no terminal needed."))
    add_server(p)
    p.add_argument("--interval", type=float, default=1.0, metavar="S",
                   help="seconds between refreshes (default: %(default)s)")
    p.add_argument("--count", type=int, default=0, metavar="N",
                   help="stop after N refreshes (default: 0, until q or Ctrl-C)")
    p.set_defaults(func=cmd_top)
    return parser


def _fail(args, message, exit_code, code=None):
    """Reports an error on stderr (and as JSON on stdout with --json);
    returns the exit code."""
    print("conveyor %s: %s" % (args.command, message), file=sys.stderr)
    if args.json:
        _print_json({"error": {"command": args.command, "exit_code": exit_code,
                               "code": code, "message": str(message)}})
    return exit_code


def _explained(args, error):
    """`error`, or for a failure to connect whose cause a probe of the
    address sees (a socket this user may not open, a TLS port reached
    without --tls-ca) an AccessDenied that says what to fix."""
    if not isinstance(error, errors.Unavailable) and \
            getattr(error.code, "name", None) != "DEADLINE_EXCEEDED":
        return error
    try:
        security = _security(args)
        better = _diagnose.explain(grpc_target(args.server), security)
    except errors.ConveyorError:
        return error
    if better is None:
        return error
    better.details = "%s (gRPC: %s)" % (better, error.details)
    return better


def main(argv=None):
    parser = build_parser()
    _Parser.argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)  # exits 2 on usage errors
    try:
        return args.func(args)
    except errors.ConveyorError as e:
        e = _explained(args, e)
        code = e.code.name if e.code is not None else None
        return _fail(args, e, exit_code_for(e), code)
    except KeyboardInterrupt:
        return _fail(args, "interrupted", 130)
    except BrokenPipeError:
        return EXIT_OTHER
    except OSError as e:
        return _fail(args, e, EXIT_OTHER)


if __name__ == "__main__":
    sys.exit(main())
