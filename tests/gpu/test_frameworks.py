"""Device batches (DEVICE_MEMORY) read without a copy by torch (DLPack), CuPy
(__cuda_array_interface__) and JAX (DLPack): each view points at the batch's device bytes
and holds what the host path delivers."""

import os

import conveyor_gpu as g

g.skip_without_gpu()

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # JAX: not 75% of the GPU

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import conveyor  # noqa: E402


def first_batches(address, name, n=2):
    """(indices, images object) of the first n batches, unreleased (the caller releases)."""
    loader = conveyor.Loader(address, name, batch_size=g.BATCH, seed=7,
                             transport="device_memory", device="cuda:0")
    stream = loader.epoch(0)
    it = iter(stream)
    batches = [next(it) for _ in range(n)]
    return loader, stream, batches


def check_each(daemon, name, view, to_host):
    ref = g.host_epoch(daemon.address, name)
    loader, stream, batches = first_batches(daemon.address, name)
    try:
        for n, b in enumerate(batches):
            images = b.images
            cai = images.__cuda_array_interface__
            assert hasattr(images, "__dlpack__") and hasattr(images, "__dlpack_device__")
            assert images.__dlpack_device__()[0] == 2  # kDLCUDA
            v = view(images)
            assert tuple(cai["shape"]) == ref[n][1].shape
            got = to_host(v)
            assert np.array_equal(b.indices, ref[n][0])
            assert np.array_equal(got.view(np.uint8), ref[n][1].view(np.uint8)), \
                "%s batch %d differs from the host path" % (name, n)
            assert cai["data"][0] != 0
            b.release()
    finally:
        stream.close()
        loader.close()


def test_torch_dlpack(daemon):
    import torch

    def view(images):
        t = torch.from_dlpack(images)
        assert t.is_cuda
        assert t.data_ptr() == images.__cuda_array_interface__["data"][0]
        return t

    check_each(daemon, "eval_float32", view, lambda t: t.cpu().numpy())


def test_cupy_cuda_array_interface(daemon):
    cupy = pytest.importorskip("cupy")

    def view(images):
        a = cupy.asarray(images)
        assert a.data.ptr == images.__cuda_array_interface__["data"][0]
        return a

    check_each(daemon, "eval_float16", view, lambda a: cupy.asnumpy(a))


def test_jax_dlpack(daemon):
    jax = pytest.importorskip("jax")
    try:
        jax.devices("gpu")
    except RuntimeError as e:
        pytest.skip("JAX has no GPU backend here: %s" % e)
    import jax.dlpack

    def view(images):
        a = jax.dlpack.from_dlpack(images)
        assert a.devices().pop().platform == "gpu"
        return a

    check_each(daemon, "eval_uint8", view, lambda a: np.asarray(a))
