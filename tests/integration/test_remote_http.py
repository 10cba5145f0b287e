"""Datasets of URLs (dataset.urls) read by a real conveyord from a real HTTP
server on loopback (http_object_server.py): under induced latency, 5xx
answers and dropped connections every sample of each epoch comes exactly
once with its own bytes; a missing object is an error of its sample naming
the URL; an unreachable host is retried, then ends the stream UNAVAILABLE
naming the host."""

import numpy as np
import pytest

import conveyor
from conveyor_integration import (IMAGE_SIZE, daemon_config, make_image_folder, pipeline_entry,
                                  read_epoch, scaled)
from remote_fixtures import ObjectServer, image_files, write_url_list


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    root = tmp_path_factory.mktemp("images")
    make_image_folder(root, classes=3, per_class=16)
    return root, image_files(root)


def url_pipeline(urls_file, **overrides):
    entry = pipeline_entry("unused", augment="eval", resize_size=IMAGE_SIZE, **overrides)
    entry["dataset"] = {"urls": str(urls_file)}
    return entry


def remote_config(tmp_path, pipelines, **remote):
    cfg = daemon_config(tmp_path, pipelines=pipelines)
    cfg["allowed_roots"] = [str(tmp_path)]
    cfg["remote"] = dict({"initial_backoff_ms": 5, "max_backoff_ms": 50}, **remote)
    return cfg


def check_epoch(got, n):
    assert sorted(got.indices.tolist()) == list(range(n)), "every sample exactly once"
    assert got.labels.tolist() == got.indices.tolist(), "each sample's own bytes and label"
    assert got.end.samples == n


def test_faults_lose_nothing_and_repeat_nothing(images, tmp_path, daemon_factory):
    root, files = images
    server = ObjectServer(root, "--latency-ms", "5", "--fail-fraction", "0.15",
                          "--drop-fraction", "0.1", "--seed", "3")
    try:
        urls = write_url_list(tmp_path / "urls.tsv", ["%s/%s" % (server.base, f) for f in files])
        # The same images from disk, for byte comparison.
        local = write_url_list(tmp_path / "local.tsv", files)
        local_entry = pipeline_entry(str(root), augment="eval", resize_size=IMAGE_SIZE)
        local_entry["dataset"] = {"list": str(local), "root": str(root)}
        cfg = remote_config(tmp_path, {"http": url_pipeline(urls, error_policy="fail_fast"),
                                       "disk": local_entry},
                            max_attempts=20, max_connections_per_host=8)
        cfg["allowed_roots"].append(str(root))
        d = daemon_factory(cfg)
        for epoch in (0, 1):
            got = read_epoch(d.unix, pipeline="http", batch_size=8, seed=5, epoch=epoch)
            check_epoch(got, len(files))
            ref = read_epoch(d.unix, pipeline="disk", batch_size=8, seed=5, epoch=epoch)
            np.testing.assert_array_equal(got.indices, ref.indices)
            assert got.images.tobytes() == ref.images.tobytes(), "bytes differ from the disk's"
        st = server.stats()
        assert st["failed"] > 0 and st["dropped"] > 0, "the faults were induced: %r" % st
    finally:
        server.stop()


def test_missing_object_is_an_error_of_its_sample(images, tmp_path, daemon_factory):
    root, files = images
    server = ObjectServer(root)
    try:
        urls = ["%s/%s" % (server.base, f) for f in files]
        urls[5] = server.base + "/no/such/object.jpg"
        write_url_list(tmp_path / "urls.tsv", urls)
        d = daemon_factory(remote_config(tmp_path, {
            "skip": url_pipeline(tmp_path / "urls.tsv", failure_rate_min_samples=1000),
            "fast": url_pipeline(tmp_path / "urls.tsv", error_policy="fail_fast")}))
        got = read_epoch(d.unix, pipeline="skip", batch_size=8, seed=1, epoch=0)
        assert sorted(got.indices.tolist()) == [i for i in range(len(files)) if i != 5]
        with pytest.raises(conveyor.ConveyorError) as e:
            read_epoch(d.unix, pipeline="fast", batch_size=8, seed=1, epoch=0)
        assert "/no/such/object.jpg" in str(e.value) and "404" in str(e.value)
    finally:
        server.stop()


def test_unreachable_host_ends_the_stream_unavailable_naming_it(images, tmp_path,
                                                                daemon_factory):
    _, files = images
    # A port nothing listens on: connections are refused at once.
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    write_url_list(tmp_path / "urls.tsv", ["http://127.0.0.1:%d/%s" % (port, f) for f in files])
    cfg = remote_config(tmp_path, {"http": url_pipeline(tmp_path / "urls.tsv")}, max_attempts=3)
    cfg["engine"] = {"fetch_retry_max_attempts": 2, "fetch_retry_initial_backoff_ms": 10,
                     "fetch_retry_max_backoff_ms": 20}
    d = daemon_factory(cfg)
    with pytest.raises(conveyor.Unavailable) as e:
        read_epoch(d.unix, pipeline="http", batch_size=8, seed=1, epoch=0)
    assert "127.0.0.1:%d" % port in str(e.value)


def test_bad_url_in_the_list_is_refused_at_start(images, tmp_path, daemon_factory):
    write_url_list(tmp_path / "urls.tsv", ["http://127.0.0.1:1/a.jpg", "ftp://host/b.jpg"])
    from conveyor.daemon import DaemonError
    with pytest.raises(DaemonError) as e:
        daemon_factory(remote_config(tmp_path, {"http": url_pipeline(tmp_path / "urls.tsv")}))
    assert "dataset.urls" in str(e.value) and "entry 2" in str(e.value) and "ftp" in str(e.value)
