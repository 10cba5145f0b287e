"""PyTorch: conveyor.torch's drop-in iterator (TorchLoader) and IterableDataset
(ConveyorDataset), fork safety of a Loader, DLPack, torchrun's environment,
what a DataLoader over a TorchLoader says, the install hint without torch,
and the package's extras against the README.

The loaders run against a real daemon; the reference for "the same batches"
is the plain Loader over the same pipeline, seed and epoch.
"""

import gc
import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.utils.data

import conveyor
import conveyor.torch as ctorch
from conveyor_integration import PYTHON, client_env, scaled, wait_for_child


def _epoch_indices(address, epoch, batch_size=8, rank=0, world_size=1, seed=0):
    loader = conveyor.Loader(address, pipeline="train", batch_size=batch_size, seed=seed,
                             rank=rank, world_size=world_size)
    try:
        return [b.indices.copy() for b in loader.epoch(epoch)]
    finally:
        loader.close()


def test_loader_made_in_the_parent_works_in_a_dataloader_worker(daemon):
    """The issue's case: a Loader whose channel the parent already used
    (pipeline_info) goes into DataLoader(num_workers=1), whose worker is a
    fork. The worker opens a connection of its own."""
    loader = conveyor.Loader(daemon.unix, pipeline="train", batch_size=8, seed=2)
    assert loader.pipeline_info().dataset_size == 48  # the parent's channel is open
    ds = ctorch.ConveyorDataset(loader)
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=1, timeout=scaled(60))
    got = [(x.clone(), y.clone()) for x, y in dl]
    assert len(got) == 6
    assert all(x.shape == (8, 3, 64, 64) and x.dtype == torch.uint8 for x, _ in got)
    # The parent's loader still works, and read the same epoch.
    ref = [b.labels.copy() for b in loader.epoch(0)]
    assert [y.numpy().tolist() for _, y in got] == [r.tolist() for r in ref]
    loader.close()


def test_len_of_a_loader_is_batches_per_epoch_of_this_rank(daemon):
    for world_size, drop_last in ((1, False), (3, False), (5, False), (5, True)):
        for rank in range(world_size):
            loader = conveyor.Loader(daemon.unix, pipeline="train", batch_size=4, rank=rank,
                                     world_size=world_size, drop_last=drop_last)
            n = len(loader)
            with loader.epoch(0) as stream:
                assert n == stream.batches_per_epoch == sum(1 for _ in stream), \
                    (world_size, rank, drop_last)
            loader.close()


def test_torch_loader_is_a_drop_in_iterator(daemon):
    tl = ctorch.TorchLoader(daemon.unix, pipeline="train", batch_size=8, seed=4)
    assert len(tl) == 6
    tl.set_epoch(1)
    seen = []
    for x, y in tl:
        assert isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)
        assert y.dtype == torch.int64
        seen.append(y.clone())
    assert len(seen) == 6
    ref = [b.labels for b in conveyor.Loader(daemon.unix, pipeline="train", batch_size=8,
                                              seed=4).epoch(1)]
    assert [s.tolist() for s in seen] == [r.tolist() for r in ref]
    tl.close()


def test_torch_loader_resumes_exactly(daemon):
    """state_dict after 2 batches of epoch 1, load into a new TorchLoader:
    the rest of epoch 1, then epoch 2 - the same samples as one run."""
    full = _epoch_indices(daemon.unix, 1, seed=6) + _epoch_indices(daemon.unix, 2, seed=6)
    tl = ctorch.TorchLoader(daemon.unix, pipeline="train", batch_size=8, seed=6,
                            yield_indices=True)
    tl.set_epoch(1)
    it = iter(tl)
    first = [next(it)[2].numpy().copy() for _ in range(2)]
    state = tl.state_dict()
    del it
    tl.close()

    tl2 = ctorch.TorchLoader(daemon.unix, pipeline="train", batch_size=8, seed=0,
                             yield_indices=True)
    tl2.load_state_dict(state)
    assert tl2.epoch == 1
    rest = [i.numpy().copy() for _, _, i in tl2]
    tl2.set_epoch(2)
    rest += [i.numpy().copy() for _, _, i in tl2]
    tl2.close()
    got = np.concatenate(first + rest)
    assert np.array_equal(got, np.concatenate(full))


