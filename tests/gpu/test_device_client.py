"""Device delivery from the client (Loader(device="cuda:0")): each batch is copied from its
pinned slot on the loader's own CUDA stream and its slot is released only after the copy's
event completed. The batches equal the host path's byte for byte, also with one credit while
another stream keeps the copy engines busy (a slot released before its copy finished would be
refilled by the daemon under the copy and show up as differing bytes)."""

import conveyor_gpu as g

g.skip_without_gpu()

import torch  # noqa: E402

import conveyor  # noqa: E402


def device_epoch(address, name, credits=3, hammer=None, seed=7):
    got = []
    with conveyor.Loader(address, name, batch_size=g.BATCH, seed=seed, credits=credits,
                         device="cuda:0") as loader:
        with loader.epoch(0) as stream:
            for b in stream:
                if hammer is not None:
                    hammer()
                t = g.as_torch(b.images)
                assert t.is_cuda and t.device.index == 0, t.device
                got.append((b.indices.copy(), g.host_bytes(t)))
                b.release()
    return got


def test_device_batches_match_the_host_path(daemon):
    for name in ("eval_uint8", "eval_float32"):
        g.assert_same_epoch(g.host_epoch(daemon.address, name), device_epoch(daemon.address, name),
                            "device=cuda:0 %s" % name)


def test_slot_released_only_after_its_copy(daemon):
    src = torch.empty(256 << 20, dtype=torch.uint8).pin_memory()
    dst = torch.empty(256 << 20, dtype=torch.uint8, device="cuda:0")
    busy = torch.cuda.Stream()

    def hammer():  # 256 MiB host->device on another stream before each batch
        with torch.cuda.stream(busy):
            dst.copy_(src, non_blocking=True)

    ref = g.host_epoch(daemon.address, "train_uint8", seed=11)
    for _ in range(3):
        g.assert_same_epoch(ref, device_epoch(daemon.address, "train_uint8", credits=1,
                                              hammer=hammer, seed=11), "credits=1 under load")
    torch.cuda.synchronize()
