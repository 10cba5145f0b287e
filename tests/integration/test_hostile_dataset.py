"""Hostile dataset entries through the real daemon: FIFOs in a dataset are
skipped samples naming the file type (never a stuck worker: the epoch ends and
SIGTERM stops the daemon at once), a FIFO given as list file stops the daemon
at start instead of hanging it, and symbolic links below a dataset root are
never followed, so pixels outside the allowed roots are never served. And the
whole hostile corpus (tests/support/hostile_corpus.py: empty, random,
truncated, corrupt, 12-bit, lossless, CMYK, arithmetic, EXIF-rotated,
wrong-extension, non-UTF-8-named, FIFO, link, unreadable, folder-named-like-
an-image entries) read through one daemon, every entry checked against its
expected outcome."""

import os
import signal
import stat
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import conveyor
from conveyor.daemon import is_serving
from conveyor_integration import (SOURCE_DIR, Daemon, daemon_config, finish_daemons,
                                  make_image_folder, pipeline_entry, scaled, wait_until,
                                  write_list_file)

sys.path.insert(0, str(SOURCE_DIR / "tests" / "support"))
import hostile_corpus as hc  # noqa: E402
import stuck_fuse  # noqa: E402


def _epoch_in_thread(address, pipeline, batch_size):
    """Reads one epoch on a helper thread; returns (thread, result dict) so
    the test can wait with a deadline instead of hanging on a stuck stream."""
    result = {}

    def run():
        try:
            loader = conveyor.Loader(address, pipeline=pipeline, batch_size=batch_size,
                                     credits=2, shuffle=False)
            samples, failures = 0, []
            try:
                with loader.epoch(0) as stream:
                    for batch in stream:
                        samples += batch.num_samples
                        failures.extend(batch.failures)
                    result["end"] = stream.end
            finally:
                loader.close()
            result["samples"], result["failures"] = samples, failures
        except Exception as e:  # reported by the test
            result["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, result


def _read_epoch_bounded(address, pipeline, batch_size, timeout=30):
    t, result = _epoch_in_thread(address, pipeline, batch_size)
    t.join(scaled(timeout))
    assert not t.is_alive(), "the epoch did not end within %d s (a worker is stuck)" % timeout
    assert "error" not in result, repr(result["error"])
    return result


def _reasons(failures):
    return {f.path: f.reason for f in failures}


def test_fifos_are_skipped_and_sigterm_stops_the_daemon(tmp_path, daemon_factory):
    root, samples = make_image_folder(tmp_path / "data" / "images", classes=1, per_class=6)
    # Two FIFOs (one per worker thread): before the fix they stalled every stream.
    for name in ("class_a/pipe0.jpg", "class_a/pipe1.jpg"):
        os.mkfifo(root / name)
    entries = samples[:3] + [("class_a/pipe0.jpg", 0)] + samples[3:] + [("class_a/pipe1.jpg", 0)]
    listing = write_list_file(root / "list.txt", entries)
    cfg = daemon_config(root, pipelines={
        "fifo": pipeline_entry(root, dataset={"list": str(listing)}, max_failure_rate=1.0)})
    d = daemon_factory(cfg, threads=2)

    result = _read_epoch_bounded(d.unix, "fifo", batch_size=4)
    assert result["samples"] == len(samples)
    reasons = _reasons(result["failures"])
    assert sorted(reasons) == ["class_a/pipe0.jpg", "class_a/pipe1.jpg"]
    for reason in reasons.values():
        assert "not a regular file (FIFO)" in reason, reason

    t0 = time.monotonic()
    d.signal(signal.SIGTERM)
    rc = d.wait(timeout=scaled(15))
    assert rc == 0, d.log()
    assert time.monotonic() - t0 < scaled(10)


def test_fifos_swapped_in_after_indexing_stall_no_stream(tmp_path, daemon_factory):
    """Issue 16 #3 as a hostile user does it: two indexed images of an image
    folder are replaced by FIFOs once the daemon serves (one per worker
    thread, nobody ever writes to them). A stream over that folder and one
    over another folder, read at once, both end within a deadline (the two
    FIFOs are skipped samples naming the file type); the health check still
    truthfully says SERVING because no worker is stuck (a third stream is
    served after them); SIGTERM stops the daemon at once. Before the fix
    (open without O_NONBLOCK) both workers blocked in open(2) for good:
    every stream stalled while health said SERVING, and SIGTERM hung."""
    root, samples = make_image_folder(tmp_path / "data" / "images", classes=2, per_class=5)
    other, other_samples = make_image_folder(tmp_path / "data" / "other", classes=1,
                                             per_class=12, seed=3)
    cfg = daemon_config(root, pipelines={
        "swapped": pipeline_entry(root, max_failure_rate=1.0),
        "other": pipeline_entry(other)})
    d = daemon_factory(cfg, threads=2)
    swapped = [samples[1][0], samples[7][0]]  # one per class
    for rel in swapped:
        os.remove(root / rel)
        os.mkfifo(root / rel)

    first, first_result = _epoch_in_thread(d.unix, "swapped", batch_size=4)
    second, second_result = _epoch_in_thread(d.unix, "other", batch_size=4)
    for t, name in ((first, "swapped"), (second, "other")):
        t.join(scaled(30))
        assert not t.is_alive(), "the %s stream did not end within 30 s (workers stuck)" % name
    for result in (first_result, second_result):
        assert "error" not in result, repr(result["error"])
    assert first_result["samples"] == len(samples) - 2
    reasons = _reasons(first_result["failures"])
    assert sorted(reasons) == sorted(swapped)
    for reason in reasons.values():
        assert "not a regular file (FIFO)" in reason, reason
    assert second_result["samples"] == len(other_samples)
    assert second_result["failures"] == []

    # SERVING, and true: the workers are free to serve another epoch.
    assert is_serving(d.unix, timeout=scaled(5))
    again = _read_epoch_bounded(d.unix, "other", batch_size=6)
    assert again["samples"] == len(other_samples)

    t0 = time.monotonic()
    d.signal(signal.SIGTERM)
    rc = d.wait(timeout=scaled(15))
    assert rc == 0, d.log()
    assert time.monotonic() - t0 < scaled(10)


@pytest.mark.parametrize("transport", ["shared_memory", "inline", "data_socket"])
def test_a_batch_whose_every_sample_failed_is_sent_and_the_stream_goes_on(
        tmp_path, daemon_factory, transport):
    """Issue 16 #8: a batch of nothing but failures (error_policy skip) is a
    batch of 0 samples naming each failure, on every transport, and the
    stream goes on. Its empty label and index fields once met
    memcpy(nullptr, ..., 0) in the reactor (5c05c6f): UndefinedBehaviorSanitizer
    reports that in CI's asan stage, and finish_daemons fails on the report."""
    root, samples = make_image_folder(tmp_path / "data" / "images", classes=1, per_class=8)
    empty = ["class_a/empty_%d.jpg" % i for i in range(4)]
    for rel in empty:
        (root / rel).write_bytes(b"")
    entries = samples[:4] + [(rel, 0) for rel in empty] + samples[4:]
    listing = write_list_file(root / "list.txt", entries)
    cfg = daemon_config(root, pipelines={
        "p": pipeline_entry(root, dataset={"list": str(listing)}, max_failure_rate=1.0)})
    d = daemon_factory(cfg)  # with a data socket beside TCP (the default)
    address = d.unix if transport == "shared_memory" else d.tcp
    stream = conveyor.open_stream(address, "p", 4, credits=2, shuffle=False,
                                  transport=transport)
    try:
        assert stream.transport == transport
        batches = [(b.num_samples, sorted(f.path for f in b.failures), list(b.labels))
                   for b in stream]
        assert stream.end is not None
    finally:
        stream.close()
    assert batches == [(4, [], [0] * 4), (0, empty, []), (4, [], [0] * 4)], batches


def test_sigterm_stops_the_daemon_while_a_worker_is_stuck_in_a_read(tmp_path, daemon_factory):
    """Issue 16 #3, "make shutdown independent of stuck I/O": a sample on a
    mount whose reads never return (tests/support/stuck_fuse.py, a FUSE file
    standing for a hung network filesystem) holds a worker in pread(2) for
    good. SIGTERM must still stop the daemon: within shutdown_timeout_seconds
    and the grace after it, it exits saying a worker is stuck, instead of
    waiting forever to join that worker (as it did before the fix)."""
    why = stuck_fuse.available()
    if why:
        pytest.skip(why)
    root, samples = make_image_folder(tmp_path / "data" / "images", classes=1, per_class=4)
    (root / "mnt").mkdir()
    listing = write_list_file(root / "list.txt", samples + [("mnt/stuck.jpg", 0)])
    cfg = daemon_config(root, shutdown_timeout_seconds=1, pipelines={
        "p": pipeline_entry(root, dataset={"list": str(listing)})})
    d = daemon_factory(cfg, threads=2)
    with stuck_fuse.StuckFile(root / "mnt", "stuck.jpg") as fs:
        reader, result = _epoch_in_thread(d.unix, "p", batch_size=8)
        assert fs.wait_for_read(scaled(30)), "the daemon never read the stuck file"
        t0 = time.monotonic()
        d.signal(signal.SIGTERM)
        try:
            rc = d.wait(timeout=scaled(45))
        except subprocess.TimeoutExpired:
            pytest.fail("SIGTERM did not stop conveyord with a worker stuck in a read "
                        "(45 s):\n" + d.log_tail())
        took = time.monotonic() - t0
        # Its own exit ended the stuck read, not the unmount below.
        assert fs.interrupted >= 1
        reader.join(scaled(30))
        assert not reader.is_alive(), "the client's stream did not end with the daemon"
    log = d.log()
    print("exited %s after %.1f s" % (rc, took))
    assert rc != 0, log
    assert "stuck" in log, log[-4000:]
    assert "error" in result, result  # the stream ended without its last batch


def test_a_fifo_as_list_file_stops_the_daemon_at_start(tmp_path):
    root, _ = make_image_folder(tmp_path / "data" / "images", classes=1, per_class=2)
    listing = root / "list.txt"
    os.mkfifo(listing)
    cfg = daemon_config(root, pipelines={"p": pipeline_entry(root, dataset={"list": str(listing)})})
    d = Daemon(tmp_path / "daemon", cfg)
    d.spawn()
    try:
        rc = d.wait(timeout=scaled(20))
    except subprocess.TimeoutExpired:
        pytest.fail("conveyord hung loading a FIFO as list file:\n" + d.log())
    finally:
        d.kill()
    assert rc != 0
    assert "not a regular file (FIFO)" in d.log(), d.log()


def test_links_below_the_root_never_serve_outside_pixels(tmp_path, daemon_factory):
    root, samples = make_image_folder(tmp_path / "data" / "images", classes=2, per_class=4)
    # Outside the allowed roots (daemon_config allows tmp_path/data only).
    secret, _ = make_image_folder(tmp_path / "secret", classes=1, per_class=2, seed=9)
    os.symlink(secret / "class_a" / "img_000.jpg", root / "class_a" / "link.jpg")
    os.symlink(secret / "class_a", root / "class_c")  # a class folder linking outside
    cfg = daemon_config(root, pipelines={"p": pipeline_entry(root, max_failure_rate=1.0)})
    d = daemon_factory(cfg)

    result = _read_epoch_bounded(d.unix, "p", batch_size=4)
    assert result["samples"] == len(samples)  # class_c is no class; link.jpg is refused
    reasons = _reasons(result["failures"])
    assert list(reasons) == ["class_a/link.jpg"]
    assert "symbolic link refused" in reasons["class_a/link.jpg"]


def test_failure_reasons_name_dataset_relative_paths(tmp_path, daemon_factory):
    """Issue 26 #8: what a client sees of a failure — Batch.failures' path
    and reason, the status ending a fail_fast stream — names the sample by
    its dataset-relative path, never by the server's absolute one: a file
    too large, a FIFO, a symbolic link, a missing file, a tar member too
    large and a tar shard cut short after start (a range past its end)."""
    import io
    import tarfile
    root, samples = make_image_folder(tmp_path / "data" / "images", classes=1, per_class=4)
    (root / "class_a" / "big.jpg").write_bytes(b"\xff\xd8" + bytes(300000))
    os.mkfifo(root / "class_a" / "pipe.jpg")
    os.symlink(root / "class_a" / "img_000.jpg", root / "class_a" / "link.jpg")
    bad = {"class_a/big.jpg": "exceeds the 200000-byte limit",
           "class_a/pipe.jpg": "not a regular file (FIFO)",
           "class_a/link.jpg": "symbolic link refused",
           "class_a/gone.jpg": "No such file or directory"}
    listing = write_list_file(root / "list.txt", samples + [(p, 0) for p in bad])
    shard = tmp_path / "data" / "shards" / "s.tar"
    shard.parent.mkdir()
    jpeg = (root / samples[0][0]).read_bytes()
    with tarfile.open(shard, "w", format=tarfile.GNU_FORMAT) as tar:
        for key, data in (("a", jpeg), ("b", b"\xff\xd8" + bytes(300000)), ("c", jpeg)):
            for ext, payload in (("jpg", data), ("cls", b"0")):
                info = tarfile.TarInfo("%s.%s" % (key, ext))
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
    with tarfile.open(shard) as tar:
        cut = tar.getmember("c.jpg").offset_data + 10
    cfg = daemon_config(root, pipelines={
        "files": pipeline_entry(root, dataset={"list": str(listing)}, max_failure_rate=1.0,
                                max_file_bytes=200000),
        "strict": pipeline_entry(root, dataset={"list": str(listing)}, max_file_bytes=200000,
                                 error_policy="fail_fast"),
        "tar": pipeline_entry(root, dataset={"shards": [str(shard)], "shuffle_buffer": 0},
                              max_failure_rate=1.0, max_file_bytes=200000)},
        allowed_roots=[str(tmp_path / "data")])
    d = daemon_factory(cfg)
    os.truncate(shard, cut)  # after the load: c.jpg now runs past the end

    reasons = _reasons(_read_epoch_bounded(d.unix, "files", batch_size=4)["failures"])
    reasons.update(_reasons(_read_epoch_bounded(d.unix, "tar", batch_size=4)["failures"]))
    bad.update({"s.tar/b.jpg": "member of 300002 bytes exceeds", "s.tar/c.jpg": "file ended"})
    assert sorted(reasons) == sorted(bad), reasons
    problems = ["%s: %r, expected %r" % (p, reasons[p], want) for p, want in bad.items()
                if want not in reasons[p]]
    problems += ["%s: the reason names a server path: %r" % (p, r) for p, r in reasons.items()
                 if str(tmp_path) in r]
    t, strict = _epoch_in_thread(d.unix, "strict", batch_size=4)
    t.join(scaled(30))
    assert "error" in strict, strict
    if str(tmp_path) in str(strict["error"]):
        problems.append("the fail_fast status names a server path: %s" % strict["error"])
    assert not problems, "\n".join(problems)


# --- the hostile corpus (tests/support/hostile_corpus.py) ---------------------


class _PrefixedDaemon(Daemon):
    """A Daemon whose command line starts with `prefix` (setpriv)."""

    def __init__(self, workdir, config, prefix, **kwargs):
        super().__init__(workdir, config, **kwargs)
        self.prefix = list(prefix)

    def command(self):
        return self.prefix + super().command()


def _read_hostile_epoch(address):
    """Epoch 0 of the `hostile` pipeline: {index: (label, CHW pixels)} of
    the delivered samples and {path: (index, reason)} of the failed ones."""
    loader = conveyor.Loader(address, pipeline="hostile", batch_size=8, credits=2,
                             shuffle=False)
    served, failures = {}, {}
    try:
        with loader.epoch(0) as stream:
            for batch in stream:
                images = np.asarray(batch.images)
                for i, index in enumerate(batch.indices):
                    served[int(index)] = (int(batch.labels[i]), images[i].copy())
                for f in batch.failures:
                    failures[f.path] = (f.sample_index, f.reason)
    finally:
        loader.close()
    return served, failures


def _offered_for_relay(path):
    """Whether the daemon reads `path` and would queue it to be re-laid: a
    regular file (never a FIFO or link: opening a FIFO here would block)
    that its owner may read, starting like a JPEG."""
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode) or not st.st_mode & 0o400:
            return False
        with open(path, "rb") as f:
            return f.read(3) == b"\xff\xd8\xff"
    except OSError:
        return False


