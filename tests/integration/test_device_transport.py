"""DEVICE_MEMORY streams against real conveyord processes, on a machine
without a GPU:

- a plain daemon (the CUDA device API, which finds no driver or device here)
  answers a DEVICE_MEMORY OpenStream with FAILED_PRECONDITION naming why,
  and a SHARED_MEMORY stream on the same daemon still delivers;
- a daemon with the host model of the device API (--device-api host-model,
  a test aid) hands the device ring over on the fd socket with the stream's
  secret; mmap'ed, a batch's bytes equal the host path's float32 batch of
  the same seed bit for bit;
- a client process killed with SIGKILL mid-stream leaves nothing behind: the
  daemon's GetStats is back to no stream, no slot bytes, and its fds and
  memfd mappings are back to the baseline.

The streams are driven with the generated stub (raw gRPC), and the ring is
fetched with the Python client's fd hand-over code (conveyor/_shm.py)."""

import mmap
import os
import queue
import signal
import subprocess

import grpc
import numpy as np
import pytest

import conveyor
from conveyor._shm import receive_region_fd
from conveyor_integration import (PYTHON, client_env, daemon_config, pb, pb_grpc, pipeline_entry,
                                  scaled, wait_until)

UUID = "GPU-8c5b0c1e-6f1d-4a2b-9c3d-0123456789ab"
HOST_MODEL = ["--device-api", "host-model", "--host-model-gpus", UUID + ":1GiB"]
BATCH = 8


def _config(root):
    return daemon_config(root, pipelines={
        "f32": pipeline_entry(root, augment="eval", dtype="float32", resize_size=73),
        "u8": pipeline_entry(root, augment="eval", resize_size=73),
    })


class RawStream:
    """A StreamBatches call driven message by message with the generated stub."""

    def __init__(self, address):
        self.channel = conveyor.make_channel(address)
        self.requests = queue.SimpleQueue()
        self.call = pb_grpc.ConveyorStub(self.channel).StreamBatches(
            iter(self.requests.get, None), timeout=scaled(60))

    def open(self, pipeline, transport, uuid=None, seed=3):
        req = pb.OpenStream(pipeline=pipeline, batch_size=BATCH, credits=2, num_epochs=1,
                            shuffle=False, seed=seed, transport=transport)
        if uuid is not None:
            req.device.gpu_uuid = uuid
        self.requests.put(pb.ClientMessage(open=req))
        m = next(self.call)
        assert m.WhichOneof("kind") == "opened", m
        return m.opened

    def read_batch(self):
        m = next(self.call)
        while m.WhichOneof("kind") != "batch":
            m = next(self.call)
        return m.batch

    def release(self, batch):
        self.requests.put(pb.ClientMessage(release=pb.Release(slots=[batch.slot],
                                                              sequences=[batch.sequence])))

    def close(self):
        self.requests.put(None)
        self.call.cancel()
        self.channel.close()


