"""Hostile names through the real daemon and the Python client: dataset files
whose names are not UTF-8 or hold a newline fail under error_policy skip and
are named escaped (\\xNN, \\n) in Batch.failures and in the daemon's log, so
the epoch completes and no log line is forged; a client-supplied pipeline
name is echoed escaped and capped. And the client never dies on a server
message it cannot parse: a fake server sends a Batch with invalid UTF-8 in a
string field, and the client raises conveyor.ProtocolError."""

import os
import re
from concurrent import futures

import grpc
import pytest

import conveyor
from conveyor._proto.v1 import conveyor_pb2 as pb
from conveyor_integration import daemon_config, make_image_folder, pipeline_entry, scaled

BAD_UTF8 = b"bad\xff\xfe.jpg"
FORGED = "2026-01-01 00:00:00.000 E forged line"
NEWLINE_NAME = "evil\n" + FORGED + ".jpg"


@pytest.fixture
def hostile_root(tmp_path):
    root, samples = make_image_folder(tmp_path / "images", classes=2, per_class=8)
    # Each sorts first in its class, so each is the first failure of its
    # batch of 8 (samples 0 and 9), the one the daemon's warning names.
    with open(os.path.join(os.fsencode(root / "class_a"), BAD_UTF8), "wb") as f:
        f.write(b"not a JPEG at all")
    (root / "class_b" / NEWLINE_NAME).write_bytes(b"not a JPEG either")
    return root, samples


def test_hostile_file_names_are_escaped_and_the_epoch_completes(daemon_factory, hostile_root):
    root, samples = hostile_root
    d = daemon_factory(daemon_config(root, pipelines={
        "train": pipeline_entry(root, augment="eval", max_failure_rate=0.5)}))
    loader = conveyor.Loader(d.unix, pipeline="train", batch_size=8, credits=2, shuffle=False,
                             transport="inline")
    delivered, failures = 0, []
    with loader.epoch(0) as stream:
        for batch in stream:
            delivered += len(batch)
            failures.extend(batch.failures)
    loader.close()
    assert delivered == len(samples)
    paths = sorted(f.path for f in failures)
    assert paths == sorted(["class_a/bad\\xff\\xfe.jpg", "class_b/evil\\n" + FORGED + ".jpg"])
    for f in failures:
        assert "\n" not in f.reason and "\ufffd" not in f.reason, f.reason

    log = d.log()
    assert "evil\\n" + FORGED in log, log[-4000:]
    # No line of the log starts with the text after the newline of the name.
    forged = [line for line in log.splitlines() if line.startswith(FORGED)]
    assert not forged, forged
    assert "bad\\xff\\xfe.jpg" in log
    assert "\ufffd" not in log  # no raw invalid byte reached the log


def test_long_pipeline_name_is_echoed_escaped_and_capped(daemon_factory, hostile_root):
    root, _ = hostile_root
    d = daemon_factory(daemon_config(root, pipelines={"train": pipeline_entry(root)}))
    # The longest a name can be: the daemon takes client messages of 64 KiB.
    name = "x" * 60000 + "\n" + FORGED
    with pytest.raises(conveyor.NotFound) as info:
        stream = conveyor.open_stream(d.unix, name, 8, credits=2, num_epochs=1)
        stream.close()
    details = info.value.details
    assert len(details) < 1024, len(details)
    assert "(%d bytes)" % len(name.encode()) in details
    assert "this daemon serves: train" in details
    assert len(str(info.value)) < 2048  # the client quotes the name capped too
    log = d.log()
    assert not [line for line in log.splitlines() if line.startswith(FORGED)]
    assert max(len(line) for line in log.splitlines()) < 4096


# --- a fake daemon that sends what no daemon should --------------------------
def _raw_stream_server(address, messages):
    """A gRPC server whose StreamBatches answers with `messages` (raw bytes,
    not checked), then ends the call OK."""

    def stream_batches(request_iterator, context):
        next(request_iterator, None)  # the OpenStream
        yield from messages

    handler = grpc.method_handlers_generic_handler("conveyor.v1.Conveyor", {
        "StreamBatches": grpc.stream_stream_rpc_method_handler(stream_batches)})
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(address)
    server.start()
    return server


def test_client_raises_protocol_error_on_a_message_it_cannot_parse(tmp_path):
    opened = pb.ServerMessage(opened=pb.StreamOpened(
        stream_id=7, transport=pb.INLINE, inline_message=pb.InlineOpened(), samples_per_epoch=1,
        batches_per_epoch=1, pipeline=pb.PipelineInfo(name="train")))
    batch = pb.ServerMessage(batch=pb.Batch(
        sequence=0, num_samples=0, shape=[0, 3, 8, 8], dtype=pb.UINT8, layout=pb.NCHW,
        failures=[pb.SampleFailure(sample_index=3, path="bad@@.jpg", reason="not a JPEG")]))
    raw = batch.SerializeToString()
    assert raw.count(b"bad@@.jpg") == 1
    raw = raw.replace(b"bad@@.jpg", BAD_UTF8)  # same length: still well framed
    with pytest.raises(Exception):
        pb.ServerMessage.FromString(raw)  # what the client's grpc deserializer meets

    address = "unix://%s" % (tmp_path / "fake.sock")
    server = _raw_stream_server(address, [opened.SerializeToString(), raw])
    try:
        stream = conveyor.open_stream(address, "train", 1, credits=2, num_epochs=1,
                                      transport="inline")
        with pytest.raises(conveyor.ProtocolError) as info:
            next(stream)
        stream.close()
    finally:
        server.stop(scaled(5)).wait()
    assert info.value.code == grpc.StatusCode.INTERNAL
    assert re.search(r"cannot parse", str(info.value)), info.value
    assert "stream 7" in str(info.value)
