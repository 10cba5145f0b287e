"""The Python client's GPU options against a real daemon, on a host without
a GPU: pin_memory=True, device="cuda:N" (the client-side copy) and
transport="device_memory".

- without PyTorch/CUDA or a CUDA driver each of them fails with a clear
  FailedPrecondition before any stream is opened;
- a daemon that does not serve DEVICE_MEMORY (no GPU there) refuses it with
  its reason, and host streams on the same daemon keep working;
- with the CUDA calls replaced by host models (the registrar and the
  copier: conveyor/_pinning.py, conveyor/_cuda_copy.py seams) the wiring
  is whole: the memfd is registered once and unregistered before it is
  unmapped; device= batches carry the bytes of the host path, which a
  release before the copy completed would break (the daemon reuses the slot).
"""

import threading
import time

import grpc
import numpy as np
import pytest

import conveyor
from conveyor import _cuda_copy, _pinning
from conveyor_integration import read_epoch, wait_until

UUID = "GPU-00000000-0000-0000-0000-000000000000"


def _torch_cuda():
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def _cuda_driver_works():
    from conveyor._cuda_driver import Driver
    try:
        return Driver().device_count() > 0
    except conveyor.ConveyorError:
        return False


HAS_CUDA = _torch_cuda()
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="skipped: no CUDA device")
needs_no_cuda = pytest.mark.skipif(HAS_CUDA, reason="checks the errors of a host without CUDA")


def _mapped(address):
    with open("/proc/self/maps") as f:
        for line in f:
            lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
            if lo <= address < hi:
                return True
    return False


def _idle(daemon):
    return wait_until(lambda: conveyor.stats(daemon.unix).streams_open == 0, 10)


_COPYING = []  # ModelCopy objects whose copy has not run yet


class RecordingRegistrar:
    def __init__(self):
        self.calls = []
        self.copying_at_unregister = None

    def register(self, ptr, size, writable):
        self.calls.append(("register", ptr, size, writable, _mapped(ptr)))

    def unregister(self, ptr):
        self.copying_at_unregister = len(_COPYING)
        self.calls.append(("unregister", ptr, _mapped(ptr)))


class ModelCopy:
    """Copies the pinned slot `delay` s later, on a thread of its own."""

    def __init__(self, source, delay):
        self.result = None
        self._done = threading.Event()
        _COPYING.append(self)
        threading.Thread(target=self._run, args=(source, delay), daemon=True).start()

    def _run(self, source, delay):
        time.sleep(delay)
        self.result = np.array(source, copy=True)
        _COPYING.remove(self)
        self._done.set()

    def done(self):
        return self._done.is_set()

    def wait(self):
        self._done.wait()

    def hand_over(self):
        self._done.wait()  # the consumer's stream waits on the event: here, the host waits
        return self.result


class ModelCopier:
    device = "cuda:0"

    def __init__(self, delay):
        self.delay = delay

    def start(self, images):
        return ModelCopy(images, self.delay)


@pytest.mark.skipif(_cuda_driver_works(), reason="checks the errors of a host without a CUDA driver")
def test_device_memory_without_a_cuda_driver_fails_before_opening(daemon):
    with pytest.raises(conveyor.FailedPrecondition, match="device_memory.* needs a CUDA device"):
        conveyor.open_stream(daemon.unix, "train", 8, transport="device_memory", device="cuda:0")
    assert _idle(daemon)


@needs_no_cuda
def test_device_and_pin_memory_without_cuda_are_clear_errors(daemon):
    with pytest.raises(conveyor.FailedPrecondition,
                       match="pin_memory=True needs PyTorch with a CUDA device"):
        conveyor.Loader(daemon.unix, pipeline="train", batch_size=8, pin_memory=True)
    with pytest.raises(conveyor.FailedPrecondition, match="needs PyTorch with a CUDA device"):
        conveyor.Loader(daemon.unix, pipeline="train", batch_size=8, device="cuda:0")
    with pytest.raises(conveyor.FailedPrecondition, match="needs PyTorch with a CUDA device"):
        conveyor.open_stream(daemon.unix, "train", 8, pin_memory=True)
    with pytest.raises(conveyor.InvalidRequest, match="cuda:N"):
        conveyor.Loader(daemon.unix, pipeline="train", batch_size=8, device="gpu0")
    with pytest.raises(conveyor.InvalidRequest, match="pin_memory=True is for shared_memory"):
        conveyor.open_stream(daemon.unix, "train", 8, pin_memory=True, transport="inline")
    with pytest.raises(conveyor.InvalidRequest, match="needs device="):
        conveyor.open_stream(daemon.unix, "train", 8, transport="device_memory")
    assert _idle(daemon)


