"""`threads: 0` counts the CPUs conveyord may use, not the machine's cores:
started under `taskset -c 0` on a machine with more CPUs, a real daemon runs
one worker thread (GetStats) and says where the number came from."""
import os
import shutil

import pytest

import conveyor
from conveyor_integration import Daemon, daemon_config, finish_daemons


class _PinnedDaemon(Daemon):
    """A Daemon started through `taskset -c CPUS`."""

    def __init__(self, workdir, config, cpus, **kwargs):
        super().__init__(workdir, config, **kwargs)
        self.cpus = cpus

    def command(self):
        return ["taskset", "-c", self.cpus] + super().command()


@pytest.mark.skipif(shutil.which("taskset") is None, reason="taskset (util-linux) missing")
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2,
                    reason="needs at least 2 CPUs to tell 1 from the machine's count")
def test_threads_zero_follows_the_affinity_mask(tmp_path, dataset):
    root, _ = dataset
    cpu = str(min(os.sched_getaffinity(0)))
    d = _PinnedDaemon(tmp_path / "daemon", daemon_config(root), cpu, threads=0, tcp=False)
    try:
        d.start()
        assert conveyor.stats(d.unix).num_threads == 1
        # The batches still flow with one worker.
        loader = conveyor.Loader(d.unix, pipeline="train", batch_size=8, credits=2)
        try:
            with loader.epoch(0) as stream:
                assert sum(b.num_samples for b in stream) > 0
        finally:
            loader.close()
    finally:
        finish_daemons([d])
    assert "threads: 0 -> 1 worker threads (affinity mask: 1 CPUs" in d.log()

