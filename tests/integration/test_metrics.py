"""Observability of a real daemon: the Prometheus endpoint (metrics.listen)
scraped over HTTP and parsed by the official Python client's parser
(prometheus-client, in the `metrics` virtual environment), its counters
moving as streams run (images and bytes by pipeline and transport, streams
open and total, refused streams by code, the clients' data wait), failure
series at zero from the start, the process_* collector set and
conveyor_build_info, /healthz and /readyz for HTTP probes; startup errors
for a bad or busy listen address; gRPC
server reflection as grpcurl uses it (grpcio-reflection); JSON log lines
and the journal's format from the daemon's own stderr, with the client's
identity on the stream open and close lines."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request

import conveyor
import pytest
from conveyor.daemon import DaemonProcess
from conveyor_integration import (CONVEYORD, IMAGE_SIZE, client_env, daemon_config,
                                  finish_daemons, pipeline_entry, require_daemon, scaled,
                                  venv_python, wait_until, write_config)

# Reads an exposition on stdin, parses it with prometheus-client's parser and
# prints [{"name", "type", "samples": [[name, labels, value], ...]}] as JSON.
_PARSE = textwrap.dedent("""
    import json, sys
    from prometheus_client.parser import text_string_to_metric_families
    out = []
    for family in text_string_to_metric_families(sys.stdin.read()):
        out.append({"name": family.name, "type": family.type, "help": family.documentation,
                    "samples": [[s.name, s.labels, s.value] for s in family.samples]})
    print(json.dumps(out))
