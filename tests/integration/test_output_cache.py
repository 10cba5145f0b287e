"""`cache_output: true` on a real daemon with real JPEGs: an eval pipeline's
second epoch comes from the cache of its output (GetStats counts one hit per
sample), byte-identical to its first epoch and to the same pipeline without
the cache; with the daemon's `cache` section the output is kept on disk
too, so a new daemon over the same folder decodes nothing; a pipeline that
draws random numbers (`augment: train`) is refused at config load, naming
the field and why."""

import json
import signal
import subprocess

import conveyor
import numpy as np

from conveyor_integration import (CLI, CONVEYORD, PYTHON, client_env, daemon_config,
                                  pipeline_entry, read_epoch, require_daemon, scaled,
                                  wait_until, write_config)


def _cache_stats(address, pipeline):
    (c,) = [c for c in conveyor.stats(address).output_caches if c.pipeline == pipeline]
    return c


def _by_index(e):
    order = np.argsort(e.indices, kind="stable")
    return e.indices[order], e.labels[order], e.images[order]


def test_eval_epochs_after_the_first_come_from_the_cache(daemon_factory, dataset):
    root, samples = dataset
    d = daemon_factory(daemon_config(root, pipelines={
        "cached": pipeline_entry(root, augment="eval", cache_output=True,
                                 cache_output_bytes="64MiB"),
        "plain": pipeline_entry(root, augment="eval"),
    }))
    n = len(samples)
    # Its bound is said at start, beside the slots' memory budget.
    assert "pipeline cached: output cache (cache_output) of up to 64.0 MiB" in d.log()
    first = read_epoch(d.unix, pipeline="cached", batch_size=8, epoch=0)
    c = _cache_stats(d.unix, "cached")
    assert (c.hits, c.misses, c.inserts, c.entries) == (0, n, n, n)
    assert 0 < c.bytes <= c.capacity_bytes == 64 << 20

    second = read_epoch(d.unix, pipeline="cached", batch_size=8, epoch=1)
    c = _cache_stats(d.unix, "cached")
    assert c.hits == n and c.misses == n and c.evictions == 0
    # Epoch 1 draws another order: the same samples, byte for byte.
    for a, b in zip(_by_index(first), _by_index(second)):
        np.testing.assert_array_equal(a, b)
    # The same epoch again: the same batches, in the same order.
    again = read_epoch(d.unix, pipeline="cached", batch_size=8, epoch=0)
    np.testing.assert_array_equal(again.images, first.images)
    np.testing.assert_array_equal(again.indices, first.indices)
    np.testing.assert_array_equal(again.labels, first.labels)
    assert _cache_stats(d.unix, "cached").hits == 2 * n

    # The pipeline without the cache serves the same bytes.
    plain = read_epoch(d.unix, pipeline="plain", batch_size=8, epoch=0)
    np.testing.assert_array_equal(plain.images, first.images)
    np.testing.assert_array_equal(plain.indices, first.indices)
    assert [c.pipeline for c in conveyor.stats(d.unix).output_caches] == ["cached"]

    # `conveyor stats` shows it, as text and as JSON.
    def cli(*args):
        res = subprocess.run([PYTHON, str(CLI), "stats", "--server", d.unix] + list(args),
                             capture_output=True, text=True, timeout=scaled(60),
                             env=client_env())
        assert res.returncode == 0, res.stderr
        return res.stdout
    assert "pipeline cached: hits %d  misses %d  evictions 0  %d samples" % (2 * n, n, n) \
        in cli()
    (doc,) = json.loads(cli("--json"))["output_caches"]
    assert (doc["pipeline"], doc["hits"], doc["misses"], doc["entries"]) == ("cached", 2 * n, n, n)



def test_with_the_node_cache_output_outlives_the_daemon(daemon_factory, dataset, tmp_path):
    root, samples = dataset
    n = len(samples)
    cfg = daemon_config(root, pipelines={
        "cached": pipeline_entry(root, augment="eval", cache_output=True,
                                 cache_output_bytes="64MiB")})
    cfg["cache"] = {"dir": str(tmp_path / "node-cache"), "max_bytes": "256MiB"}
    first_daemon = daemon_factory(cfg)
    first = read_epoch(first_daemon.unix, pipeline="cached", batch_size=8, epoch=0)
    # One entry of the node cache per sample.
    assert len(list((tmp_path / "node-cache").glob("*.obj"))) == n
    assert conveyor.stats(first_daemon.unix).object_cache.entries == n
    first_daemon.stop()

    # A new daemon over the same folder: its memory is empty, every sample
    # comes from disk, nothing is decoded.
    d = daemon_factory(cfg)
    again = read_epoch(d.unix, pipeline="cached", batch_size=8, epoch=0)
    c = _cache_stats(d.unix, "cached")
    assert (c.hits, c.misses) == (n, 0)
    np.testing.assert_array_equal(again.images, first.images)
    np.testing.assert_array_equal(again.indices, first.indices)
    np.testing.assert_array_equal(again.labels, first.labels)


def _reload(d, cfg):
    """Writes `cfg`, sends SIGHUP and waits for the reload to be applied."""
    write_config(d.config_path, cfg)
    before = d.log().count("config reloaded")
    d.signal(signal.SIGHUP)
    assert wait_until(lambda: d.log().count("config reloaded") > before or d.poll() is not None,
                      60), d.log_tail()
    assert d.poll() is None, d.log_tail()


def test_a_reload_keeps_the_cache_and_never_serves_old_output(daemon_factory, dataset):
    root, samples = dataset
    n = len(samples)

    def config(**fields):
        return daemon_config(root, pipelines={
            "cached": pipeline_entry(root, augment="eval", cache_output=True, **fields)})
    d = daemon_factory(config(size=64, cache_output_bytes="32MiB"))
    at_64 = read_epoch(d.unix, pipeline="cached", batch_size=16)
    assert at_64.images.shape[1:] == (3, 64, 64)

    # Another output size: the same cache (its counters go on), new keys.
    _reload(d, config(size=48, cache_output_bytes="32MiB"))
    at_48 = read_epoch(d.unix, pipeline="cached", batch_size=16)
    assert at_48.images.shape[1:] == (3, 48, 48)
    c = _cache_stats(d.unix, "cached")
    assert (c.hits, c.misses, c.entries) == (0, 2 * n, 2 * n)
    again = read_epoch(d.unix, pipeline="cached", batch_size=16)
    np.testing.assert_array_equal(again.images, at_48.images)
    assert _cache_stats(d.unix, "cached").hits == n

    # Another bound: a new, empty cache.
    _reload(d, config(size=48, cache_output_bytes="16MiB"))
    c = _cache_stats(d.unix, "cached")
    assert (c.hits, c.misses, c.entries, c.capacity_bytes) == (0, 0, 0, 16 << 20)


def test_a_random_pipeline_with_cache_output_is_refused(tmp_path, dataset):
    require_daemon()
    root, _ = dataset
    config = write_config(tmp_path / "conveyord.yaml", daemon_config(
        root, pipelines={"train": pipeline_entry(root, augment="train", cache_output=True)}))
    done = subprocess.run([str(CONVEYORD), "--config", str(config), "--check-config"],
                          capture_output=True, text=True, timeout=scaled(60))
    assert done.returncode != 0
    out = done.stdout + done.stderr
    assert "pipelines.train.cache_output" in out, out
    assert "draws random numbers" in out and "augment: train" in out, out