@pytest.mark.parametrize("relay", [False, True], ids=["as-is", "relay_jpeg"])
def test_hostile_corpus_every_entry_gets_its_outcome(tmp_path, relay):
    """Every entry of the hostile corpus through a real daemon (under ASan +
    UBSan in CI's asan stage): delivered ones with their label and the
    pixels PIL decodes, skipped ones reported with their reason, ignored
    ones nowhere; the daemon serves the whole epoch and exits cleanly; no
    reason names the server's absolute paths.
    With relay_jpeg the epoch is read a second time once the copies are
    made, and checked the same way: what could be re-laid is served from
    its copy, the rest as it is, with the same outcomes.
    As root the daemon runs without CAP_DAC_OVERRIDE / CAP_DAC_READ_SEARCH
    (setpriv), so that the mode-000 entry is unreadable to it as it is to
    any other user; every other file is root's own."""
    root = tmp_path / "data" / "hostile"
    entries = hc.build(root, outside=tmp_path / "outside")
    size = hc.DELIVERED_SIZE
    cfg = daemon_config(root, pipelines={"hostile": pipeline_entry(
        root, augment="eval", size=size, resize_size=size, dct_scaling=False,
        max_failure_rate=1.0, relay_jpeg=relay)})
    if relay:
        cfg["cache"] = {"dir": str(tmp_path / "cache"), "max_bytes": "64MiB"}
    prefix = hc.DAEMON_PREFIX_AS_ROOT if os.geteuid() == 0 else []
    d = _PrefixedDaemon(tmp_path / "daemon", cfg, prefix)
    try:
        d.start()
        served, failures = _read_hostile_epoch(d.unix)
        if relay:
            order = hc.index_order(entries)
            jpegs = sum(1 for e in order if _offered_for_relay(root / e.shown))

            def relayed():
                c = conveyor.stats(d.unix).object_cache
                return c.relaid_made + c.relaid_refused + c.relaid_dropped >= jpegs
            assert wait_until(relayed, scaled(60), interval=0.1), (
                conveyor.stats(d.unix).object_cache, jpegs)
            assert conveyor.stats(d.unix).object_cache.relaid_made > 0
            served, failures = _read_hostile_epoch(d.unix)
    finally:
        finish_daemons([d])

    order = hc.index_order(entries)
    problems = []
    for index, e in enumerate(order):
        shown = "%s (%s)" % (e.shown, e.kind)
        if e.outcome == hc.DELIVERED:
            if index not in served:
                problems.append("%s: not delivered; reported as %r" % (
                    shown, failures.get("%s" % e.shown, (None, "nothing"))[1]))
                continue
            label, chw = served[index]
            if label != e.label:
                problems.append("%s: label %d, expected %d" % (shown, label, e.label))
            expected = hc.expected_pixels(root, e)
            got = np.transpose(chw, (1, 2, 0))
            if got.shape != expected.shape or not np.array_equal(got, expected):
                diff = (np.abs(got.astype(int) - expected.astype(int)).max()
                        if got.shape == expected.shape else "shape %s" % (got.shape,))
                problems.append("%s: pixels differ from PIL's decode (max diff %s)" % (shown, diff))
        else:  # SKIPPED
            if index in served:
                problems.append("%s: delivered, expected skipped with %r" % (shown, e.reason))
            elif e.shown not in failures:
                problems.append("%s: not reported (failures name %s)" % (shown, sorted(failures)))
            else:
                sample_index, reason = failures[e.shown]
                if sample_index != index or e.reason not in reason:
                    problems.append("%s: reported as #%d %r, expected #%d with %r" % (
                        shown, sample_index, reason, index, e.reason))
    known = {e.shown for e in order}
    for path, (_, reason) in failures.items():
        if path not in known:
            problems.append("%s: reported (%r) but not an expected sample" % (path, reason))
        # Issue 26 #8: clients learn dataset-relative paths, never the
        # server's folders (the FIFO, link, unreadable... reasons once
        # named the absolute path).
        if str(tmp_path) in reason:
            problems.append("%s: the reason names a server path: %r" % (path, reason))
    if len(served) + len(failures) != len(order):
        problems.append("%d served + %d reported, expected %d samples in the epoch" % (
            len(served), len(failures), len(order)))
    print("\n".join("%s: %s" % (p, r) for p, (_, r) in sorted(failures.items())))
    assert not problems, "\n".join(problems)
