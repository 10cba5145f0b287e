"""The node-local cache of remote objects (the daemon's `cache` section)
against a real conveyord and the test HTTP object server on loopback, which
counts the bodies it sends (GETs) and the HEADs it answers: epoch 2 of a
dataset that fits makes no body request and delivers the same bytes as an
uncached pipeline, and no request at all when the server declared its
objects fresh (Cache-Control: max-age); two pipelines reading at once fetch each object once; an
object replaced upstream is fetched again; a daemon killed with SIGKILL
while filling leaves a cache folder that the next daemon reads back byte for
byte; a cache on a full disk (a tiny tmpfs) turns read-only and fails no
read."""

import os
import threading
from pathlib import Path

import numpy as np
import pytest

from conveyor_integration import (IMAGE_SIZE, daemon_config, make_image_folder, pipeline_entry,
                                  read_epoch)
from remote_fixtures import ObjectServer, image_files, write_url_list


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    root = tmp_path_factory.mktemp("images")
    make_image_folder(root, classes=3, per_class=12)
    return root, image_files(root)


def url_pipeline(urls_file, **overrides):
    entry = pipeline_entry("unused", augment="eval", resize_size=IMAGE_SIZE, **overrides)
    entry["dataset"] = {"urls": str(urls_file)}
    return entry


def cache_config(tmp_path, pipelines, cache_dir, max_bytes="64MiB"):
    cfg = daemon_config(tmp_path, pipelines=pipelines)
    cfg["allowed_roots"] = [str(tmp_path)]
    cfg["remote"] = {"initial_backoff_ms": 5, "max_backoff_ms": 50}
    cfg["cache"] = {"dir": str(cache_dir), "max_bytes": max_bytes}
    return cfg


def bodies(server):
    return sum(server.stats()["served"].values())


def check_epoch(got, n):
    assert sorted(got.indices.tolist()) == list(range(n)), "every sample exactly once"
    assert got.labels.tolist() == got.indices.tolist(), "each sample's own bytes and label"


def cache_files(cache_dir):
    return sorted(p.name for p in Path(cache_dir).iterdir())


def test_epoch_two_makes_no_body_request_and_matches_the_network(images, tmp_path,
                                                                  daemon_factory):
    root, files = images
    server = ObjectServer(root)
    try:
        urls = write_url_list(tmp_path / "urls.tsv", ["%s/%s" % (server.base, f) for f in files])
        cfg = cache_config(tmp_path, {"cached": url_pipeline(urls),
                                      "uncached": url_pipeline(urls, cache=False)},
                           tmp_path / "cache")
        d = daemon_factory(cfg)
        first = read_epoch(d.unix, pipeline="cached", batch_size=8, seed=3, epoch=0)
        check_epoch(first, len(files))
        assert bodies(server) == len(files), "epoch 1 fetches each object once"
        heads_before = sum(server.stats()["heads"].values())
        second = read_epoch(d.unix, pipeline="cached", batch_size=8, seed=3, epoch=1)
        check_epoch(second, len(files))
        st = server.stats()
        assert sum(st["served"].values()) == len(files), "epoch 2 asked for no body: %r" % st
        assert sum(st["heads"].values()) - heads_before == len(files), "revalidated at open"
        # The same epoch read past the cache (cache: false) gives the same bytes.
        ref = read_epoch(d.unix, pipeline="uncached", batch_size=8, seed=3, epoch=1)
        assert bodies(server) == 2 * len(files), "cache: false reads from the network"
        np.testing.assert_array_equal(second.indices, ref.indices)
        assert second.images.tobytes() == ref.images.tobytes(), "cached bytes differ"
        assert len([n for n in cache_files(tmp_path / "cache") if n.endswith(".obj")]) == \
            len(files)
        # GetStats: epoch 1 missed every object, epoch 2 hit every one.
        import conveyor
        c = conveyor.stats(d.unix).object_cache
        assert (c.hits, c.misses, c.entries, c.evictions) == (len(files), len(files), len(files), 0)
        assert c.bytes_from_cache == c.bytes_from_network > 0
        assert c.bytes_held >= c.bytes_from_cache and c.dir == str(tmp_path / "cache")
    finally:
        server.stop()


