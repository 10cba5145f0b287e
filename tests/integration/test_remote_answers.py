"""Hostile and unlucky HTTP answers through a real conveyord
(http_object_server.py on loopback):

- a 206 answer that holds another range of the object than the one asked
  (the right length, and a Content-Range that names the other range) is
  never served as the member asked for: it is retried, and a stream over a
  shard whose every answer is such ends naming the object and the mismatch,
  having served nothing; both
  through libcurl and the direct HTTP client (remote.direct_http);
- the secrets of dataset.urls (user:password@, presigned query strings)
  appear in no client message (Batch failures' paths and reasons, stream
  statuses under skip and fail_fast, an unreachable host's UNAVAILABLE, a
  bad list refused at start) and in no daemon log line;
- remote.failed_object: sample makes an object that always fails, on a host
  that answers the others, an error of that sample (skip leaves it out,
  fail_fast names it); the default (stream) ends the stream UNAVAILABLE."""

import io
import re
import socket
import tarfile

import numpy as np
import pytest

import conveyor
from conveyor.daemon import DaemonError
from conveyor_integration import (IMAGE_SIZE, Daemon, daemon_config, finish_daemons,
                                  make_image_folder, pipeline_entry, write_shards)
from remote_fixtures import ObjectServer, image_files, write_url_list


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    root, samples = make_image_folder(tmp_path_factory.mktemp("images"), classes=3, per_class=8)
    return root, samples


def fast_remote(**fields):
    return dict({"initial_backoff_ms": 5, "max_backoff_ms": 50}, **fields)


def collect(address, pipeline, epoch=0, seed=1, shuffle=True):
    """(indices, labels, images, failures) of one epoch; failures as
    (sample_index, path, reason)."""
    loader = conveyor.Loader(address, pipeline=pipeline, batch_size=8, seed=seed, shuffle=shuffle)
    indices, labels, images, failures = [], [], [], []
    try:
        with loader.epoch(epoch) as stream:
            for b in stream:
                indices.extend(b.indices.tolist())
                labels.extend(b.labels.tolist())
                images.append(b.images.copy())
                failures.extend((f.sample_index, f.path, f.reason) for f in b.failures)
    finally:
        loader.close()
    return indices, labels, np.concatenate(images) if images else None, failures


# --- Content-Range -------------------------------------------------------------
def shard_names(root, samples, out_dir, per_shard=8):
    """The folder's samples as tar shards of `per_shard` samples (KEY.jpg +
    KEY.cls, conftest's write_shards); their file names."""
    return [p.name for p in write_shards(root, samples, out_dir, per_shard=per_shard)]


@pytest.mark.parametrize("direct", [False, True])
def test_a_206_for_another_range_is_never_served(images, tmp_path, direct):
    root, samples = images
    shards = shard_names(root, samples, tmp_path / "shards")
    # A third of the ranged answers hold the next range: every scan read and
    # member read must still get its own bytes (retried), never the next one's.
    server = ObjectServer(tmp_path / "shards", "--wrong-content-range", "0.3", "--seed", "7")
    try:
        remote = {"shards": ["%s/%s" % (server.base, s) for s in shards]}
        pipelines = {"folder": pipeline_entry(root, augment="eval", resize_size=IMAGE_SIZE),
                     "remote": pipeline_entry(root, augment="eval", resize_size=IMAGE_SIZE,
                                              dataset=remote, error_policy="fail_fast")}
        cfg = daemon_config(root, pipelines=pipelines, allowed_roots=[str(root.parent)])
        cfg["remote"] = fast_remote(max_attempts=30, direct_http=direct)
        d = Daemon(tmp_path / "daemon", cfg)
        try:
            d.start()
            for epoch in (0, 1):
                gi, gl, gx, gf = collect(d.unix, "remote", epoch=epoch, shuffle=False)
                ri, rl, rx, _ = collect(d.unix, "folder", epoch=epoch, shuffle=False)
                assert gf == []
                assert gi == ri == list(range(len(samples)))
                assert gl == rl == [label for _, label in samples], "labels of other samples"
                assert gx.tobytes() == rx.tobytes(), "images of other samples"
        finally:
            finish_daemons([d])
        st = server.stats()
        assert st["wrong_ranges"] > 0, "wrong ranges were sent: %r" % st
    finally:
        server.stop()