""")

_METRICS_LINE = re.compile(r"Prometheus metrics on http://([0-9.]+):(\d+)/metrics")


def metrics_url(daemon):
    m = _METRICS_LINE.search(daemon.log())
    assert m, "no metrics line in the log:\n%s" % daemon.log_tail()
    return "http://%s:%s/metrics" % (m.group(1), m.group(2))


def scrape(url):
    """(content type, families by name) of one scrape, parsed by the official
    parser (strictly: any line it cannot read fails the test)."""
    with urllib.request.urlopen(url, timeout=scaled(10)) as r:
        assert r.status == 200
        content_type = r.headers["Content-Type"]
        text = r.read().decode("utf-8")
    p = subprocess.run([venv_python("metrics"), "-c", _PARSE], input=text, capture_output=True,
                       text=True, timeout=scaled(60))
    assert p.returncode == 0, "the Prometheus parser refused the exposition:\n%s\n%s" % (
        p.stderr[-3000:], text[:3000])
    families = {f["name"]: f for f in json.loads(p.stdout)}
    return content_type, families, text


def value(families, sample_name, **labels):
    for family in families.values():
        for name, lab, v in family["samples"]:
            if name == sample_name and lab == labels:
                return v
    raise AssertionError("no sample %s%s" % (sample_name, labels))


def counters(families):
    return {(name, tuple(sorted(lab.items()))): v for f in families.values()
            if f["type"] == "counter" for name, lab, v in f["samples"]}


def consume(address, transport, batch_size=8):
    images = 0
    with conveyor.open_stream(address, "train", batch_size, num_epochs=1, credits=2,
                              transport=transport) as stream:
        for batch in stream:
            images += batch.num_samples
    return images


@pytest.fixture
def metrics_daemon(daemon_factory, dataset):
    root, _ = dataset
    return daemon_factory(daemon_config(root, metrics={"listen": "127.0.0.1:0"}), name="metrics")


def test_scrape_counts_images_streams_and_bytes_by_transport(metrics_daemon, dataset):
    _, samples = dataset
    url = metrics_url(metrics_daemon)
    content_type, before, _ = scrape(url)
    assert content_type.startswith("text/plain; version=0.0.4")
    # HELP and TYPE for every family; base units; no per-stream label.
    for f in before.values():
        assert f["name"].startswith(("conveyor_", "process_")) and f["help"], f
    assert before["conveyor_streams_opened"]["type"] == "counter"
    assert value(before, "conveyor_streams_open") == 0
    assert value(before, "conveyor_streams_opened_total") == 0
    for transport in ("shared_memory", "data_socket", "inline"):
        assert value(before, "conveyor_delivered_images_total", pipeline="train",
                     transport=transport) == 0
    assert value(before, "conveyor_slot_memory_budget_bytes") == 256 << 20

    # One stream held open mid-way: open, slots held, memory reserved.
    stream = conveyor.open_stream(metrics_daemon.unix, "train", 8, num_epochs=1, credits=2,
                                  auto_release=False)
    first = next(stream)
    _, during, _ = scrape(url)
    assert value(during, "conveyor_streams_open") == 1
    assert value(during, "conveyor_stream_slots") == 2
    assert value(during, "conveyor_stream_slots_held_by_clients") >= 1
    assert value(during, "conveyor_slot_memory_bytes") > 0
    first.release()
    stream.close()

    n = len(samples)
    assert consume(metrics_daemon.unix, "auto") == n           # shared memory
    assert consume(metrics_daemon.tcp, "inline") == n           # inline over TCP
    assert consume(metrics_daemon.tcp, "data_socket") == n      # the data socket

    deadline = time.monotonic() + scaled(20)
    while True:
        _, after, text = scrape(url)
        if value(after, "conveyor_streams_open") == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert value(after, "conveyor_streams_open") == 0
    assert value(after, "conveyor_streams_opened_total") == 4
    sample_bytes = 3 * IMAGE_SIZE * IMAGE_SIZE
    held_images = value(after, "conveyor_delivered_images_total", pipeline="train",
                        transport="shared_memory") - n
    assert held_images >= 8  # the first stream's batches (it was closed mid-way)
    for transport in ("inline", "data_socket"):
        assert value(after, "conveyor_delivered_images_total", pipeline="train",
                     transport=transport) == n
        assert value(after, "conveyor_delivered_bytes_total", pipeline="train",
                     transport=transport) == n * sample_bytes
        assert value(after, "conveyor_delivered_batches_total", pipeline="train",
                     transport=transport) == n // 8
    assert value(after, "conveyor_delivered_images_total", pipeline="eval",
                 transport="inline") == 0
    assert value(after, "conveyor_stage_items_out_total", stage="decode") >= 3 * n
    assert value(after, "conveyor_stage_busy_seconds_total", stage="decode") > 0
    # Counters never go back; no stream id or client became a label.
    was = counters(before)
    now = counters(after)
    for key, v in was.items():
        assert now[key] >= v, key
    assert "stream_id" not in text and "pid" not in text


ERROR_CODES = ["cancelled", "unknown", "invalid_argument", "deadline_exceeded", "not_found",
               "already_exists", "permission_denied", "resource_exhausted", "failed_precondition",
               "aborted", "out_of_range", "unimplemented", "internal", "unavailable", "data_loss",
               "unauthenticated"]
# conveyor_client_data_wait_seconds' buckets, as documented.
DATA_WAIT_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
                     float("inf")]


def test_process_collector_set_and_build_info(metrics_daemon):
    _, families, _ = scrape(metrics_url(metrics_daemon))
    types = {"process_cpu_seconds_total": "counter", "process_resident_memory_bytes": "gauge",
             "process_virtual_memory_bytes": "gauge", "process_open_fds": "gauge",
             "process_max_fds": "gauge", "process_start_time_seconds": "gauge",
             "process_threads": "gauge"}
    for sample, kind in types.items():
        family = sample[:-len("_total")] if kind == "counter" else sample
        assert families[family]["type"] == kind, families.get(family)
    # The daemon's own figures, as /proc tells them to this test.
    rss = value(families, "process_resident_memory_bytes")
    assert 0.5 * metrics_daemon.rss_bytes() <= rss <= 2 * metrics_daemon.rss_bytes()
    assert value(families, "process_virtual_memory_bytes") >= rss
    fds = metrics_daemon.fd_count()
    assert abs(value(families, "process_open_fds") - fds) <= 8, fds
    assert value(families, "process_max_fds") >= value(families, "process_open_fds")
    assert value(families, "process_threads") >= 2  # main, workers, gRPC's, civetweb's
    # Started when this test's fixture started it: boot time + starttime ticks.
    with open("/proc/stat") as f:
        boot = next(int(line.split()[1]) for line in f if line.startswith("btime "))
    with open("/proc/%d/stat" % metrics_daemon.pid) as f:
        ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    started = boot + ticks / os.sysconf("SC_CLK_TCK")
    assert abs(value(families, "process_start_time_seconds") - started) < 1
    assert time.time() - 600 < value(families, "process_start_time_seconds") <= time.time() + 1
    assert value(families, "process_cpu_seconds_total") >= 0

    info = families["conveyor_build_info"]
    assert info["type"] == "gauge" and len(info["samples"]) == 1
    name, labels, v = info["samples"][0]
    assert v == 1 and sorted(labels) == ["revision", "version"]
    version = subprocess.run([str(CONVEYORD), "--version"], capture_output=True, text=True,
                             timeout=scaled(30)).stdout.split()[-1]
    assert labels["version"] == version
    assert re.fullmatch(r"[0-9a-f]{7,40}|unknown", labels["revision"]), labels


def test_failure_series_exist_at_zero_and_refusals_count_by_code(metrics_daemon):
    url = metrics_url(metrics_daemon)
    _, before, _ = scrape(url)
    stages = {lab["stage"] for _, lab, _ in before["conveyor_stage_items_in"]["samples"]}
    assert {"fetch", "decode", "collate"} <= stages
    for stage in stages:
        for reason in ERROR_CODES:
            assert value(before, "conveyor_stage_failures_total", stage=stage,
                         reason=reason) == 0
    for code in ERROR_CODES:
        assert value(before, "conveyor_streams_refused_total", code=code) == 0
    for pipeline in ("train", "eval"):
        assert value(before, "conveyor_client_data_wait_seconds_count", pipeline=pipeline) == 0
        assert value(before, "conveyor_client_starved_seconds_total", pipeline=pipeline) == 0

    # Refused: a pipeline that does not exist (NOT_FOUND), twice; a request
    # the daemon finds invalid (INVALID_ARGUMENT: rank past world_size).
    for _ in range(2):
        with pytest.raises(conveyor.ConveyorError):
            next(iter(conveyor.open_stream(metrics_daemon.unix, "no-such-pipeline", 8)))
    with pytest.raises(conveyor.ConveyorError):
        next(iter(conveyor.open_stream(metrics_daemon.unix, "train", 8, rank=3, world_size=2)))
    _, after, _ = scrape(url)
    assert value(after, "conveyor_streams_refused_total", code="not_found") == 2
    assert value(after, "conveyor_streams_refused_total", code="invalid_argument") == 1
    for code in set(ERROR_CODES) - {"not_found", "invalid_argument"}:
        assert value(after, "conveyor_streams_refused_total", code=code) == 0, code
    assert value(after, "conveyor_streams_opened_total") == 0


def test_data_wait_histogram_counts_every_batch(metrics_daemon, dataset):
    _, samples = dataset
    url = metrics_url(metrics_daemon)
    assert consume(metrics_daemon.unix, "auto", batch_size=8) == len(samples)
    batches = len(samples) // 8
    _, families, _ = scrape(url)
    family = families["conveyor_client_data_wait_seconds"]
    assert family["type"] == "histogram"
    buckets = [(lab["le"], v) for name, lab, v in family["samples"]
               if name.endswith("_bucket") and lab["pipeline"] == "train"]
    assert [float(le) for le, _ in buckets] == DATA_WAIT_BUCKETS
    counts = [v for _, v in buckets]
    assert counts == sorted(counts)  # cumulative
    assert counts[-1] == batches
    assert value(families, "conveyor_client_data_wait_seconds_count", pipeline="train") == batches
    waited = value(families, "conveyor_client_data_wait_seconds_sum", pipeline="train")
    assert waited > 0
    assert value(families, "conveyor_client_starved_seconds_total",
                 pipeline="train") == pytest.approx(waited)
    assert value(families, "conveyor_client_data_wait_seconds_count", pipeline="eval") == 0


def http_get(url):
    """(status, body) of a GET, errors included."""
    try:
        with urllib.request.urlopen(url, timeout=scaled(10)) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_healthz_and_readyz_for_http_probes(metrics_daemon):
    base = metrics_url(metrics_daemon)[:-len("/metrics")]
    assert http_get(base + "/healthz") == (200, "ok\n")
    assert http_get(base + "/readyz") == (200, "ready\n")
    status, _ = http_get(base + "/readyz/more")
    assert status == 404


# A client that stops reading altogether: it takes one batch, says so, and
# is then stopped with SIGSTOP by the test, so its process reads nothing more
# from the socket (an idle client in the same process would not do: gRPC's
# own threads keep reading into a window that grows on loopback).
_STALLED_CLIENT = textwrap.dedent("""
    import sys, time
    import conveyor
    stream = conveyor.open_stream(sys.argv[1], "train", 32, num_epochs=0, credits=16,
                                  transport="inline", auto_release=False)
    held = next(stream)
    print("got a batch", flush=True)
    time.sleep(3600)
