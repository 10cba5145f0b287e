"""The remote reader's adaptive per-host connection limit and its per-host
figures, against real HTTP servers on loopback with a real conveyord:

- a server that sheds load (503 to a request that arrives while 3 others
  are being answered): with the defaults the limit halves, every sample
  still comes once, and the drop is in GetStats, in the metrics (parsed by
  prometheus-client's parser) and in a warning of the log;
- Python's own http.server (a connection per request, listen backlog 5):
  with the defaults the epoch completes with few connects that needed a SYN
  sent again, while a fixed 64 connections (the old default) overflows the
  backlog and the figures say so (slow connects, seconds-long attempts).

No timed assertions: the limits and counts are what is checked."""

import json
import subprocess
import textwrap
import urllib.request

import pytest

from conveyor_integration import (CLI, IMAGE_SIZE, PYTHON, client_env, daemon_config,
                                  make_image_folder, pipeline_entry, read_epoch, scaled,
                                  venv_python)
import conveyor
from remote_fixtures import STDLIB_SERVER, ObjectServer, image_files, write_url_list


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    root = tmp_path_factory.mktemp("images")
    make_image_folder(root, classes=3, per_class=24)
    return root, image_files(root)


def url_config(tmp_path, urls_file, metrics=False, **remote):
    entry = pipeline_entry("unused", augment="eval", resize_size=IMAGE_SIZE,
                           error_policy="fail_fast")
    entry["dataset"] = {"urls": str(urls_file)}
    cfg = daemon_config(tmp_path, pipelines={"http": entry})
    cfg["allowed_roots"] = [str(tmp_path)]
    cfg["remote"] = dict({"initial_backoff_ms": 5, "max_backoff_ms": 50}, **remote)
    if metrics:
        cfg["metrics"] = {"listen": "127.0.0.1:0"}
    return cfg


def host_stats(address, host):
    hosts = {h.host: h for h in conveyor.stats(address).remote_hosts}
    assert host in hosts, "no figures for %s: %r" % (host, list(hosts))
    return hosts[host]


def attempts(h, status):
    return sum(c.count for c in h.attempts if c.status == status)


def check_epoch(got, n):
    assert sorted(got.indices.tolist()) == list(range(n)), "every sample exactly once"
    assert got.labels.tolist() == got.indices.tolist(), "each sample's own bytes and label"


_PARSE = textwrap.dedent("""
    import json, sys
    from prometheus_client.parser import text_string_to_metric_families
    out = {}
    for family in text_string_to_metric_families(sys.stdin.read()):
        out[family.name] = {"type": family.type,
                            "samples": [[s.name, s.labels, s.value] for s in family.samples]}
    print(json.dumps(out))
""")


def scrape(daemon):
    import re
    m = re.search(r"Prometheus metrics on http://([0-9.]+):(\d+)/metrics", daemon.log())
    assert m, daemon.log_tail()
    with urllib.request.urlopen("http://%s:%s/metrics" % m.groups(), timeout=scaled(10)) as r:
        text = r.read().decode()
    p = subprocess.run([venv_python("metrics"), "-c", _PARSE], input=text, capture_output=True,
                       text=True, timeout=scaled(60))
    assert p.returncode == 0, "the Prometheus parser refused the exposition:\n%s" % p.stderr
    return json.loads(p.stdout)


def sample(families, family, name, **labels):
    for n, lab, v in families[family]["samples"]:
        if n == name and lab == labels:
            return v
    raise AssertionError("no sample %s%r in %s" % (name, labels, families[family]["samples"]))


