"""Hostile gRPC requests against a real conveyord, sent by hand over HTTP/2
(raw_grpc.py) where no gRPC library would send them:

- a compressed-request bomb: a ~1 MB gzip message that inflates to 1 GiB,
  two at once, must be refused without the daemon's peak RSS (VmHWM)
  growing by anything near that, while another client's stream keeps
  delivering batches;
- a request compressed with gzip or deflate is refused UNIMPLEMENTED, as
  gRPC's protocol says (the daemon accepts identity only); one in an
  encoding gRPC does not know arrives as bytes that do not parse;
- an unparseable ClientMessage ends the call INVALID_ARGUMENT saying so;
- a multi-megabyte request is refused before the daemon reads it, and each
  call's receive window is small; every call with over 8 KiB of metadata
  is refused (gRPC's own limit refuses only some).
(The longest pipeline name a client can send, echoed escaped and capped:
test_hostile_names.py.)
"""

import functools
import re
import threading
import zlib

import grpc
import pytest

import conveyor
from conveyor_integration import pb, scaled, skip_rss_check_if_sanitized, wait_until
from raw_grpc import SETTINGS_INITIAL_WINDOW_SIZE, grpc_frame, raw_call

STREAM_BATCHES = "/conveyor.v1.Conveyor/StreamBatches"
BOMB_INFLATED = 1 << 30
MiB = 1 << 20


