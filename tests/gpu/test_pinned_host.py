"""Pinned host delivery (Loader(pin_memory=True), SHARED_MEMORY): the mapped slots are
page-locked for this process's CUDA context, so torch sees them as pinned and
`.cuda(non_blocking=True)` is an asynchronous copy; what lands on the GPU is what the
unpinned host path delivers."""

import conveyor_gpu as g

g.skip_without_gpu()

import torch  # noqa: E402

import conveyor  # noqa: E402


def test_pinned_slots_copy_to_the_gpu_unchanged(daemon):
    ref = g.host_epoch(daemon.address, "eval_uint8")
    got = []
    side = torch.cuda.Stream()
    with conveyor.Loader(daemon.address, "eval_uint8", batch_size=g.BATCH, seed=7,
                         pin_memory=True) as loader:
        with loader.epoch(0) as stream:
            assert stream.transport == "shared_memory"
            for b in stream:
                host = torch.from_numpy(b.images)
                assert host.is_pinned(), "batch %d: the slot is not page-locked" % len(got)
                with torch.cuda.stream(side):
                    dev = host.cuda(non_blocking=True)
                    done = torch.cuda.Event()
                    done.record(side)
                done.synchronize()  # the slot goes back only once its copy is done
                got.append((b.indices.copy(), dev.cpu().numpy()))
                del host
                b.release()
    g.assert_same_epoch(ref, got, "pin_memory")


def test_pinned_loaders_open_and_close_repeatedly(daemon):
    """Each close unregisters its region: 20 loaders in a row keep working (a registration
    left behind for an unmapped region would make a later register of the same address
    fail)."""
    for i in range(20):
        with conveyor.Loader(daemon.address, "eval_uint8", batch_size=g.BATCH, seed=i,
                             pin_memory=True) as loader:
            with loader.epoch(0) as stream:
                b = next(iter(stream))
                assert torch.from_numpy(b.images).is_pinned()
                b.release()