def test_objects_declared_fresh_are_served_without_asking_the_server(images, tmp_path,
                                                                      daemon_factory):
    root, files = images
    # Cache-Control: max-age=600 on every answer: the server's word that an
    # object stays as it is for 10 minutes.
    server = ObjectServer(root, "--max-age", "600")
    try:
        urls = write_url_list(tmp_path / "urls.tsv", ["%s/%s" % (server.base, f) for f in files])
        cfg = cache_config(tmp_path, {"cached": url_pipeline(urls)}, tmp_path / "cache")
        d = daemon_factory(cfg)
        first = read_epoch(d.unix, pipeline="cached", batch_size=8, seed=3, epoch=0)
        check_epoch(first, len(files))
        before = server.stats()
        assert sum(before["served"].values()) == len(files)
        second = read_epoch(d.unix, pipeline="cached", batch_size=8, seed=3, epoch=1)
        check_epoch(second, len(files))
        after = server.stats()
        assert after["served"] == before["served"], "epoch 2 asked for no body"
        assert after["heads"] == before["heads"], "nor revalidated what is fresh"
        assert after["requests"] == before["requests"], "no request at all (/__stats is not counted)"
        ref = read_epoch(d.unix, pipeline="cached", batch_size=8, seed=3, epoch=0)
        assert ref.images.tobytes() == first.images.tobytes()
    finally:
        server.stop()


