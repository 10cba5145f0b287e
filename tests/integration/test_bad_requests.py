"""Wrong requests get the documented gRPC status (as client exceptions) with a
message naming what to fix (a Release of a slot the client does not hold,
stale ones named by their batch sequence, included); broken configs stop conveyord at start with exit
code 2 and the bad field named on stderr."""

import queue
import re
import subprocess
import threading
from concurrent import futures

import grpc
import pytest

import conveyor
from conveyor_integration import (CONVEYORD, MAX_BATCH, daemon_config, pb, pb_grpc, pipeline_entry,
                                  require_daemon, scaled, write_config)


def _open(address, **kw):
    args = dict(pipeline="train", batch_size=8, credits=2, num_epochs=1)
    args.update(kw)
    stream = conveyor.open_stream(address, args.pop("pipeline"), args.pop("batch_size"), **args)
    try:
        next(stream)  # errors found after StreamOpened surface here
    finally:
        stream.close()


def _expect(exc_type, code, pattern, **kw):
    def check(address):
        with pytest.raises(exc_type) as info:
            _open(address, **kw)
        assert info.value.code == code, info.value
        assert re.search(pattern, str(info.value), re.I), info.value
    return check


def test_unknown_pipeline_is_not_found(daemon):
    _expect(conveyor.NotFound, grpc.StatusCode.NOT_FOUND, "no-such-pipeline",
            pipeline="no-such-pipeline")(daemon.unix)


@pytest.mark.parametrize("batch_size", [0, MAX_BATCH + 1, 1 << 30])
def test_bad_batch_size_is_invalid_argument(daemon, batch_size):
    _expect(conveyor.InvalidRequest, grpc.StatusCode.INVALID_ARGUMENT, r"batch.?size",
            batch_size=batch_size)(daemon.unix)


@pytest.mark.parametrize("credits", [0, 65, 1 << 20])
def test_bad_credits_is_invalid_argument(daemon, credits):
    _expect(conveyor.InvalidRequest, grpc.StatusCode.INVALID_ARGUMENT, "credits",
            credits=credits)(daemon.unix)


def test_rank_not_below_world_size_is_invalid_argument(daemon):
    _expect(conveyor.InvalidRequest, grpc.StatusCode.INVALID_ARGUMENT, "rank",
            rank=2, world_size=2)(daemon.unix)


def test_shared_memory_over_tcp_is_failed_precondition(daemon):
    _expect(conveyor.InvalidRequest, grpc.StatusCode.FAILED_PRECONDITION, r"shared|memory|unix",
            transport="shared_memory")(daemon.tcp)


def test_resume_past_end_of_epoch_is_out_of_range(daemon, dataset):
    _, samples = dataset
    _expect(conveyor.InvalidRequest, grpc.StatusCode.OUT_OF_RANGE, r"offset|resume",
            resume=(0, len(samples) + 1, 1))(daemon.unix)


def test_inline_over_unix_socket_is_allowed(daemon, dataset):
    """The counterpart of the FAILED_PRECONDITION case: inline works anywhere."""
    _, samples = dataset
    loader = conveyor.Loader(daemon.unix, pipeline="train", batch_size=16, transport="inline")
    with loader.epoch(0) as stream:
        assert stream.transport == "inline"
        assert sum(b.num_samples for b in stream) == len(samples)
    loader.close()


# --- Release: a slot the client does not hold --------------------------------
class RawStream:
    """A StreamBatches call driven message by message with the generated
    stub (no client logic): send() queues a ClientMessage, read() returns
    the next ServerMessage."""

    def __init__(self, address):
        self.channel = conveyor.make_channel(address)
        self.requests = queue.SimpleQueue()
        self.call = pb_grpc.ConveyorStub(self.channel).StreamBatches(
            iter(self.requests.get, None), timeout=scaled(60))

    def send(self, **kind):
        self.requests.put(pb.ClientMessage(**kind))

    def read(self):
        return next(self.call)

    def read_batch(self):
        m = self.read()
        while m.WhichOneof("kind") != "batch":
            m = self.read()
        return m.batch

    def status(self):
        """Drains the call; its gRPC error (the call must end in one)."""
        with pytest.raises(grpc.RpcError) as info:
            while True:
                self.read()
        return info.value

    def close(self):
        self.requests.put(None)
        self.call.cancel()
        self.channel.close()


@pytest.mark.parametrize("case", ["stale", "never_delivered", "never_delivered_without_sequence"])
def test_release_of_a_slot_not_held_ends_the_stream_invalid_argument(daemon, case):
    s = RawStream(daemon.unix)
    try:
        s.send(open=pb.OpenStream(pipeline="train", batch_size=8, credits=1, num_epochs=0,
                                  transport=pb.INLINE))
        assert s.read().WhichOneof("kind") == "opened"
        first = s.read_batch()
        s.send(release=pb.Release(slots=[first.slot], sequences=[first.sequence]))
        second = s.read_batch()
        assert second.slot == first.slot  # one credit: the slot was refilled
        if case == "stale":
            # A second Release of the first batch: its slot holds the second now.
            s.send(release=pb.Release(slots=[first.slot], sequences=[first.sequence]))
            pattern = r"slot %d for batch %d: that slot holds batch %d" % (
                first.slot, first.sequence, second.sequence)
        elif case == "never_delivered":
            s.send(release=pb.Release(slots=[first.slot + 1], sequences=[0]))
            pattern = r"slot %d .*holds no batch" % (first.slot + 1)
        else:
            # An older client's Release (no sequence) of a slot it never got.
            s.send(release=pb.Release(slots=[first.slot + 1]))
            pattern = r"slot %d is not held" % (first.slot + 1)
        error = s.status()
    finally:
        s.close()
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error
    assert re.search(pattern, error.details()), error.details()