def test_a_daemon_without_the_device_transport_refuses_it_and_serves_host_streams(daemon):
    with pytest.raises(conveyor.InvalidRequest) as err:
        conveyor.open_stream(daemon.unix, "train", 8, transport="device_memory", gpu_uuid=UUID)
    msg = str(err.value)
    assert "DEVICE_MEMORY" in msg or "device" in msg.lower(), msg
    if err.value.code == grpc.StatusCode.FAILED_PRECONDITION:  # a daemon with the transport
        assert isinstance(err.value, conveyor.FailedPrecondition), type(err.value)
    assert err.value.details and err.value.details in msg  # the daemon's own words
    assert _idle(daemon)
    epoch = read_epoch(daemon.unix)  # host streams on the same daemon keep working
    assert epoch.transport == "shared_memory" and epoch.images.shape[0] > 0


def test_pin_memory_registers_the_region_once_and_unregisters_before_unmap(daemon, monkeypatch):
    registrar = RecordingRegistrar()
    monkeypatch.setattr(_pinning, "make_registrar", lambda: registrar)
    plain = read_epoch(daemon.unix)
    s = conveyor.open_stream(daemon.unix, "train", 8, pin_memory=True, credits=3)
    images = []
    with s:
        for b in s:
            images.append(b.images.copy())
    assert np.array_equal(np.concatenate(images), plain.images)
    assert len(registrar.calls) == 2, registrar.calls
    (reg, ptr, size, writable, mapped), (unreg, uptr, still_mapped) = registrar.calls
    assert (reg, unreg) == ("register", "unregister")
    assert size == s.region_bytes and size > 0 and writable and mapped
    assert uptr == ptr and still_mapped, "unregistered after the mapping went"


def test_pinned_region_with_views_alive_stays_readable(daemon, monkeypatch):
    registrar = RecordingRegistrar()
    monkeypatch.setattr(_pinning, "make_registrar", lambda: registrar)
    s = conveyor.open_stream(daemon.unix, "train", 8, pin_memory=True, credits=2, num_epochs=1,
                             lifetime="fast")
    kept = next(s).images
    first = kept.copy()
    s.close()
    assert [c[0] for c in registrar.calls] == ["register", "unregister"]
    assert np.array_equal(kept, first)  # still mapped: a view holds it


@pytest.mark.parametrize("credits", [1, 2, 4])
def test_device_option_yields_the_host_paths_bytes(daemon, monkeypatch, credits):
    """Slow model copies: a slot released before its copy completed would be
    refilled by the daemon and the copy would read another batch."""
    registrar = RecordingRegistrar()
    monkeypatch.setattr(_pinning, "make_registrar", lambda: registrar)
    monkeypatch.setattr(_cuda_copy, "make_copier", lambda device: ModelCopier(delay=0.03))
    plain = read_epoch(daemon.unix, credits=credits)
    plain_loader = conveyor.Loader(daemon.unix, pipeline="train", batch_size=8, credits=credits)
    plain_states = [plain_loader.state_dict() for _ in plain_loader.epoch(0)]
    plain_loader.close()
    loader = conveyor.Loader(daemon.unix, pipeline="train", batch_size=8, credits=credits,
                             device="cuda:0")
    got, labels, states = [], [], []
    with loader.epoch(0) as stream:
        for b in stream:
            assert isinstance(b, conveyor.DeviceBatch)
            got.append(b.images)
            labels.append(b.labels)
            states.append(loader.state_dict())
        assert stream.end is not None
    loader.close()
    assert np.array_equal(np.concatenate(got), plain.images)
    assert np.array_equal(np.concatenate(labels), plain.labels)
    assert states == plain_states, "the resume point ran ahead of the user"
    assert [c[0] for c in registrar.calls] == ["register", "unregister"]
    assert registrar.copying_at_unregister == 0, "region unpinned under a copy in flight"
    assert _idle(daemon)