@pytest.mark.parametrize("direct", [False, True])
def test_a_shard_answered_only_with_other_ranges_fails_naming_it(images, tmp_path, direct):
    root, samples = images
    shards = shard_names(root, samples[:8], tmp_path / "shards")
    # (The index scan reads the small shard whole, which has no other range.)
    server = ObjectServer(tmp_path / "shards", "--wrong-content-range", "1")
    try:
        url = "%s/%s" % (server.base, shards[0])
        cfg = daemon_config(root, pipelines={
            "remote": pipeline_entry(root, dataset={"shards": [url]})},
            allowed_roots=[str(root.parent)])
        cfg["remote"] = fast_remote(max_attempts=2, direct_http=direct)
        cfg["engine"] = {"fetch_retry_max_attempts": 2, "fetch_retry_initial_backoff_ms": 10,
                         "fetch_retry_max_backoff_ms": 20}
        d = Daemon(tmp_path / "daemon", cfg)
        try:
            d.start()
            batches = []
            loader = conveyor.Loader(d.unix, pipeline="remote", batch_size=4, seed=1)
            try:
                with pytest.raises(conveyor.Unavailable) as e:
                    with loader.epoch(0) as stream:
                        for b in stream:
                            batches.append(b.num_samples)
            finally:
                loader.close()
        finally:
            finish_daemons([d])
        msg = str(e.value)
        assert batches == [], "no member was served"
        assert shards[0] in msg and "another range" in msg, msg
        assert re.search(r"Content-Range 'bytes \d+-\d+/\d+', bytes \d+-\d+ asked", msg), msg
        assert server.stats()["wrong_ranges"] > 0
    finally:
        server.stop()


# --- secrets of dataset.urls -----------------------------------------------------
SECRETS = ("hunter2", "AKIASECRETKEYID", "S1GNATURE0123456789", "tok3n-session")


def secret_url(base, path):
    """`base` (http://127.0.0.1:PORT) + path with user:password@ and a
    presigned query string."""
    host = base[len("http://"):]
    return ("http://bob:hunter2@%s/%s?X-Amz-Algorithm=AWS4-HMAC-SHA256"
            "&X-Amz-Credential=AKIASECRETKEYID%%2F20261202%%2Fus-east-1%%2Fs3%%2Faws4_request"
            "&X-Amz-Security-Token=tok3n-session&X-Amz-Signature=S1GNATURE0123456789"
            % (host, path))


def assert_no_secret(text, what):
    for s in SECRETS:
        assert s not in text, "%s shows the secret %r:\n%s" % (what, s, text[-3000:])


def test_url_credentials_appear_in_no_message_and_no_log_line(images, tmp_path):
    root, _ = images
    files = image_files(root)
    (root / "not_an_image.jpg").write_bytes(b"this is no JPEG at all " * 10)
    server = ObjectServer(root)
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    dead_port = dead.getsockname()[1]
    dead.close()
    daemons = []
    try:
        urls = [secret_url(server.base, f) for f in files]
        urls[2] = secret_url(server.base, "no/such/object.jpg")  # 404
        urls[5] = secret_url(server.base, "not_an_image.jpg")    # does not decode
        write_url_list(tmp_path / "urls.tsv", urls)
        write_url_list(tmp_path / "dead.tsv",
                       [secret_url("http://127.0.0.1:%d" % dead_port, f) for f in files[:4]])

        def url_entry(urls_file, **overrides):
            entry = pipeline_entry("unused", augment="eval", resize_size=IMAGE_SIZE, **overrides)
            entry["dataset"] = {"urls": str(urls_file)}
            return entry

        cfg = daemon_config(tmp_path, pipelines={
            "skip": url_entry(tmp_path / "urls.tsv", failure_rate_min_samples=1000),
            "fast": url_entry(tmp_path / "urls.tsv", error_policy="fail_fast"),
            "dead": url_entry(tmp_path / "dead.tsv")}, allowed_roots=[str(tmp_path)])
        cfg["remote"] = fast_remote(max_attempts=2)
        cfg["engine"] = {"fetch_retry_max_attempts": 2, "fetch_retry_initial_backoff_ms": 10,
                         "fetch_retry_max_backoff_ms": 20}
        d = Daemon(tmp_path / "daemon", cfg)
        daemons.append(d)
        d.start()
        client_text = []
        indices, _, _, failures = collect(d.unix, "skip")
        assert sorted(indices) == [i for i in range(len(files)) if i not in (2, 5)]
        assert sorted(f[0] for f in failures) == [2, 5]
        for _, path, reason in failures:
            client_text += [path, reason]
            # Still named well enough to find: the host and the object's path.
            assert "127.0.0.1:%d/" % server.port in path and "?…" in path, path
        assert any("404" in f[2] for f in failures)
        with pytest.raises(conveyor.ConveyorError) as fast:
            collect(d.unix, "fast")
        client_text.append(str(fast.value))
        assert "fail_fast" in str(fast.value)
        with pytest.raises(conveyor.Unavailable) as dead_end:
            collect(d.unix, "dead")
        client_text.append(str(dead_end.value))
        assert "127.0.0.1:%d" % dead_port in str(dead_end.value)
        for text in client_text:
            assert_no_secret(text, "a client message")
        finish_daemons([d])
        daemons.clear()
        log = d.log()
        assert "failed" in log  # (the warning lines about the failed samples are there)
        assert_no_secret(log, "the daemon log")

        # A list refused at start (a '..' component) names the line, not the secrets.
        bad = urls[:3] + [secret_url(server.base, "a/../b.jpg")]
        write_url_list(tmp_path / "bad.tsv", bad)
        cfg = daemon_config(tmp_path, pipelines={"bad": url_entry(tmp_path / "bad.tsv")},
                            allowed_roots=[str(tmp_path)])
        b = Daemon(tmp_path / "bad-daemon", cfg)
        daemons.append(b)
        with pytest.raises(DaemonError) as refused:
            b.start()
        finish_daemons([b])
        daemons.clear()
        assert "bad.tsv:4" in b.log() and "'..'" in b.log()
        assert_no_secret(str(refused.value), "the start error")
        assert_no_secret(b.log(), "the refused daemon's log")
    finally:
        finish_daemons(daemons)
        server.stop()


