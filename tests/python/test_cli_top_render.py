"""`conveyor top` without a terminal or a daemon: the rates computed from two
GetStats responses (conveyor.stats_view.top_frame) and the screen lines drawn
from them (conveyor.top.render), at normal and tiny terminal sizes."""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "client", "python"))

from conveyor._proto.v1 import conveyor_pb2 as pb  # noqa: E402
from conveyor.stats_view import stats_dict, top_frame  # noqa: E402
from conveyor.top import render  # noqa: E402

STAGES = ("sample", "fetch", "decode", "collate", "deliver")


def response(uptime_s, samples, busy_decode_s, streams=(), bottleneck="decode"):
    """A daemon with 2 threads that moved `samples` samples (batches of 8)."""
    r = pb.GetStatsResponse(num_threads=2, uptime_ns=int(uptime_s * 1e9), streams_open=len(streams),
                            streams_total=3, slot_bytes_in_use=2 << 20, slot_bytes_budget=256 << 20,
                            bottleneck=bottleneck)
    for name in STAGES:
        s = r.stages.add(name=name)
        if name in ("fetch", "decode"):
            s.items_in = s.items_out = samples
        elif name == "collate":
            s.items_in, s.items_out = samples, samples // 8
            s.queue_size, s.queue_capacity = 1, 4
        elif name == "deliver":
            s.items_in = s.items_out = samples // 8
        else:
            s.items_in = s.items_out = 1
        if name == "decode":
            s.busy_ns = int(busy_decode_s * 1e9)
            s.failures = samples // 100
            s.queue_size, s.queue_capacity = 3, 4
    for sid, emitted, elapsed_s, peer in streams:
        r.streams.add(stream_id=sid, pipeline="train", samples_emitted=emitted,
                      batches_emitted=emitted // 8, slots_total=4, slots_held_by_client=2,
                      elapsed_ns=int(elapsed_s * 1e9), peer=peer)
    return r


def stage(frame, name):
    return next(s for s in frame["stages"] if s["name"] == name)


def test_rates_are_deltas_over_the_daemons_clock():
    prev = response(10.0, 800, 4.0, streams=[(7, 400, 5.0, "unix:/s (pid 9, uid 1, gid 1)")])
    cur = response(12.0, 1800, 5.5, streams=[(7, 1400, 7.0, "unix:/s (pid 9, uid 1, gid 1)")])
    f = top_frame(cur, prev)
    assert f["interval_s"] == 2.0
    assert stage(f, "decode")["in_per_s"] == 500.0
    assert stage(f, "collate")["in_per_s"] == 500.0
    assert stage(f, "collate")["unit_in"] == "samples"
    assert stage(f, "collate")["unit_out"] == "batches"
    assert stage(f, "collate")["out_per_s"] == 62.5
    # 1.5 s of decode work in 2 s on 2 threads: 37.5 % of the pool.
    assert stage(f, "decode")["busy_pct"] == 37.5
    assert stage(f, "decode")["failures_per_s"] == 5.0
    assert f["load"] is True and f["bottleneck"] == "decode"
    [st] = f["streams"]
    assert st["images_per_s"] == 500.0
    assert (st["credits_in_use"], st["credits"]) == (2, 4)
    assert st["client"].startswith("unix:/s (pid 9")
    json.dumps(f)  # a frame is what `top --json` writes


def test_no_bottleneck_without_load_even_if_the_daemon_names_one():
    prev = response(10.0, 800, 4.0)
    cur = response(11.0, 800, 4.0)
    f = top_frame(cur, prev)
    assert f["load"] is False
    assert f["bottleneck"] is None
    assert stage(f, "decode")["in_per_s"] == 0.0
    lines = render(f, 120, 40, "unix:///x.sock", 1.0)
    assert not any("<- bottleneck" in line for line in lines)
    assert lines[-1] == "bottleneck: none (no load)"