def test_device_option_refuses_other_transports_and_retry(daemon, monkeypatch):
    monkeypatch.setattr(_pinning, "make_registrar", lambda: RecordingRegistrar())
    monkeypatch.setattr(_cuda_copy, "make_copier", lambda device: ModelCopier(delay=0))
    with pytest.raises(conveyor.InvalidRequest, match="copies from pinned shared memory"):
        conveyor.open_stream(daemon.unix, "train", 8, device="cuda:0", transport="inline")
    with pytest.raises(conveyor.InvalidRequest, match="with retry= is not supported"):
        conveyor.Loader(daemon.unix, pipeline="train", batch_size=8, device="cuda:0",
                        retry=conveyor.RetryPolicy())
    with pytest.raises(conveyor.InvalidRequest, match="gpu_uuid= is for"):
        conveyor.open_stream(daemon.unix, "train", 8, gpu_uuid=UUID)


# --- the daemon's host model of the device API (a test aid of conveyord) -----
HOST_MODEL_UUID = "GPU-8c5b0c1e-6f1d-4a2b-9c3d-0123456789ab"
HOST_MODEL = ["--device-api", "host-model", "--host-model-gpus", HOST_MODEL_UUID + ":1GiB"]


@pytest.fixture(scope="module")
def host_model_daemon(tmp_path_factory, dataset):
    """A daemon running the host model of the device API; skipped when this
    conveyord has no such flag (a build without the DEVICE_MEMORY transport)."""
    from conveyor.daemon import DaemonError
    from conveyor_integration import Daemon, daemon_config, finish_daemons, pipeline_entry

    root, _ = dataset
    cfg = daemon_config(root, pipelines={
        "f32": pipeline_entry(root, augment="eval", dtype="float32", resize_size=73),
        "f16": pipeline_entry(root, augment="eval", dtype="float16", resize_size=73),
        "u8": pipeline_entry(root, augment="eval", resize_size=73),
    })
    d = Daemon(tmp_path_factory.mktemp("hostmodel"), cfg, extra_args=HOST_MODEL)
    try:
        d.start()
    except DaemonError as e:
        if "device-api" in str(e) or "device_api" in str(e):
            pytest.skip("this conveyord has no --device-api host-model: %s" % str(e)[-300:])
        raise
    try:
        yield d
    finally:
        finish_daemons([d])


@pytest.mark.parametrize("pipeline", ["f32", "f16", "u8"])
def test_device_memory_batches_through_the_client_under_the_host_model(host_model_daemon,
                                                                       pipeline):
    """open_stream(transport="device_memory", gpu_uuid=...): the ring is
    fetched and mapped by the client; each batch is a DeviceArray whose
    bytes equal the host path's, read through DLPack without a copy."""
    import torch

    from conveyor.torch import batch_tensors

    d = host_model_daemon
    plain = read_epoch(d.unix, pipeline=pipeline, seed=3, credits=2, shuffle=False)
    s = conveyor.open_stream(d.unix, pipeline, 8, seed=3, credits=2, shuffle=False,
                             transport="device_memory", gpu_uuid=HOST_MODEL_UUID.lower())
    got = []
    with s:
        assert s.transport == "device_memory" and s.num_slots == 2
        for b in s:
            assert isinstance(b.images, conveyor.DeviceArray)
            cai = b.images.__cuda_array_interface__
            assert cai["typestr"] == {"f32": "<f4", "f16": "<f2", "u8": "|u1"}[pipeline]
            images, labels = batch_tensors(b)
            assert images.data_ptr() == cai["data"][0]  # no copy
            got.append(images.clone())
    assert np.array_equal(torch.cat(got).numpy(), plain.images)
    assert _idle(d)


def test_device_memory_kept_tensor_keeps_its_slot(host_model_daemon):
    import torch

    d = host_model_daemon
    s = conveyor.open_stream(d.unix, "u8", 8, seed=3, credits=2, shuffle=False, num_epochs=1,
                             transport="device_memory", gpu_uuid=HOST_MODEL_UUID)
    with s:
        first = next(s)
        kept = torch.from_dlpack(first.images)
        want = kept.clone()
        rest = [b.sequence for b in s]  # lifetime="safe": the kept tensor holds its slot
        assert rest and torch.equal(kept, want)
    assert s.end is not None
    del kept, first
    assert _idle(d)