def test_client_names_each_released_batch_by_sequence(tmp_path):
    """The Python client's Release carries the batch's sequence (a fake
    daemon records what it gets)."""
    got = []
    done = threading.Event()

    def stream_batches(request_iterator, context):
        next(request_iterator, None)  # the OpenStream
        yield pb.ServerMessage(opened=pb.StreamOpened(
            stream_id=1, transport=pb.INLINE, inline_message=pb.InlineOpened(), samples_per_epoch=2,
            batches_per_epoch=2, pipeline=pb.PipelineInfo(name="train")))
        for seq, slot in ((40, 1), (41, 0)):
            yield pb.ServerMessage(batch=pb.Batch(sequence=seq, slot=slot, num_samples=0,
                                                  shape=[0, 3, 8, 8], dtype=pb.UINT8,
                                                  layout=pb.NCHW))
        for m in request_iterator:
            got.append(m)
            if len(got) == 2:
                break
        done.set()

    handler = grpc.method_handlers_generic_handler("conveyor.v1.Conveyor", {
        "StreamBatches": grpc.stream_stream_rpc_method_handler(
            stream_batches, request_deserializer=pb.ClientMessage.FromString,
            response_serializer=pb.ServerMessage.SerializeToString)})
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((handler,))
    address = "unix://%s" % (tmp_path / "fake.sock")
    server.add_insecure_port(address)
    server.start()
    try:
        stream = conveyor.open_stream(address, "train", 1, credits=2, num_epochs=1,
                                      transport="inline", auto_release=False)
        a, b = next(stream), next(stream)
        b.release()
        a.release()
        assert done.wait(scaled(30)), got
        stream.close()
    finally:
        server.stop(scaled(5)).wait()
    releases = [(list(m.release.slots), list(m.release.sequences)) for m in got]
    assert releases == [([0], [41]), ([1], [40])], releases


# --- configs refused at start ------------------------------------------------
def _bad_configs(root, tmp):
    outside = tmp / "outside"
    outside.mkdir()
    cfgs = {}
    p = pipeline_entry(root)
    p["colour"] = "red"
    cfgs["unknown_field"] = (daemon_config(root, pipelines={"train": p}), "colour")
    cfgs["bad_dtype"] = (daemon_config(root, pipelines={"train": pipeline_entry(root, dtype="int7")}),
                         "dtype")
    cfgs["root_outside_allowed_roots"] = (
        daemon_config(root, allowed_roots=[str(outside)]), r"root|allowed_roots")
    cfgs["missing_dataset_dir"] = (
        daemon_config(root, pipelines={"train": pipeline_entry(root.parent / "does-not-exist")}),
        r"dataset|root")
    return cfgs


@pytest.mark.parametrize("case", ["unknown_field", "bad_dtype", "root_outside_allowed_roots",
                                  "missing_dataset_dir"])
def test_bad_config_is_refused_with_the_field_named(dataset, tmp_path, case):
    require_daemon()
    root, _ = dataset
    cfg, field = _bad_configs(root, tmp_path)[case]
    path = write_config(tmp_path / "bad.yaml", cfg)
    sock = tmp_path / "s.sock"
    try:
        res = subprocess.run([str(CONVEYORD), "--config", str(path), "--socket", str(sock)],
                             capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("conveyord started with a broken config (%s) instead of refusing it" % case)
    assert res.returncode == 2, (res.returncode, res.stderr)
    assert re.search(field, res.stderr), "stderr does not name %r:\n%s" % (field, res.stderr)
    assert not sock.exists()


def test_startup_error_naming_a_path_with_a_newline_stays_one_line(dataset, tmp_path):
    """conveyord's errors at start quote paths from the config and the
    dataset: escaped, so that they cannot forge lines on stderr."""
    require_daemon()
    root, _ = dataset
    forged = "2026-01-01 00:00:00.000 E forged line"
    cfg = daemon_config(root, pipelines={"train": pipeline_entry(root.parent / "MISSING")})
    # A YAML double-quoted "\n" is a newline in the path.
    text = write_config(tmp_path / "bad.yaml", cfg).read_text()
    assert '/MISSING"' in text, text
    path = write_config(tmp_path / "bad.yaml", text.replace("MISSING", "missing\\n" + forged))
    res = subprocess.run([str(CONVEYORD), "--config", str(path), "--socket", str(tmp_path / "s.sock")],
                         capture_output=True, text=True, timeout=scaled(30))
    assert res.returncode == 2, (res.returncode, res.stderr)
    assert "missing\\n" in res.stderr, res.stderr
    assert not any(l.startswith(forged) for l in res.stderr.splitlines()), res.stderr
