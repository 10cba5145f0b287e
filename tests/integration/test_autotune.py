"""engine.autotune against a real conveyord: a stream of a dataset served
over HTTP with latency, started from deliberately bad limits (one read at a
time, a queue of one), gets more reads in flight as its client waits, and
GetStats, `conveyor stats` and its JSON say what the limits are and why (and
the log, at debug level, each change); autotune is on when the config
says nothing of it; a daemon without autotune reports the configured
limits; bad autotune
settings are refused naming the field."""

import json
import subprocess

import conveyor
from conveyor_integration import (CLI, CONVEYORD, IMAGE_SIZE, PYTHON, EndlessReader, client_env,
                                  daemon_config, make_image_folder, pipeline_entry, scaled,
                                  wait_until, write_config)
from remote_fixtures import ObjectServer, image_files, write_url_list


def limits_of(address):
    streams = conveyor.stats(address).streams
    return streams[0].limits if streams else None


def run_cli(*args):
    return subprocess.run([PYTHON, str(CLI)] + [str(a) for a in args], capture_output=True,
                          text=True, timeout=scaled(60), env=client_env())


def test_a_slow_http_stream_gets_more_reads_and_says_why(tmp_path, daemon_factory):
    root, _ = make_image_folder(tmp_path / "images", classes=2, per_class=16)
    server = ObjectServer(root, "--latency-ms", "30")
    try:
        urls = write_url_list(tmp_path / "urls.tsv",
                              ["%s/%s" % (server.base, f) for f in image_files(root)])
        entry = pipeline_entry("unused", augment="eval", resize_size=IMAGE_SIZE)
        entry["dataset"] = {"urls": str(urls)}
        cfg = daemon_config(tmp_path, pipelines={"web": entry}, log_level="debug",
                            engine={"autotune": True, "fetch_concurrency": 1,
                                    "fetch_queue_capacity": 1})
        cfg["allowed_roots"] = [str(tmp_path)]
        d = daemon_factory(cfg)
        reader = EndlessReader(d.unix, "web", batch_size=4)
        reader.start()
        try:
            # One read at a time of a 30 ms host leaves the client waiting:
            # the tuner raises the reads in flight (each raise kept only if
            # it paid, judged over a second).
            # A raise from 2 means the raise to 2 paid and was kept, and a
            # kept raise is never undone: from then on at least 2.
            assert wait_until(lambda: "raised fetch concurrency 2 -> 4" in d.log(),
                              scaled(60), interval=0.25), limits_of(d.unix)
            limits = limits_of(d.unix)
            assert limits.autotune and limits.autotune_changes >= 2
            assert limits.fetch_concurrency >= 2
            assert limits.fetch_queue_capacity >= limits.fetch_concurrency
            assert limits.fetch_concurrency <= 64  # autotune_max_fetch_concurrency
            assert limits.decode_concurrency <= 2  # threads
            assert limits.autotune_reason
            text = run_cli("stats", "--server", d.unix)
            assert text.returncode == 0, text.stderr
            assert "limits: fetch concurrency" in text.stdout
            assert "(autotune, " in text.stdout
            doc = run_cli("stats", "--server", d.unix, "--json")
            assert doc.returncode == 0, doc.stderr
            st = json.loads(doc.stdout)["streams"][0]["limits"]
            assert st["autotune"] is True and st["fetch_concurrency"] >= 2
            assert st["autotune_reason"]
            # Each change is a debug line naming the stream, the new and old
            # limits and why.
            assert "web stream 1: autotune: fetch concurrency 2, decode concurrency" in d.log()
            assert "raised fetch concurrency 1 -> 2" in d.log()
        finally:
            reader.stop()
        assert reader.error is None, reader.error
        assert reader.images > 0
    finally:
        server.stop()


def test_autotune_is_the_default(tmp_path, daemon_factory):
    root, _ = make_image_folder(tmp_path / "images", classes=2, per_class=8)
    cfg = daemon_config(root, pipelines={"train": pipeline_entry(root)})
    assert "autotune" not in (cfg.get("engine") or {})
    d = daemon_factory(cfg)
    reader = EndlessReader(d.unix, "train", batch_size=4)
    reader.start()
    try:
        assert wait_until(lambda: limits_of(d.unix) is not None and reader.images >= 16,
                          scaled(30))
        limits = limits_of(d.unix)
        assert limits.autotune
        assert limits.decode_concurrency <= 2  # threads
        assert limits.fetch_concurrency <= 64  # autotune_max_fetch_concurrency
    finally:
        reader.stop()
    assert reader.error is None, reader.error


def test_without_autotune_the_configured_limits_are_reported(tmp_path, daemon_factory):
    root, _ = make_image_folder(tmp_path / "images", classes=2, per_class=8)
    cfg = daemon_config(root, pipelines={"train": pipeline_entry(root)},
                        engine={"autotune": False, "fetch_concurrency": 3,
                                "fetch_queue_capacity": 7, "decode_concurrency": 1})
    d = daemon_factory(cfg)
    reader = EndlessReader(d.unix, "train", batch_size=4)
    reader.start()
    try:
        assert wait_until(lambda: limits_of(d.unix) is not None and reader.images >= 16,
                          scaled(30))
        limits = limits_of(d.unix)
        assert (limits.fetch_concurrency, limits.decode_concurrency,
                limits.fetch_queue_capacity) == (3, 1, 7)
        assert not limits.autotune and limits.autotune_changes == 0
        assert limits.autotune_reason == ""
    finally:
        reader.stop()
    assert reader.error is None, reader.error


def test_bad_autotune_settings_are_refused_naming_the_field(tmp_path):
    root, _ = make_image_folder(tmp_path / "images", classes=1, per_class=2)
    for engine, field in (({"autotune": True, "autotune_max_fetch_concurrency": 0},
                           "engine.autotune_max_fetch_concurrency"),
                          ({"autotune": "sometimes"}, "engine.autotune")):
        path = write_config(tmp_path / "conveyord.yaml",
                            daemon_config(root, pipelines={"train": pipeline_entry(root)},
                                          engine=engine))
        r = subprocess.run([str(CONVEYORD), "--config", str(path), "--check-config"],
                           capture_output=True, text=True, timeout=scaled(60))
        assert r.returncode != 0, (engine, r.stdout)
        assert field in r.stderr, (engine, r.stderr)