def test_device_memory_unknown_gpu_is_failed_precondition(host_model_daemon):
    with pytest.raises(conveyor.FailedPrecondition) as err:
        conveyor.open_stream(host_model_daemon.unix, "u8", 8, transport="device_memory",
                             gpu_uuid="GPU-ffffffff-0000-0000-0000-000000000000")
    assert "ffffffff" in str(err.value).lower(), str(err.value)


# --- on a GPU host (skipped elsewhere) -----------------------------------------
def _gpu_config(root):
    from conveyor_integration import daemon_config, pipeline_entry

    return daemon_config(root, pipelines={
        "f32": pipeline_entry(root, augment="eval", dtype="float32", resize_size=73),
        "u8": pipeline_entry(root, augment="eval", resize_size=73),
    })


@needs_cuda
def test_cuda_pin_memory_gives_pinned_batches(daemon):
    import torch

    plain = read_epoch(daemon.unix)
    loader = conveyor.Loader(daemon.unix, pipeline="train", batch_size=8, pin_memory=True)
    got = []
    with loader.epoch(0) as stream:
        for b in stream:
            t = torch.from_numpy(b.images)
            assert t.is_pinned(), "the slot is not page-locked"
            got.append(t.cuda(non_blocking=True))
        torch.cuda.synchronize()
    loader.close()
    assert np.array_equal(torch.cat(got).cpu().numpy(), plain.images)


@needs_cuda
@pytest.mark.parametrize("credits", [1, 2, 4])
def test_cuda_device_option_yields_the_host_paths_bytes(daemon, credits):
    import torch

    plain = read_epoch(daemon.unix, credits=credits)
    loader = conveyor.Loader(daemon.unix, pipeline="train", batch_size=8, credits=credits,
                             device="cuda:0")
    got = []
    with loader.epoch(0) as stream:
        for b in stream:
            assert b.images.is_cuda
            # A step that takes a while: the next copies run meanwhile, and
            # a slot released before its copy would now be overwritten.
            got.append(b.images.clone())
            torch.cuda._sleep(1_000_000)
    loader.close()
    torch.cuda.synchronize()
    assert np.array_equal(torch.cat(got).cpu().numpy(), plain.images)


@needs_cuda
@pytest.mark.parametrize("pipeline", ["f32", "u8"])
def test_cuda_device_memory_transport_matches_the_host_path(daemon_factory, dataset, pipeline):
    """The daemon's DEVICE_MEMORY transport on the real GPU: its batches,
    converted on the GPU, equal the host path's bytes; torch reads them in
    place (CUDA Array Interface and DLPack)."""
    import torch

    root, _ = dataset
    d = daemon_factory(_gpu_config(root), name="gpu")
    plain = read_epoch(d.unix, pipeline=pipeline, seed=3, credits=2, shuffle=False)
    loader = conveyor.Loader(d.unix, pipeline=pipeline, batch_size=8, seed=3, credits=2,
                             shuffle=False, transport="device_memory", device="cuda:0")
    got = []
    with loader.epoch(0) as stream:
        assert stream.transport == "device_memory"
        for b in stream:
            assert isinstance(b.images, conveyor.DeviceArray)
            a = torch.as_tensor(b.images, device="cuda")
            t = torch.from_dlpack(b.images)
            assert a.data_ptr() == t.data_ptr() == b.images.ptr
            got.append(t.clone())
    loader.close()
    assert np.array_equal(torch.cat(got).cpu().numpy(), plain.images)
    assert _idle(d)


@needs_cuda
@pytest.mark.parametrize("transport", ["auto", "device_memory"])
def test_cuda_torch_loader_gives_cuda_images_and_labels(daemon, transport):
    import conveyor.torch

    plain = read_epoch(daemon.unix)
    train = conveyor.torch.TorchLoader(daemon.unix, pipeline="train", batch_size=8,
                                       transport=transport, device="cuda:0")
    images, labels = [], []
    for x, y in train:
        assert x.is_cuda and y.is_cuda
        images.append(x.clone())
        labels.append(y.clone())
    train.close()
    assert np.array_equal(np.concatenate([t.cpu().numpy() for t in images]), plain.images)
    assert np.array_equal(np.concatenate([t.cpu().numpy() for t in labels]), plain.labels)
