"""The DEVICE_MEMORY transport: the daemon copies each finished slot to a ring of device
buffers on the GPU the client names by UUID (converting uint8 to float16/bfloat16/float32
with mean/std on the GPU) and sends a batch once its bytes are there. These check it against
the host path on the same daemon: the same batches, byte for byte, after the same
normalization; a second client process at the same time; a client killed with SIGKILL
mid-stream gives its buffers back (a small gpu_memory_budget would refuse new streams
otherwise)."""

import json
import os
import signal
import subprocess
import sys
import time

import conveyor_gpu as g

g.skip_without_gpu()

import pytest  # noqa: E402

import conveyor  # noqa: E402

CLIENT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "device_client.py")


def device_epoch(address, name, seed=7, credits=3):
    got = []
    with conveyor.Loader(address, name, batch_size=g.BATCH, seed=seed, credits=credits,
                         transport="device_memory", device="cuda:0") as loader:
        with loader.epoch(0) as stream:
            assert stream.transport == "device_memory"
            for b in stream:
                t = g.as_torch(b.images)
                assert t.is_cuda and t.device.index == 0, t.device
                got.append((b.indices.copy(), g.host_bytes(t)))
                b.release()
    return got


@pytest.mark.parametrize("dtype", ["uint8", "float16", "float32"])
def test_device_memory_matches_the_host_path(daemon, dtype):
    for augment in ("eval", "train"):
        name = "%s_%s" % (augment, dtype)
        g.assert_same_epoch(g.host_epoch(daemon.address, name), device_epoch(daemon.address, name),
                            "device_memory %s" % name)


def test_bfloat16_is_the_float32_path_rounded(dataset):
    d = g.start_daemon(dataset, dtypes=("float32", "bfloat16"))
    try:
        ref = [(i, g.bfloat16_of(img)) for i, img in g.host_epoch(d.address, "eval_float32")]
        g.assert_same_epoch(ref, device_epoch(d.address, "eval_bfloat16"), "bfloat16")
    finally:
        d.stop()


def digests(lines):
    return [(r["indices"], r["sha256"]) for r in (json.loads(x) for x in lines if x.strip())
            if "sha256" in r]


def host_digests(address, name, seed=7):
    import hashlib
    return [([int(i) for i in idx], hashlib.sha256(img.tobytes()).hexdigest())
            for idx, img in g.host_epoch(address, name, seed=seed)]


def test_two_client_processes_at_once(daemon):
    procs = [subprocess.Popen([sys.executable, CLIENT, daemon.address, "eval_float16",
                               "--seed", str(seed)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=g.client_env())
             for seed in (3, 4)]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err), seed in zip(procs, outs, (3, 4)):
        assert p.returncode == 0, err[-4000:]
        assert digests(out.splitlines()) == host_digests(daemon.address, "eval_float16", seed)


def test_client_killed_mid_stream_gives_its_buffers_back(dataset):
    # Room for a few rings of 3 float32 batches of 16 x 3 x 64 x 64 (0.75 MiB each), not
    # for the eight a leak would keep.
    d = g.start_daemon(dataset, extra="gpu_memory_budget: 24MiB\n")
    try:
        for i in range(8):
            p = subprocess.Popen([sys.executable, CLIENT, d.address, "train_float32", "--seed",
                                  str(i), "--stop-after", "2"], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, env=g.client_env())
            line = ""
            deadline = time.monotonic() + 60
            while '"waiting"' not in line:
                line = p.stdout.readline()
                if not line:
                    out, err = p.communicate(timeout=10)
                    pytest.fail("client %d ended before its second batch (%s):\n%s"
                                % (i, p.returncode, err[-4000:]))
                assert time.monotonic() < deadline
            os.kill(p.pid, signal.SIGKILL)
            p.wait(timeout=10)
        assert d.proc.poll() is None, d.log_tail()
        # A fresh client gets a whole epoch, and the host path still works beside it.
        deadline = time.monotonic() + 30
        while True:
            try:
                got = device_epoch(d.address, "eval_float32")
                break
            except conveyor.errors.ResourceExhausted:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        g.assert_same_epoch(g.host_epoch(d.address, "eval_float32"), got, "after 8 kills")
    finally:
        d.stop()


def test_unknown_gpu_uuid_is_refused_naming_it(daemon):
    """A raw OpenStream naming a GPU that is not there: FAILED_PRECONDITION naming the UUID
    (and the GPUs the daemon sees); host streams on the same daemon keep working."""
    import grpc

    from conveyor._proto.v1 import conveyor_pb2 as pb
    from conveyor._proto.v1 import conveyor_pb2_grpc as pb_grpc

    bogus = "GPU-00000000-0000-0000-0000-000000000000"
    with grpc.insecure_channel(daemon.address) as channel:
        stub = pb_grpc.ConveyorStub(channel)
        opening = pb.ClientMessage(open=pb.OpenStream(
            pipeline="eval_uint8", batch_size=g.BATCH, num_epochs=1, credits=2,
            transport=pb.DEVICE_MEMORY, device=pb.DeviceRequest(gpu_uuid=bogus)))
        with pytest.raises(grpc.RpcError) as info:
            for _ in stub.StreamBatches(iter([opening]), timeout=30):
                pass
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION, info.value
    assert bogus in info.value.details(), info.value.details()
    assert g.gpu_uuid(0) in info.value.details(), info.value.details()
    assert len(g.host_epoch(daemon.address, "eval_uint8")) > 0
