"""Many streams per daemon: the 8 ranks of a job on one node plus a second
job. The dataset index is loaded once per dataset and shared by every
stream; the worker pool is shared fairly (two identical runnable streams are
served in turn; a stalled stream takes nothing from the others); limits on
streams and slot memory give a clear RESOURCE_EXHAUSTED. Nothing is timed:
the checks are the daemon's per-stream counts."""

import re
import shutil

import grpc
import pytest

import conveyor
from conveyor_integration import (daemon_config, pipeline_entry, skip_rss_check_if_sanitized,
                                  wait_until, write_list_file)

MiB = 1 << 20


# --- fairness ----------------------------------------------------------------
# Fairness is a property of the scheduler, not of wall-clock rates: while two
# streams both have free slots (both runnable), the workers serve them in
# turn, so from any moment on, identical streams' produced-batch counts
# (GetStats, per stream) grow alike - however slow or loaded the machine is.
# The clients read nothing during the measurement: with enough credits a
# stream stays runnable whatever its client does, so the counts are the
# scheduler's alone. (The stream opened first keeps the few batches of head
# start it had before the second one was open: the counts are compared from
# a moment when both run.)
def _emitted(address, ids):
    by_id = {s.stream_id: s.batches_emitted for s in conveyor.stats(address).streams}
    return [by_id[i] for i in ids]


def test_two_identical_runnable_streams_are_served_in_turn(daemon_factory, large_dataset):
    root, _ = large_dataset
    d = daemon_factory(daemon_config(root, pipelines={"big": pipeline_entry(root, size=128)},
                                     memory_budget="512MiB"), name="fair", threads=2)
    credits, batch = 64, 8
    # Same seed and rank: the same samples in the same order, the same work.
    streams = [conveyor.open_stream(d.unix, "big", batch, seed=1, num_epochs=0, credits=credits,
                                    auto_release=False) for _ in range(2)]
    try:
        ids = [s.stream_id for s in streams]
        assert wait_until(lambda: min(_emitted(d.unix, ids)) >= 8, 60), _emitted(d.unix, ids)
        start = _emitted(d.unix, ids)
        assert max(start) < credits // 2, start
        seen = []

        def progressed():
            now = _emitted(d.unix, ids)
            seen.append([n - s for n, s in zip(now, start)])
            # Stop well before either stream can run out of free slots.
            return min(seen[-1]) >= 16 or max(now) >= credits - 4

        assert wait_until(progressed, 120, interval=0.01), seen[-1]
        gaps = [abs(a - b) for a, b in seen]
        print("from %s on, batches each stream produced: %s at the end; largest gap %d over "
              "%d snapshots" % (start, seen[-1], max(gaps), len(seen)))
        assert min(seen[-1]) >= 16, "a stream fell behind until the other ran out of slots: %s" \
            % (seen[-1],)
        # One batch of skew between the two streams' figures in a snapshot,
        # a batch or two being collated for each: beyond that, one stream is
        # being served before the other.
        assert max(gaps) <= 3, "streams not served in turn: %s" % seen
    finally:
        for s in streams:
            s.close()


# --- a stalled stream --------------------------------------------------------
def _work(stats, stream_id):
    """(batches emitted, {stage: items_in}): what the workers did for a stream."""
    for s in stats.streams:
        if s.stream_id == stream_id:
            return s.batches_emitted, {st.name: st.items_in for st in s.stages}
    raise AssertionError("stream %d not in GetStats" % stream_id)


def test_a_stalled_stream_takes_nothing_from_a_reading_one(daemon_factory, large_dataset):
    root, samples = large_dataset
    d = daemon_factory(daemon_config(root, pipelines={"big": pipeline_entry(root, size=128)}),
                       name="stalled", threads=2)
    credits, epochs = 3, 4
    stalled = conveyor.open_stream(d.unix, "big", 16, seed=3, num_epochs=0, credits=credits,
                                   auto_release=False)
    with stalled:
        held = [next(stalled) for _ in range(credits)]
        # Once it holds all its credits nothing more of it is produced.
        before = _work(conveyor.stats(d.unix), stalled.stream_id)
        assert before[0] == credits, before
        loader = conveyor.Loader(d.unix, pipeline="big", batch_size=16, seed=2, credits=4)
        with loader.stream(num_epochs=epochs) as stream:
            images = sum(b.num_samples for b in stream)
            assert stream.end is not None
        loader.close()
        after = _work(conveyor.stats(d.unix), stalled.stream_id)
        assert all(not b.released for b in held)
    print("stalled stream's work before and after the reader's %d epochs: %s -> %s"
          % (epochs, before, after))
    assert images == epochs * len(samples), "the reader must complete its epochs"
    assert before == after, "the stalled stream kept using workers"