""")


def test_readyz_is_503_while_the_daemon_drains(daemon_factory, dataset):
    root, _ = dataset
    # Batches of 32 x 3 x 224 x 224 bytes (4.8 MB): the 16 a stream may have
    # out (77 MB) are far more than the socket buffers of a client that
    # reads nothing take, so the daemon's write to it never completes and
    # gRPC's shutdown drains for shutdown_timeout_seconds.
    d = daemon_factory(daemon_config(root, pipelines={"train": pipeline_entry(root, size=224)},
                                     metrics={"listen": "127.0.0.1:0"},
                                     shutdown_timeout_seconds=5), name="drain")
    base = metrics_url(d)[:-len("/metrics")]
    assert http_get(base + "/readyz") == (200, "ready\n")
    client = subprocess.Popen([sys.executable, "-c", _STALLED_CLIENT, d.tcp],
                              stdout=subprocess.PIPE, text=True, env=client_env())
    try:
        assert client.stdout.readline().strip() == "got a batch"
        client.send_signal(signal.SIGSTOP)

        def all_credits_out():
            return any(st.batches_emitted >= 16 for st in conveyor.stats(d.unix).streams)

        assert wait_until(all_credits_out, timeout=60), str(conveyor.stats(d.unix).streams)
        d.proc.send_signal(signal.SIGTERM)

        def readyz():
            try:
                return http_get(base + "/readyz")
            except (urllib.error.URLError, OSError):
                return ("gone", "")

        def not_ready():
            answer = readyz()
            return answer if answer[0] != 200 else None

        status = wait_until(not_ready, timeout=10)
        assert status and status[0] == 503, status
        assert status[1].startswith("not ready: shutting down"), status
        assert http_get(base + "/healthz") == (200, "ok\n")  # alive while it drains
    finally:
        client.kill()
        client.send_signal(signal.SIGCONT)
        client.wait()


def test_other_paths_and_methods_are_refused(metrics_daemon):
    url = metrics_url(metrics_daemon)
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(url.replace("/metrics", "/"), timeout=scaled(10))
    assert e.value.code == 404
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(urllib.request.Request(url, data=b"x", method="POST"),
                               timeout=scaled(10))
    assert e.value.code == 405


def run_daemon_expecting_failure(tmp_path, config):
    require_daemon()
    path = write_config(tmp_path / "conveyord.yaml", config)
    return subprocess.run([str(CONVEYORD), "--config", str(path), "--socket",
                           str(tmp_path / "c.sock"), "--tcp", "none"],
                          capture_output=True, text=True, timeout=scaled(60))


def test_bad_metrics_address_is_a_config_error(tmp_path, dataset):
    root, _ = dataset
    r = run_daemon_expecting_failure(
        tmp_path, daemon_config(root, metrics={"listen": "localhost:9464"}))
    assert r.returncode == 2, r.stderr
    assert "field metrics.listen" in r.stderr and "localhost:9464" in r.stderr, r.stderr


def test_busy_metrics_port_stops_the_daemon_naming_the_field(tmp_path, dataset):
    root, _ = dataset
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        r = run_daemon_expecting_failure(
            tmp_path, daemon_config(root, metrics={"listen": "127.0.0.1:%d" % port}))
    assert r.returncode == 1, r.stderr
    assert "metrics.listen: cannot serve metrics on 127.0.0.1:%d" % port in r.stderr, r.stderr
    assert not (tmp_path / "c.sock").exists(), "socket left behind"


# Lists the services over reflection and fetches the descriptor of
# conveyor.v1.Conveyor, as grpcurl does; prints what it found as JSON.
_REFLECT = textwrap.dedent("""
    import json, sys, grpc
    from google.protobuf.descriptor_pool import DescriptorPool
    from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
        ProtoReflectionDescriptorDatabase)
    channel = grpc.insecure_channel(sys.argv[1])
    db = ProtoReflectionDescriptorDatabase(channel)
    services = list(db.get_services())
    pool = DescriptorPool(db)
    service = pool.FindServiceByName("conveyor.v1.Conveyor")
    methods = {m.name: [m.input_type.full_name, m.output_type.full_name] for m in service.methods}
    print(json.dumps({"services": services, "file": service.file.name, "methods": methods}))