def test_rank_and_world_size_come_from_torchrun_env(daemon):
    """RANK / WORLD_SIZE / LOCAL_RANK as torchrun sets them, in a process of
    their own: the iterator reads that rank's shard."""
    ref = np.concatenate(_epoch_indices(daemon.unix, 0, batch_size=4, rank=1, world_size=2))
    code = (
        "import sys, numpy as np, conveyor.torch as ct\n"
        "tl = ct.TorchLoader(sys.argv[1], pipeline='train', batch_size=4, yield_indices=True)\n"
        "assert (tl.rank, tl.world_size, tl.local_rank) == (1, 2, 1), (tl.rank, tl.world_size)\n"
        "print(len(tl)); print(' '.join(str(int(v)) for _, _, i in tl for v in i))\n")
    env = client_env()
    env.update(RANK="1", WORLD_SIZE="2", LOCAL_RANK="1")
    r = subprocess.run([PYTHON, "-c", code, daemon.unix], env=env, capture_output=True, text=True,
                       timeout=scaled(120))
    assert r.returncode == 0, r.stderr
    n, idx = r.stdout.splitlines()
    assert int(n) == 6
    assert [int(v) for v in idx.split()] == ref.tolist()


def test_dataset_refuses_several_workers_with_a_clear_error(daemon):
    ds = ctorch.ConveyorDataset(conveyor.Loader(daemon.unix, pipeline="train", batch_size=8))
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2, timeout=scaled(60))
    with pytest.raises(Exception, match="num_workers"):
        for _ in dl:
            pass


@pytest.mark.parametrize("from_dlpack", [np.from_dlpack, torch.from_dlpack],
                         ids=["numpy", "torch"])
def test_dlpack_reads_the_slot_without_a_copy_and_keeps_it(daemon, from_dlpack):
    """__dlpack__ / __dlpack_device__ of batch arrays (numpy's own, on a
    writable leased array): the consumer sees the slot's memory (same data
    pointer), and holding only the DLPack result keeps the slot leased."""
    loader = conveyor.Loader(daemon.unix, pipeline="train", batch_size=8, seed=9, credits=3)
    with loader.epoch(0) as stream:
        batch = next(stream)
        assert batch.images.__dlpack_device__() == (1, 0)  # kDLCPU
        ptr = batch.images.__array_interface__["data"][0]
        t = from_dlpack(batch.images)
        t_ptr = t.data_ptr() if isinstance(t, torch.Tensor) else t.__array_interface__["data"][0]
        assert t_ptr == ptr
        ref = np.array(t, copy=True)
        del batch
        gc.collect()
        for _ in range(3):
            next(stream)
        assert stream.leased >= 1
        assert np.array_equal(np.asarray(t), ref)
        before = stream.leased
        del t
        gc.collect()
        assert stream.leased == before - 1
    loader.close()


def test_a_plain_fork_child_opens_its_own_connection(daemon):
    """A Loader used in the parent, then used in an os.fork() child: the
    child reads an epoch on a connection of its own (exit status 0), and the
    parent's loader goes on working."""
    loader = conveyor.Loader(daemon.unix, pipeline="train", batch_size=8)
    assert len(loader) == 6
    pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        code = 3
        try:
            code = 0 if sum(b.num_samples for b in loader.epoch(0)) == 48 else 2
        finally:
            os._exit(code)
    assert wait_for_child(pid, 60, "the forked child's epoch") == 0
    assert sum(b.num_samples for b in loader.epoch(1)) == 48
    loader.close()