def _map(details, stream_id):
    fd = receive_region_fd(details.fd_socket, stream_id, details.secret)
    try:
        return mmap.mmap(fd, details.region_bytes, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
    finally:
        os.close(fd)


def test_no_gpu_refuses_device_streams_and_host_streams_go_on(daemon_factory, dataset):
    root, _ = dataset
    d = daemon_factory(_config(root), name="nogpu")
    s = RawStream(d.unix)
    try:
        with pytest.raises(grpc.RpcError) as info:
            s.open("f32", pb.DEVICE_MEMORY, uuid=UUID)
        err = info.value
        assert err.code() == grpc.StatusCode.FAILED_PRECONDITION, err
        msg = err.details()
        assert "DEVICE_MEMORY" in msg and UUID in msg, msg
        # The reason: no driver, no device, or a build without CUDA.
        assert any(w in msg.lower() for w in ("driver", "device", "cuda")), msg
    finally:
        s.close()
    h = RawStream(d.unix)
    try:
        opened = h.open("f32", pb.SHARED_MEMORY)
        assert opened.WhichOneof("details") == "shared_memory"
        b = h.read_batch()
        assert b.num_samples == BATCH and b.dtype == pb.FLOAT32
    finally:
        h.close()
    assert wait_until(d.idle, 10), conveyor.stats(d.unix)


@pytest.mark.parametrize("pipeline", ["f32", "u8"])
def test_host_model_ring_holds_the_host_paths_bytes(daemon_factory, dataset, pipeline):
    root, samples = dataset
    d = daemon_factory(_config(root), name="hostmodel", extra_args=HOST_MODEL)
    dev, host = RawStream(d.unix), RawStream(d.unix)
    try:
        opened = dev.open(pipeline, pb.DEVICE_MEMORY, uuid=UUID.lower())
        assert opened.transport == pb.DEVICE_MEMORY
        details = opened.device_memory
        assert details.host_model and details.gpu_uuid == UUID
        assert details.num_slots == 2
        ring = _map(details, opened.stream_id)
        hopened = host.open(pipeline, pb.SHARED_MEMORY)
        region = _map(hopened.shared_memory, hopened.stream_id)
        for _ in range(len(samples) // BATCH):
            b, hb = dev.read_batch(), host.read_batch()
            # Read at once: a batch is sent only once its bytes are on the device.
            got = ring[b.images_offset:b.images_offset + b.images_bytes]
            want = region[hb.images_offset:hb.images_offset + hb.images_bytes]
            assert b.sequence == hb.sequence and list(b.labels) == list(hb.labels)
            assert b.dtype == hb.dtype and list(b.shape) == list(hb.shape)
            assert b.images_bytes == hb.images_bytes
            assert b.images_offset == b.slot * details.slot_bytes
            assert got == want, "batch %d differs from the host path's" % b.sequence
            if pipeline == "f32":
                x = np.frombuffer(got, np.float32)
                assert np.isfinite(x).all() and x.min() < 0 < x.max()  # normalised
            dev.release(b)
            host.release(hb)
        ring.close()
        region.close()
    finally:
        dev.close()
        host.close()
    assert wait_until(d.idle, 10), conveyor.stats(d.unix)


CLIENT = r"""
import mmap, os, queue, sys, time
import conveyor
from conveyor._proto.v1 import conveyor_pb2 as pb, conveyor_pb2_grpc as pb_grpc
from conveyor._shm import receive_region_fd
channel = conveyor.make_channel(sys.argv[1])
requests = queue.SimpleQueue()
call = pb_grpc.ConveyorStub(channel).StreamBatches(iter(requests.get, None))
req = pb.OpenStream(pipeline="f32", batch_size=8, credits=2, num_epochs=0, transport=pb.DEVICE_MEMORY)
req.device.gpu_uuid = sys.argv[2]
requests.put(pb.ClientMessage(open=req))
opened = next(call).opened
d = opened.device_memory
fd = receive_region_fd(d.fd_socket, opened.stream_id, d.secret)
ring = mmap.mmap(fd, d.region_bytes, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
m = next(call)
while m.WhichOneof("kind") != "batch":
    m = next(call)
assert m.batch.images_bytes > 0
print("ready", flush=True)
time.sleep(600)
"""


def test_killed_device_client_frees_its_stream(daemon_factory, dataset, tmp_path):
    root, _ = dataset
    d = daemon_factory(_config(root), name="devkill", extra_args=HOST_MODEL)
    # Warm up (threads, allocator) and take the baseline.
    s = RawStream(d.unix)
    try:
        s.open("f32", pb.DEVICE_MEMORY, uuid=UUID)
        s.read_batch()
    finally:
        s.close()
    assert wait_until(d.idle, 10), conveyor.stats(d.unix)
    base_fds = d.fd_count()
    script = tmp_path / "client.py"
    script.write_text(CLIENT)
    procs = [subprocess.Popen([PYTHON, str(script), d.unix, UUID], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, env=client_env()) for _ in range(3)]
    try:
        for p in procs:
            line = p.stdout.readline()
            assert line.strip() == b"ready", (line, p.stderr.read() if p.poll() is not None else "")
        st = conveyor.stats(d.unix)
        assert st.streams_open == 3 and st.slot_bytes_in_use > 0
        assert d.fd_count() > base_fds
        assert len(d.memfd_mappings()) >= 3  # the host slots of each stream
    finally:
        for p in procs:
            p.send_signal(signal.SIGKILL)
            p.wait(timeout=scaled(10))
    assert wait_until(d.idle, 20), conveyor.stats(d.unix)
    assert wait_until(lambda: d.memfd_mappings() == [], 10), d.memfd_mappings()
    assert wait_until(lambda: d.fd_count() <= base_fds, 10), (d.fd_count(), base_fds)
    # The GPU serves the next stream.
    s = RawStream(d.unix)
    try:
        s.open("f32", pb.DEVICE_MEMORY, uuid=UUID)
        assert s.read_batch().num_samples == BATCH
    finally:
        s.close()