def test_shard_url_credentials_appear_in_no_sample_name_and_no_log_line(images, tmp_path):
    root, samples = images
    out = tmp_path / "shards"
    names = shard_names(root, samples[:16], out)
    # One member that does not decode, so a failure names a sample of the shard.
    with tarfile.open(out / "shard-000002.tar", "w", format=tarfile.GNU_FORMAT) as tar:
        for ext, data in (("jpg", b"no JPEG here " * 20), ("cls", b"0")):
            info = tarfile.TarInfo("broken.%s" % ext)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    names.append("shard-000002.tar")
    server = ObjectServer(out)
    d = None
    try:
        shards = [secret_url(server.base, n) for n in names]
        cfg = daemon_config(root, pipelines={
            "remote": pipeline_entry(root, dataset={"shards": shards},
                                     failure_rate_min_samples=1000)},
            allowed_roots=[str(root.parent)])
        cfg["remote"] = fast_remote()
        d = Daemon(tmp_path / "daemon", cfg)
        d.start()
        indices, _, _, failures = collect(d.unix, "remote")
        assert sorted(indices) == list(range(16))
        assert len(failures) == 1, failures
        _, path, reason = failures[0]
        assert path.endswith("shard-000002.tar?…/broken.jpg"), path
        assert_no_secret(path + reason, "a sample failure")
        finish_daemons([d])
        assert "shard-000000.tar" in d.log()
        assert_no_secret(d.log(), "the daemon log")
    finally:
        if d is not None:
            finish_daemons([d])
        server.stop()


# --- remote.failed_object ----------------------------------------------------------
def test_failed_object_sample_policy_counts_a_dead_object_as_its_sample(images, tmp_path):
    root, _ = images
    files = image_files(root)
    bad = 5
    server = ObjectServer(root, "--fail-path", files[bad])
    daemons = []
    try:
        write_url_list(tmp_path / "urls.tsv", ["%s/%s" % (server.base, f) for f in files])

        def config(policy):
            def entry(**overrides):
                e = pipeline_entry("unused", augment="eval", resize_size=IMAGE_SIZE, **overrides)
                e["dataset"] = {"urls": str(tmp_path / "urls.tsv")}
                return e
            cfg = daemon_config(tmp_path, pipelines={
                "skip": entry(failure_rate_min_samples=1000),
                "fast": entry(error_policy="fail_fast")}, allowed_roots=[str(tmp_path)])
            cfg["remote"] = fast_remote(max_attempts=3, **({"failed_object": policy} if policy else {}))
            cfg["engine"] = {"fetch_retry_max_attempts": 2, "fetch_retry_initial_backoff_ms": 10,
                             "fetch_retry_max_backoff_ms": 20}
            return cfg

        d = Daemon(tmp_path / "sample", config("sample"))
        daemons.append(d)
        d.start()
        for epoch in (0, 1):
            indices, labels, _, failures = collect(d.unix, "skip", epoch=epoch)
            assert sorted(indices) == [i for i in range(len(files)) if i != bad]
            assert labels == indices
            assert [f[0] for f in failures] == [bad]
            assert files[bad] in failures[0][1] and "503" in failures[0][2], failures
        with pytest.raises(conveyor.DataError) as fast:
            collect(d.unix, "fast")
        assert files[bad] in str(fast.value) and "503" in str(fast.value)

        # The default: an error of the system, the stream ends UNAVAILABLE.
        s = Daemon(tmp_path / "stream", config(None))
        daemons.append(s)
        s.start()
        with pytest.raises(conveyor.Unavailable) as ended:
            collect(s.unix, "skip")
        assert files[bad] in str(ended.value) and "503" in str(ended.value)
        assert server.stats()["path_failed"] > 0
    finally:
        finish_daemons(daemons)
        server.stop()