@functools.lru_cache(maxsize=None)
def gzip_bomb(inflated=BOMB_INFLATED):
    """gzip of `inflated` zero bytes, compressed piecewise: the test never
    holds more than one 16 MiB piece inflated."""
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    piece = bytes(16 * MiB)
    out = [z.compress(piece) for _ in range(inflated // len(piece))]
    out.append(z.flush())
    return b"".join(out)


def vm_hwm(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM for pid %d" % pid)


def host_port(daemon):
    host, port = daemon.tcp.rsplit(":", 1)
    return host, int(port)


def open_message():
    return pb.ClientMessage(open=pb.OpenStream(pipeline="train", batch_size=8, credits=2,
                                               num_epochs=1)).SerializeToString()


def test_raw_client_speaks_grpc(daemon):
    """The hand-made client is a real gRPC client: an uncompressed
    OpenStream is answered with StreamOpened."""
    reply = raw_call(*host_port(daemon), STREAM_BATCHES, grpc_frame(open_message()),
                     timeout=scaled(30), stop_after=1)
    assert reply.messages, reply
    first = pb.ServerMessage.FromString(reply.messages[0])
    assert first.WhichOneof("kind") == "opened", reply


class Flow:
    """A stream read by a thread, counting batches, endless."""

    def __init__(self, address):
        self.stream = conveyor.open_stream(address, "train", 8, credits=2, num_epochs=0,
                                           transport="inline")
        self.batches = 0
        self.error = None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        try:
            for _ in self.stream:
                self.batches += 1
                if self.stop.is_set():
                    break
        except Exception as e:  # reported by the test
            self.error = e

    def close(self):
        self.stop.set()
        self.thread.join(timeout=scaled(30))
        self.stream.close()


def test_compressed_bomb_is_refused_without_inflating(daemon):
    bomb = gzip_bomb()
    assert len(bomb) < 2 * MiB
    flow = Flow(daemon.tcp)
    try:
        assert wait_until(lambda: flow.batches > 0, 30), flow.error
        before = vm_hwm(daemon.pid)
        replies = [None, None]
        errors = []

        def send(i):
            try:
                replies[i] = raw_call(*host_port(daemon), STREAM_BATCHES,
                                      grpc_frame(bomb, compressed=True), encoding="gzip",
                                      timeout=scaled(120))
            except Exception as e:
                errors.append(e)

        senders = [threading.Thread(target=send, args=(i,)) for i in range(2)]
        for t in senders:
            t.start()
        # The other stream keeps flowing while the bombs are in flight.
        during = flow.batches
        assert wait_until(lambda: flow.batches >= during + 5, 60), (flow.batches, flow.error)
        for t in senders:
            t.join(timeout=scaled(180))
        after = vm_hwm(daemon.pid)
        grown = after - before
        print("conveyord VmHWM %.1f MiB before the bombs, %.1f MiB after (+%.1f MiB)" %
              (before / MiB, after / MiB, grown / MiB))
        if not skip_rss_check_if_sanitized():
            assert grown < 128 * MiB, "the bombs were inflated: VmHWM grew by %.0f MiB" % (
                grown / MiB)
        assert not errors, errors
        for r in replies:
            # Refused with a status (UNIMPLEMENTED: gzip is not accepted).
            assert r is not None and r.grpc_status == grpc.StatusCode.UNIMPLEMENTED.value[0], r
        later = flow.batches
        assert wait_until(lambda: flow.batches >= later + 5, 60), (flow.batches, flow.error)
        assert flow.error is None, flow.error
    finally:
        flow.close()
    assert daemon.poll() is None, daemon.log_tail()


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_request_in_an_encoding_not_accepted_is_unimplemented(daemon, encoding):
    """gRPC's protocol: a message compressed with an algorithm the server
    does not support fails UNIMPLEMENTED. The daemon accepts identity only
    (its clients send tiny messages)."""
    body = zlib.compress(open_message()) if encoding == "deflate" else gzip_bomb(1 << 20)
    reply = raw_call(*host_port(daemon), STREAM_BATCHES, grpc_frame(body, compressed=True),
                     encoding=encoding, timeout=scaled(30), stop_after=1)
    assert reply.grpc_status == grpc.StatusCode.UNIMPLEMENTED.value[0], reply
    assert encoding in (reply.grpc_message or ""), reply


def test_request_in_an_unknown_encoding_is_invalid_argument(daemon):
    """gRPC 1.51 drops a grpc-encoding it does not know (it logs "Error
    parsing metadata") and hands the compressed bytes up as they are: the
    daemon cannot parse them and says so."""
    reply = raw_call(*host_port(daemon), STREAM_BATCHES,
                     grpc_frame(zlib.compress(open_message()), compressed=True),
                     encoding="x-conveyor-unknown", timeout=scaled(30), stop_after=1)
    assert reply.grpc_status == grpc.StatusCode.INVALID_ARGUMENT.value[0], reply
    assert re.search(r"does not parse.*ClientMessage.*identity", reply.grpc_message), reply


def test_unparseable_message_is_invalid_argument_saying_so(daemon):
    reply = raw_call(*host_port(daemon), STREAM_BATCHES, grpc_frame(b"\xff" * 10),
                     timeout=scaled(30), stop_after=1)
    assert reply.grpc_status == grpc.StatusCode.INVALID_ARGUMENT.value[0], reply
    assert re.search(r"does not parse as a conveyor\.v1\.ClientMessage", reply.grpc_message), reply


def test_uncompressed_message_with_identity_encoding_is_served(daemon):
    reply = raw_call(*host_port(daemon), STREAM_BATCHES, grpc_frame(open_message()),
                     encoding="identity", timeout=scaled(30), stop_after=1)
    assert reply.messages and pb.ServerMessage.FromString(reply.messages[0]).HasField("opened"), \
        reply


def test_client_messages_are_capped_and_so_is_each_calls_buffer(daemon):
    """A multi-megabyte OpenStream (its pipeline name) is refused by gRPC
    before the daemon reads it, and the daemon advertises a small per-call
    receive window (HTTP/2 SETTINGS_INITIAL_WINDOW_SIZE), so that what one
    call may make it buffer is bounded."""
    name = "evil\n" + "x" * (4 * MiB)
    big = pb.ClientMessage(open=pb.OpenStream(pipeline=name, batch_size=8, credits=2,
                                              num_epochs=1)).SerializeToString()
    reply = raw_call(*host_port(daemon), STREAM_BATCHES, grpc_frame(big), timeout=scaled(60),
                     stop_after=1)
    assert reply.grpc_status == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0], reply
    assert len(reply.grpc_message) < 200, reply
    assert reply.settings.get(SETTINGS_INITIAL_WINDOW_SIZE, 65535) <= 64 * 1024, reply.settings
    # Nothing of the name reached the log.
    assert "xxxxxxxx" not in daemon.log()



@pytest.mark.parametrize("path", [STREAM_BATCHES, "/conveyor.v1.Conveyor/GetStats"])
def test_oversized_request_metadata_is_refused(daemon, path):
    """gRPC 1.51's 8 KiB limit on request metadata refuses only some calls
    over it; the daemon refuses every one, RESOURCE_EXHAUSTED, before the
    service sees the call."""
    for _ in range(10):
        reply = raw_call(*host_port(daemon), path, grpc_frame(open_message()),
                         headers=[("x-padding", "a" * 16 * 1024)], timeout=scaled(30),
                         stop_after=1)
        assert reply.grpc_status == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0], reply
        assert "metadata" in reply.grpc_message, reply
        assert not reply.messages, reply
    # Small metadata is fine.
    reply = raw_call(*host_port(daemon), STREAM_BATCHES, grpc_frame(open_message()),
                     headers=[("x-padding", "a" * 1024)], timeout=scaled(30), stop_after=1)
    assert reply.messages, reply