def test_a_host_that_sheds_load_lowers_its_limit(images, tmp_path, daemon_factory):
    root, files = images
    server = ObjectServer(root, "--latency-ms", "40", "--busy-above", "3")
    try:
        host = "127.0.0.1:%d" % server.port
        urls = write_url_list(tmp_path / "urls.tsv", ["%s/%s" % (server.base, f) for f in files])
        d = daemon_factory(url_config(tmp_path, urls, metrics=True, max_attempts=20))
        got = read_epoch(d.unix, pipeline="http", batch_size=8, seed=2, epoch=0)
        check_epoch(got, len(files))
        h = host_stats(d.unix, host)
        assert h.adaptive and h.max_connections == 64
        busy = server.stats()["busy"]
        assert busy > 0, "the default limit (4) is past the server's 3"
        assert attempts(h, 503) == busy, "every 503 the server sent is counted"
        assert h.limit_decreases >= 1
        # Halved from 4, grown back towards where the 503s came from: low.
        assert 1 <= h.connection_limit <= 8, h
        assert attempts(h, 200) == len(files)
        assert h.retries >= busy
        assert h.bytes == sum((root / f).stat().st_size for f in files)
        assert h.in_flight == 0 and h.queued == 0
        assert sum(h.latency_counts) == attempts(h, 200) + attempts(h, 503)
        assert "transfers in flight lowered from" in d.log() and host in d.log()

        # `conveyor stats` shows the host, its limit and its answers by code.
        res = subprocess.run([PYTHON, str(CLI), "stats", "--server", d.unix],
                             capture_output=True, text=True, timeout=scaled(60), env=client_env())
        assert res.returncode == 0, res.stderr
        assert "remote hosts:" in res.stdout and host in res.stdout, res.stdout
        assert "503:%d" % busy in res.stdout, res.stdout
        assert "limit %d of 64 (adaptive, lowered %d times)" % (
            h.connection_limit, h.limit_decreases) in res.stdout, res.stdout
        res = subprocess.run([PYTHON, str(CLI), "stats", "--json", "--server", d.unix],
                             capture_output=True, text=True, timeout=scaled(60), env=client_env())
        assert res.returncode == 0, res.stderr
        (j,) = json.loads(res.stdout)["remote_hosts"]
        assert j["host"] == host and j["requests"]["503"] == busy
        assert j["connection_limit"] == h.connection_limit and j["adaptive"] is True

        m = scrape(d)
        assert m["conveyor_remote_requests"]["type"] == "counter"
        assert sample(m, "conveyor_remote_requests", "conveyor_remote_requests_total",
                      host=host, code="503") == busy
        assert sample(m, "conveyor_remote_requests", "conveyor_remote_requests_total",
                      host=host, code="200") == len(files)
        assert sample(m, "conveyor_remote_connection_limit", "conveyor_remote_connection_limit",
                      host=host) == h.connection_limit
        assert sample(m, "conveyor_remote_connection_limit_decreases",
                      "conveyor_remote_connection_limit_decreases_total",
                      host=host) == h.limit_decreases
        assert sample(m, "conveyor_remote_in_flight", "conveyor_remote_in_flight", host=host) == 0
        assert sample(m, "conveyor_remote_bytes", "conveyor_remote_bytes_total",
                      host=host) == h.bytes
        hist = m["conveyor_remote_request_seconds"]
        assert hist["type"] == "histogram"
        assert sample(m, "conveyor_remote_request_seconds", "conveyor_remote_request_seconds_count",
                      host=host) == len(files) + busy
        # Every answer waited the server's 40 ms: none in the buckets below.
        assert sample(m, "conveyor_remote_request_seconds", "conveyor_remote_request_seconds_bucket",
                      host=host, le="0.025") <= busy
        assert sample(m, "conveyor_remote_request_seconds", "conveyor_remote_request_seconds_bucket",
                      host=host, le="+Inf") == len(files) + busy
    finally:
        server.stop()


def test_fixed_limit_keeps_sending_into_a_host_that_sheds_load(images, tmp_path, daemon_factory):
    root, files = images
    server = ObjectServer(root, "--latency-ms", "40", "--busy-above", "3")
    try:
        host = "127.0.0.1:%d" % server.port
        urls = write_url_list(tmp_path / "urls.tsv", ["%s/%s" % (server.base, f) for f in files])
        d = daemon_factory(url_config(tmp_path, urls, max_attempts=50, adaptive_connections=False,
                                      max_connections_per_host=16))
        check_epoch(read_epoch(d.unix, pipeline="http", batch_size=8, seed=2, epoch=0),
                    len(files))
        h = host_stats(d.unix, host)
        assert not h.adaptive and h.connection_limit == 16 and h.limit_decreases == 0
        assert attempts(h, 503) > len(files) // 2, "16 at once into a server that takes 3"
    finally:
        server.stop()


def stdlib_run(root, files, tmp_path, daemon_factory, **remote):
    """One epoch from Python's http.server (backlog 5): the host's figures."""
    server = ObjectServer(root, "--backlog", "5", script=STDLIB_SERVER)
    try:
        urls = write_url_list(tmp_path / "urls.tsv", ["%s/%s" % (server.base, f) for f in files])
        d = daemon_factory(url_config(tmp_path, urls, **remote))
        check_epoch(read_epoch(d.unix, pipeline="http", batch_size=8, seed=3, epoch=0),
                    len(files))
        h = host_stats(d.unix, "127.0.0.1:%d" % server.port)
        print("stdlib run %r: slow connects %d, attempts of 1 s or more %d, limit %d, drops %d"
              % (remote, h.slow_connects, slow_attempts(h), h.connection_limit,
                 h.limit_decreases))
        return h
    finally:
        server.stop()


def slow_attempts(h):
    """Attempts of a second or more (a SYN or its ACK sent again after 1 s)."""
    bounds = list(h.latency_bounds_seconds)
    return sum(h.latency_counts[bounds.index(1.0) + 1:])


def test_python_http_server_with_the_defaults(images, tmp_path, daemon_factory):
    root, files = images
    h = stdlib_run(root, files, tmp_path, daemon_factory)
    assert h.adaptive and 1 <= h.connection_limit <= 64
    assert attempts(h, 200) == len(files)
    # Connects that waited for a SYN sent again are rare (a few where the
    # server, busy, was slow to accept), and each burst of them lowered the
    # limit. (64 fixed: most of the requests, below.)
    assert h.slow_connects <= len(files) // 10, h
    assert slow_attempts(h) <= len(files) // 10, h
    assert h.limit_decreases >= min(h.slow_connects, 1)


def test_python_http_server_overflows_with_64_fixed(images, tmp_path, daemon_factory):
    root, files = images
    h = stdlib_run(root, files, tmp_path, daemon_factory, adaptive_connections=False)
    assert not h.adaptive and h.connection_limit == 64 and h.limit_decreases == 0
    assert attempts(h, 200) == len(files)
    # The backlog overflowed: the figures say why the epoch was slow.
    assert h.slow_connects >= len(files) // 4, h
    assert slow_attempts(h) >= len(files) // 4, h