def test_two_pipelines_reading_at_once_fetch_each_object_once(images, tmp_path,
                                                              daemon_factory):
    root, files = images
    server = ObjectServer(root, "--latency-ms", "10")
    try:
        urls = write_url_list(tmp_path / "urls.tsv", ["%s/%s" % (server.base, f) for f in files])
        cfg = cache_config(tmp_path, {"a": url_pipeline(urls), "b": url_pipeline(urls)},
                           tmp_path / "cache")
        d = daemon_factory(cfg)
        got, errors = {}, []

        def read(name, seed):
            try:
                got[name] = read_epoch(d.unix, pipeline=name, batch_size=4, seed=seed, epoch=0)
            except Exception as e:  # reported on the main thread
                errors.append(e)

        threads = [threading.Thread(target=read, args=(n, s)) for n, s in (("a", 1), ("b", 2))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        for name in ("a", "b"):
            check_epoch(got[name], len(files))
        served = server.stats()["served"]
        assert sorted(served.values()) == [1] * len(files), "each object fetched once: %r" % served
    finally:
        server.stop()


def test_an_object_replaced_upstream_is_fetched_again(images, tmp_path, daemon_factory):
    root, files = images
    # A copy of the images the test may change.
    import shutil
    served_root = tmp_path / "served"
    shutil.copytree(root, served_root)
    server = ObjectServer(served_root)
    try:
        urls = write_url_list(tmp_path / "urls.tsv", ["%s/%s" % (server.base, f) for f in files])
        cfg = cache_config(tmp_path, {"cached": url_pipeline(urls),
                                      "uncached": url_pipeline(urls, cache=False)},
                           tmp_path / "cache")
        d = daemon_factory(cfg)
        check_epoch(read_epoch(d.unix, pipeline="cached", batch_size=8, seed=1, epoch=0),
                    len(files))
        # Object 0 becomes object 1's image (a new file renamed over it).
        tmp = served_root / (files[0] + ".new")
        tmp.write_bytes((served_root / files[1]).read_bytes())
        os.replace(tmp, served_root / files[0])
        before = server.stats()["served"]
        got = read_epoch(d.unix, pipeline="cached", batch_size=8, seed=1, epoch=0)
        after = server.stats()["served"]
        changed = "/" + files[0]
        assert after[changed] == before[changed] + 1, "the replaced object was fetched again"
        assert sum(after.values()) == sum(before.values()) + 1, "only it"
        ref = read_epoch(d.unix, pipeline="uncached", batch_size=8, seed=1, epoch=0)
        assert got.images.tobytes() == ref.images.tobytes(), "the new version was served"
        i0 = int(np.where(got.indices == 0)[0][0])
        i1 = int(np.where(got.indices == 1)[0][0])
        assert got.images[i0].tobytes() == got.images[i1].tobytes()
    finally:
        server.stop()


def test_killed_mid_fill_leaves_nothing_served_that_is_wrong(images, tmp_path, daemon_factory,
                                                             restart_daemon):
    root, files = images
    # Slow bodies: the daemon is killed while objects are being fetched and kept.
    server = ObjectServer(root, "--latency-ms", "30")
    try:
        urls = write_url_list(tmp_path / "urls.tsv", ["%s/%s" % (server.base, f) for f in files])
        cache_dir = tmp_path / "cache"
        cfg = cache_config(tmp_path, {"cached": url_pipeline(urls),
                                      "uncached": url_pipeline(urls, cache=False)}, cache_dir)
        d = daemon_factory(cfg)
        import conveyor
        loader = conveyor.Loader(d.unix, pipeline="cached", batch_size=4, seed=2, credits=1)
        try:
            with loader.epoch(0) as stream:
                next(iter(stream))  # some objects are in, others on their way
                d.kill()            # SIGKILL
        except Exception:
            pass
        finally:
            try:
                loader.close()
            except Exception:
                pass
        # What a killed writer may leave: a temporary file; and a torn entry.
        (cache_dir / "tmp.1.1.0123456789abcdef.obj").write_bytes(b"part of an object")
        entries = [n for n in cache_files(cache_dir) if n.endswith(".obj") and
                   not n.startswith("tmp.")]
        assert entries, "some objects were kept before the kill"
        torn = cache_dir / entries[0]
        torn.write_bytes(torn.read_bytes()[:-5])
        d2 = restart_daemon(d)
        assert not [n for n in cache_files(cache_dir) if n.startswith("tmp.")], \
            "temporary files removed at start"
        got = read_epoch(d2.unix, pipeline="cached", batch_size=8, seed=2, epoch=0)
        check_epoch(got, len(files))
        ref = read_epoch(d2.unix, pipeline="uncached", batch_size=8, seed=2, epoch=0)
        np.testing.assert_array_equal(got.indices, ref.indices)
        assert got.images.tobytes() == ref.images.tobytes(), "read back byte for byte"
        # And now every object is in: another epoch asks for no body.
        n = bodies(server)
        check_epoch(read_epoch(d2.unix, pipeline="cached", batch_size=8, seed=2, epoch=1),
                    len(files))
        assert bodies(server) == n
    finally:
        server.stop()


def test_a_full_disk_turns_the_cache_read_only_and_fails_no_read(images, tmp_path,
                                                                  daemon_factory):
    """The cache folder on a 64 KiB tmpfs (root may mount one; skipped
    where mount is refused): the disk fills during epoch 1, the cache says
    so once and keeps what it holds, every read of every epoch succeeds."""
    import subprocess
    root, files = images
    small = tmp_path / "small"
    small.mkdir()
    if os.geteuid() != 0 or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(small)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here")
    server = ObjectServer(root)
    try:
        total = sum((root / f).stat().st_size for f in files)
        assert total > 2 * 64 * 1024, "the dataset is larger than the disk"
        urls = write_url_list(tmp_path / "urls.tsv", ["%s/%s" % (server.base, f) for f in files])
        cfg = cache_config(tmp_path, {"cached": url_pipeline(urls),
                                      "uncached": url_pipeline(urls, cache=False)},
                           small / "cache", max_bytes="16MiB")
        d = daemon_factory(cfg)
        import conveyor
        for epoch in (0, 1):
            got = read_epoch(d.unix, pipeline="cached", batch_size=8, seed=4, epoch=epoch)
            check_epoch(got, len(files))
        ref = read_epoch(d.unix, pipeline="uncached", batch_size=8, seed=4, epoch=1)
        assert got.images.tobytes() == ref.images.tobytes()
        c = conveyor.stats(d.unix).object_cache
        assert c.read_only, "the full disk was seen"
        assert 0 < c.entries < len(files) and c.hits > 0
        assert d.log().count("the disk is full") == 1, "said once"
    finally:
        server.stop()
        # Lazy: the daemon (stopped at teardown) still holds the folder's lock.
        subprocess.run(["umount", "-l", str(small)], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)


def test_remote_tar_shards_are_cached_whole_and_epoch_two_asks_for_no_body(
        images, tmp_path, daemon_factory):
    """dataset.shards URLs through the cache: epoch 1 reads members over
    the network and fetches each shard whole once in the background; once
    they are in, an epoch asks for no body and gives the bytes of the same
    shards read past the cache."""
    from conveyor_integration import wait_until, write_shards
    root, files = images
    paths = write_shards(root, [(f, i) for i, f in enumerate(files)], tmp_path / "shards",
                         per_shard=12)
    server = ObjectServer(tmp_path / "shards")
    try:
        pattern = server.base + "/shard-{000000..%06d}.tar" % (len(paths) - 1)
        entry = pipeline_entry("unused", augment="eval", resize_size=IMAGE_SIZE,
                               dataset={"shards": pattern, "shuffle_buffer": 5})
        plain = pipeline_entry("unused", augment="eval", resize_size=IMAGE_SIZE,
                               dataset={"shards": pattern, "shuffle_buffer": 5}, cache=False)
        cfg = cache_config(tmp_path, {"cached": entry, "uncached": plain}, tmp_path / "cache")
        d = daemon_factory(cfg)
        import conveyor
        first = read_epoch(d.unix, pipeline="cached", batch_size=8, seed=6, epoch=0)
        assert sorted(first.indices.tolist()) == list(range(len(files)))
        assert wait_until(lambda: conveyor.stats(d.unix).object_cache.entries == len(paths),
                          timeout=30), conveyor.stats(d.unix).object_cache
        before = bodies(server)
        got = read_epoch(d.unix, pipeline="cached", batch_size=8, seed=6, epoch=1)
        assert bodies(server) == before, "the cached epoch asked for no body"
        ref = read_epoch(d.unix, pipeline="uncached", batch_size=8, seed=6, epoch=1)
        assert bodies(server) > before, "cache: false reads the network"
        np.testing.assert_array_equal(got.indices, ref.indices)
        assert got.images.tobytes() == ref.images.tobytes(), "cached shard bytes differ"
    finally:
        server.stop()