def test_first_refresh_and_a_restarted_daemon_have_no_rates():
    first = top_frame(response(10.0, 800, 4.0))
    assert first["load"] is None and first["bottleneck"] is None
    assert stage(first, "decode")["in_per_s"] is None
    restarted = top_frame(response(1.0, 8, 0.1), prev=response(10.0, 800, 4.0))
    assert restarted["interval_s"] is None
    assert render(first, 100, 30)[-1] == "measuring..."


def test_render_shows_stages_units_streams_and_the_bottleneck():
    prev = response(10.0, 800, 4.0, streams=[(7, 400, 5.0, "127.0.0.1:5000")])
    cur = response(11.0, 1300, 4.9, streams=[(7, 900, 6.0, "127.0.0.1:5000")])
    lines = render(top_frame(cur, prev), 140, 40, "unix:///x.sock", 0.5)
    text = "\n".join(lines)
    assert lines[0].startswith("conveyor top  unix:///x.sock  every 0.5s")
    decode = next(line for line in lines if line.startswith("decode"))
    assert "500.0 samples/s" in decode and "45%" in decode and "3/4 samples" in decode
    assert decode.endswith("<- bottleneck")
    collate = next(line for line in lines if line.startswith("collate"))
    assert "62.0 batches/s" in collate and "1/4 batches" in collate
    stream = next(line for line in lines if line.lstrip().startswith("7 "))
    assert "train" in stream and "500.0" in stream and "2/4" in stream
    assert stream.endswith("127.0.0.1:5000")
    assert lines[-1] == "bottleneck: decode"
    assert "no stream open" not in text


def test_render_fits_any_terminal_size():
    cur = response(11.0, 1300, 4.9, streams=[(i, 100, 1.0, "peer-%d" % i) for i in range(30)])
    frame = top_frame(cur, response(10.0, 800, 4.0))
    for width, height in ((200, 60), (80, 24), (40, 12), (30, 5), (29, 40), (10, 2), (1, 1),
                          (0, 0)):
        lines = render(frame, width, height, "unix:///x.sock", 1.0)
        assert len(lines) <= height, (width, height)
        assert all(len(line) < max(width, 1) for line in lines), (width, height)
    small = render(frame, 80, 12, "unix:///x.sock", 1.0)
    assert any("more line(s)" in line for line in small)
    assert small[-1] == "bottleneck: decode"
    assert render(frame, 20, 10)[0] == "terminal too small"


def test_render_says_when_the_daemon_is_gone():
    lines = render(None, 80, 24, "unix:///x.sock", 1.0, problem="GetStats failed: UNAVAILABLE")
    assert lines[-1] == "daemon unavailable: GetStats failed: UNAVAILABLE (retrying)"


def test_stats_json_keys_are_stable():
    d = stats_dict(response(12.0, 1800, 5.5, streams=[(7, 1400, 7.0, "p")], bottleneck=""))
    assert sorted(d) == ["bottleneck", "delivered", "deliveries", "object_cache", "output_caches",
                         "remote_hosts", "slot_bytes_budget", "slot_bytes_in_use", "stages",
                         "streams", "streams_open", "streams_total", "threads", "uptime_s"]
    assert d["remote_hosts"] == []  # no remote dataset
    assert d["output_caches"] == []  # no pipeline with cache_output
    assert d["object_cache"] is None  # no cache section
    assert d["delivered"] == {"batches": 0, "samples": 0, "bytes": 0}  # nothing sent yet
    assert d["bottleneck"] is None
    assert sorted(d["stages"][0]) == [
        "busy_s", "failures", "in_flight", "items_in", "items_out", "name", "queue_capacity",
        "queue_size", "queue_unit", "unit_in", "unit_out", "wait_input_s", "wait_output_s"]
    assert sorted(d["streams"][0]) == [
        "batches", "client", "credits", "credits_in_use", "elapsed_s", "images_per_s",
        "limits", "pipeline", "samples", "samples_failed", "stream_id"]
    assert sorted(d["streams"][0]["limits"]) == [
        "autotune", "autotune_changes", "autotune_reason", "decode_concurrency",
        "fetch_concurrency", "fetch_queue_capacity"]
    assert stage(d, "fetch")["queue_unit"] is None  # no queue in front of fetch