# --- 8 ranks + a second job on one daemon: one index ---------------------------
def _long_list(tmp_path, dataset, entries):
    """A list file of `entries` lines over copies of the dataset's JPEGs, each
    copy in folders of its own with long names (about 170 bytes a path) that
    differ from the path before at the front and at the back: a large index
    even front-coded (the index stores the bytes a path does not share with
    the one before it)."""
    root, samples = dataset
    base = tmp_path / "listdata"
    rels = []
    for k, (rel, label) in enumerate(samples):
        sub = "%03d%s/%s" % (k, "d" * 80, "e" * 80)
        (base / sub).mkdir(parents=True)
        name = "%s/%03d_%s" % (sub, k, rel.replace("/", "_"))
        shutil.copyfile(root / rel, base / name)
        rels.append((name, label))
    return base, write_list_file(base / "train.txt",
                                 (rels[i % len(rels)] for i in range(entries)))


def test_eight_ranks_and_a_second_job_share_one_index(daemon_factory, dataset, tmp_path):
    entries = 300_000
    base, listing = _long_list(tmp_path, dataset, entries)
    ds = {"list": str(listing)}
    cfg = daemon_config(base, pipelines={
        "job-a": pipeline_entry(base, dataset=ds, size=32),
        # Another pipeline over the same list (the second job): same index.
        "job-b": pipeline_entry(base, dataset=ds, augment="eval", size=32, resize_size=40),
    }, allowed_roots=[str(base)], max_streams=16)
    d = daemon_factory(cfg, name="index", threads=2)
    log = d.log()
    loaded = re.findall(r"dataset .*: (\d+) samples, \d+ classes, index ([\d.]+) MiB", log)
    assert len(loaded) == 1, "the list is indexed once for both pipelines:\n" + log
    assert int(loaded[0][0]) == entries
    index_bytes = float(loaded[0][1]) * MiB
    assert index_bytes > 40 * MiB

    def open_job(pipeline, rank, world, seed):
        s = conveyor.open_stream(d.unix, pipeline, 8, seed=seed, rank=rank, world_size=world,
                                 num_epochs=0, credits=2)
        next(s)
        next(s)  # the first batch is released: the pipeline ran
        return s

    # Warm up what every stream shares (threads' buffers, gRPC), then measure.
    with open_job("job-a", 0, 1, 0):
        pass
    assert wait_until(lambda: conveyor.stats(d.unix).streams_open == 0, 10)
    baseline = d.rss_bytes()
    streams = [open_job("job-a", r, 8, 11) for r in range(8)] + [open_job("job-b", 0, 1, 12)]
    try:
        st = conveyor.stats(d.unix)
        assert st.streams_open == 9
        assert sorted(s.pipeline for s in st.streams) == ["job-a"] * 8 + ["job-b"]
        grown = d.rss_bytes() - baseline
    finally:
        for s in streams:
            s.close()
    print("index %.1f MiB (%d entries); daemon RSS %.1f MiB before the 9 streams, +%.1f MiB with "
          "them (a copy per stream would be +%.0f MiB)"
          % (index_bytes / MiB, entries, baseline / MiB, grown / MiB, 9 * index_bytes / MiB))
    if not skip_rss_check_if_sanitized():
        assert baseline > index_bytes, "the index lives in the daemon"
        # Generous: a copy of the index per stream would be 9 x 40+ MiB.
        assert grown < 0.5 * index_bytes, "per-stream memory grows like the index: duplicated?"


# --- limits ------------------------------------------------------------------
def _open(address, batch_size=8, credits=4):
    s = conveyor.open_stream(address, "train", batch_size, num_epochs=0, credits=credits)
    next(s)
    return s


def _refused(address, pattern, **kw):
    with pytest.raises(conveyor.ResourceExhausted) as info:
        _open(address, **kw)
    assert info.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert re.search(pattern, str(info.value)), info.value
    return str(info.value)


def test_max_streams_gives_resource_exhausted(daemon_factory, dataset):
    root, _ = dataset
    d = daemon_factory(daemon_config(root, max_streams=3), name="maxstreams")
    held = [_open(d.unix) for _ in range(3)]
    msg = _refused(d.unix, r"3 streams are open.*max_streams")
    print(msg)
    held.pop().close()  # a place frees up
    assert wait_until(lambda: conveyor.stats(d.unix).streams_open == 2, 10)
    held.append(_open(d.unix))
    for s in held:
        s.close()


def test_memory_budget_gives_resource_exhausted(daemon_factory, dataset):
    root, _ = dataset
    d = daemon_factory(daemon_config(root, memory_budget="1MiB"), name="budget")
    # One slot: 8 x 3 x 64 x 64 bytes plus labels and indices, rounded to pages.
    msg = _refused(d.unix, r"needs .* of slot memory .* memory_budget", batch_size=64, credits=4)
    print(msg)
    held = [_open(d.unix, credits=4), _open(d.unix, credits=4)]  # about 2 x 400 KiB
    _refused(d.unix, r"only .* of the 1\.0 MiB memory_budget is free \(2 streams hold")
    st = conveyor.stats(d.unix)
    assert st.slot_bytes_budget == MiB and 0 < st.slot_bytes_in_use <= MiB
    held.pop().close()
    assert wait_until(lambda: conveyor.stats(d.unix).streams_open == 1, 10)
    held.append(_open(d.unix, credits=4))
    for s in held:
        s.close()