""")


def test_server_reflection_lists_and_describes_the_service(daemon):
    for address in (daemon.unix, daemon.tcp):
        p = subprocess.run([venv_python("metrics"), "-c", _REFLECT, address], capture_output=True,
                           text=True, timeout=scaled(60))
        assert p.returncode == 0, p.stderr[-3000:]
        found = json.loads(p.stdout)
        assert "conveyor.v1.Conveyor" in found["services"]
        assert "grpc.reflection.v1alpha.ServerReflection" in found["services"]
        assert found["file"] == "conveyor/v1/conveyor.proto"
        assert found["methods"]["StreamBatches"] == ["conveyor.v1.ClientMessage",
                                                     "conveyor.v1.ServerMessage"]
        assert "GetStats" in found["methods"] and "ListPipelines" in found["methods"]


# --- logs -----------------------------------------------------------------------
def test_json_log_lines_parse_and_carry_the_peer(daemon_factory, dataset):
    root, samples = dataset
    d = daemon_factory(daemon_config(root, log_format="json"), name="jsonlog")
    assert consume(d.unix, "auto") == len(samples)
    assert consume(d.tcp, "inline") == len(samples)
    # A client's text with quotes and control characters, logged when refused.
    with pytest.raises(conveyor.ConveyorError):
        consume_pipeline = conveyor.open_stream(d.unix, 'no"such\npipe\\line\x01', 8)
        next(consume_pipeline)
    d.stop(timeout=scaled(10))
    lines = [line for line in d.log().splitlines() if line]
    records = []
    for line in lines:
        record = json.loads(line)  # every line is one JSON object
        assert list(record)[:2] == ["ts", "level"] and "msg" in record, record
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", record["ts"]), record
        records.append(record)
    msgs = [r["msg"] for r in records if r["level"] == "info"]
    me = "pid %d, uid %d" % (os.getpid(), os.getuid())
    opened = [m for m in msgs if re.match(r"stream \d+ opened by ", m)]
    closed = [m for m in msgs if re.match(r"stream \d+ of .* done: ", m)]
    assert len(opened) == 2 and len(closed) == 2, msgs
    assert me in opened[0] and me in closed[0], (opened, closed)
    assert "ipv4:127.0.0.1:" in opened[1] and "ipv4:127.0.0.1:" in closed[1], (opened, closed)
    refused = [m for m in msgs if "refused" in m]
    assert refused and 'no"such' in refused[0], msgs


def test_under_journald_text_lines_have_a_priority_and_no_timestamp(tmp_path, dataset):
    require_daemon()
    root, _ = dataset
    config = write_config(tmp_path / "conveyord.yaml", daemon_config(root))
    log = tmp_path / "conveyord.log"
    log.touch()  # the daemon's stderr: the journal's stream, as systemd would pass it
    st = os.stat(log)
    env = dict(os.environ, JOURNAL_STREAM="%d:%d" % (st.st_dev, st.st_ino))
    d = DaemonProcess(CONVEYORD, config, workdir=tmp_path, env=env)
    try:
        d.start(timeout=scaled(30))
        assert consume(d.unix, "auto") > 0
    finally:
        finish_daemons([d])
    lines = [line for line in d.log().splitlines() if line]
    assert lines
    for line in lines:
        assert re.match(r"<[2-7]>[TDIWEC] ", line), line
        assert not re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d", line), line
    assert any(re.match(r"<6>I stream \d+ opened by .*pid %d" % os.getpid(), line)
               for line in lines), lines
