"""A slow remote host costs only its own stream. A real conveyord with
threads: 2 serves a stream over a host that sends each answer's head and
then one body byte every 250 ms (http_object_server.py --trickle-body-ms),
and a local 64-image pipeline: the local epoch still comes whole in
seconds (no worker waits on the network); GetStats, `conveyor stats` and the
metrics show the stalled stream's pending fetch (object, host, bytes so far, age); SIGTERM
then stops the daemon at once with exit status 0."""

import re
import subprocess
import threading
import time
import urllib.request

import conveyor
from conveyor_integration import (CLI, IMAGE_SIZE, PYTHON, client_env, daemon_config,
                                  make_image_folder, pipeline_entry, read_epoch, scaled,
                                  wait_until)
from remote_fixtures import ObjectServer, image_files, write_url_list

_METRICS_LINE = re.compile(r"Prometheus metrics on http://([0-9.]+):(\d+)/metrics")


def _slow_stream(d):
    for st in conveyor.stats(d.unix).streams:
        if st.pipeline == "slow":
            return st
    return None


def test_slow_host_stalls_only_its_own_stream(tmp_path, daemon_factory):
    root = tmp_path / "images"
    make_image_folder(root, classes=2, per_class=32)
    files = image_files(root)
    server = ObjectServer(root, "--trickle-body-ms", "250")
    try:
        urls = write_url_list(tmp_path / "urls.tsv",
                              ["%s/%s" % (server.base, f) for f in files])
        slow = pipeline_entry("unused", augment="eval", resize_size=IMAGE_SIZE)
        slow["dataset"] = {"urls": str(urls)}
        local = pipeline_entry(str(root), augment="eval", resize_size=IMAGE_SIZE)
        cfg = daemon_config(root, pipelines={"slow": slow, "local": local},
                            metrics={"listen": "127.0.0.1:0"})
        cfg["allowed_roots"] = [str(tmp_path)]
        # The trickle must not time out during the test: the host is slow,
        # not dead.
        # The trickling transfers never end, so an adaptive limit would stay
        # at its start (4, all taken by reads-ahead): the limit fixed at 64,
        # so that the stream's oldest fetch is one of those in flight.
        cfg["remote"] = {"request_timeout_ms": 600000, "adaptive_connections": False}
        d = daemon_factory(cfg, threads=2)

        def read_slow():
            try:
                read_epoch(d.unix, pipeline="slow", batch_size=8)
            except Exception:  # noqa: BLE001  (ends when the daemon stops)
                pass

        threading.Thread(target=read_slow, daemon=True).start()
        # The slow stream's fetches are under way (and, before fetches were
        # asynchronous, held both workers).
        assert wait_until(lambda: (_slow_stream(d) is not None
                                   and _slow_stream(d).fetches_pending >= 2), 20), \
            conveyor.stats(d.unix)

        done = {}

        def read_local():
            t0 = time.monotonic()
            done["epoch"] = read_epoch(d.unix, pipeline="local", batch_size=16)
            done["seconds"] = time.monotonic() - t0

        reader = threading.Thread(target=read_local, daemon=True)
        reader.start()
        reader.join(timeout=scaled(30))
        assert "epoch" in done, "the local pipeline stalled behind the slow host"
        got = done["epoch"]
        assert sorted(got.indices.tolist()) == list(range(64))
        assert done["seconds"] < scaled(20), done["seconds"]

        # The stalled stream says what it waits for: the object (a URL of
        # the slow host), the host, the bytes so far (one per 250 ms), its age.
        host = "127.0.0.1:%d" % server.port
        assert wait_until(lambda: _slow_stream(d).oldest_fetch.bytes_received >= 1, 20)
        st = _slow_stream(d)
        f = st.oldest_fetch
        assert f.host == host, f
        assert f.object.startswith(server.base + "/class_"), f
        assert f.age_ns > 0
        assert st.samples_emitted == 0

        # ... and `conveyor stats` prints it.
        res = subprocess.run([PYTHON, str(CLI), "stats", "--server", d.unix], capture_output=True,
                             text=True, timeout=60, env=client_env())
        assert res.returncode == 0, res.stderr
        assert re.search(r"waiting on the network: \d+ fetch\(es\); the oldest [0-9.]+ s, \d+ "
                         r"bytes so far, http://127\.0\.0\.1:\d+/class_\S+ from %s"
                         % re.escape(host), res.stdout), res.stdout

        m = _METRICS_LINE.search(d.log())
        assert m, d.log()
        with urllib.request.urlopen("http://%s:%s/metrics" % (m.group(1), m.group(2)),
                                    timeout=10) as r:
            text = r.read().decode()
        assert re.search(r'conveyor_oldest_fetch_age_seconds\{pipeline="slow",host="%s"\} '
                         r'[0-9.]+' % re.escape(host), text), text
        assert re.search(r'conveyor_fetches_pending\{pipeline="slow"\} [1-9]\d*', text), text

        # Shutdown fails the pending reads at once instead of waiting for
        # the host.
        t0 = time.monotonic()
        assert d.stop(timeout=scaled(15)) == 0, d.log()
        assert time.monotonic() - t0 < scaled(10)
    finally:
        server.stop()