def test_a_dataloader_over_a_torch_loader_says_what_to_do(daemon):
    """DataLoader(TorchLoader(...)) - a loader where a dataset belongs: its
    first batch raises TypeError saying to iterate the TorchLoader, or to
    wrap ConveyorDataset in a DataLoader (not "not subscriptable")."""
    tl = ctorch.TorchLoader(daemon.unix, pipeline="train", batch_size=8)
    dl = torch.utils.data.DataLoader(tl, batch_size=None)
    with pytest.raises(TypeError) as e:
        next(iter(dl))
    msg = str(e.value)
    assert "TorchLoader is the loader; iterate it directly" in msg, msg
    assert "wrap ConveyorDataset in a DataLoader" in msg, msg
    assert "subscriptable" not in msg, msg
    # The way it names works, and the loader itself is unharmed.
    dl = torch.utils.data.DataLoader(ctorch.ConveyorDataset(tl.loader), batch_size=None)
    assert sum(x.shape[0] for x, _ in dl) == 48
    # A plain Loader in the same place says the same.
    with pytest.raises(TypeError) as e:
        next(iter(torch.utils.data.DataLoader(tl.loader, batch_size=None)))
    assert "wrap it in a DataLoader as DataLoader(conveyor.torch.ConveyorDataset" in str(e.value)
    assert sum(x.shape[0] for x, _ in tl) == 48
    tl.close()


# The hint of an adapter whose framework is missing, whichever adapter:
# "<adapter> needs <module>, which is not installed in this interpreter (...):
# pip install <package>".
HINT = re.compile(r"^(conveyor\.\w+) needs (\w+), which is not installed in this interpreter "
                  r"\(.*\): pip install (.+)$")


def _hint_without(module, code):
    """The ImportError message of `code` run in a fresh interpreter where
    `module` cannot be imported (None in sys.modules, as if not installed)."""
    shim = "import sys\nsys.modules[%r] = None\n" % module
    run = ("try:\n" + "".join("    %s\n" % line for line in code.splitlines())
           + "except ImportError as e:\n    print(e)\nelse:\n    print('imported')\n")
    r = subprocess.run([PYTHON, "-c", shim + run], capture_output=True, text=True,
                       env=client_env(), timeout=scaled(60))
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_import_without_torch_names_the_package_like_jax_and_tensorflow():
    torch_hint = _hint_without("torch", "import conveyor.torch")
    m = HINT.match(torch_hint)
    assert m, torch_hint
    assert m.group(1, 2) == ("conveyor.torch", "torch"), torch_hint
    assert m.group(3).startswith("torch "), torch_hint
    # CPU-only hosts get the CPU index, the one the README names.
    assert "--index-url %s" % TORCH_CPU_INDEX in m.group(3), torch_hint
    for module, code in (("jax", "import conveyor.jax as cj\ncj.batch_sharding()"),
                         ("tensorflow", "import conveyor.tensorflow as ct\nct.dataset(None)")):
        hint = _hint_without(module, code)
        m = HINT.match(hint)
        assert m and m.group(2) == module, hint
    # conveyor itself imports without torch.
    assert _hint_without("torch", "import conveyor") == "imported"


TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def test_package_metadata_says_what_the_readme_says_about_extras():
    """pyproject.toml's extras are the ones client/python/README.md installs;
    none pulls PyPI's torch (whose Linux wheels are CUDA builds with several
    GB of nvidia-* wheels): the README installs torch from the CPU index on
    CPU hosts, and the ImportError of conveyor.torch names the same index."""
    import tomllib
    from conveyor import _framework

    client = Path(conveyor.__file__).resolve().parents[1]
    meta = tomllib.loads((client / "pyproject.toml").read_text())["project"]
    extras = meta.get("optional-dependencies", {})
    readme = (client / "README.md").read_text()
    named = set(re.findall(r"\./client/python\[(\w+)\]", readme))
    assert named == set(extras), (named, sorted(extras))
    requirement = re.compile(r"^\s*([A-Za-z0-9_.-]+)")
    for extra, reqs in extras.items():
        names = {requirement.match(r).group(1).lower() for r in reqs}
        assert "torch" not in names, (extra, reqs)
    for r in meta["dependencies"]:
        assert requirement.match(r).group(1).lower() != "torch", r
    install = readme[readme.index("## Install"):readme.index("## Use")]
    assert "pip install torch --index-url %s" % TORCH_CPU_INDEX in install, install
    assert TORCH_CPU_INDEX in _framework.TORCH_PIP
