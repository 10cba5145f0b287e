"""Faults through a real daemon: dataset files deleted, replaced or
truncated while a stream reads them; the slot memory budget exhausted while
other streams read; and `conveyor fetch --out` on a full disk.

What must hold: a file that went is a failure of its sample naming the file
(skip) or ends the stream naming it (fail_fast), and every sample is
delivered once or reported failed once; a file replaced by an atomic rename
serves the new picture; a stream the budget cannot hold is refused with
RESOURCE_EXHAUSTED and the figures, the open streams go on, the daemon's
memory stays within the budget plus a bound, and closing a stream makes room
again; a full disk gives a clear error naming the file, a non-zero exit, no
traceback and no partial batch file.
"""

import os
import shutil
import subprocess

import numpy as np
import pytest

import conveyor
from conveyor_integration import (CLI, IMAGE_SIZE, PYTHON, client_env, daemon_config,
                                  make_image_folder, pipeline_entry, scaled,
                                  skip_rss_check_if_sanitized, wait_until)

MiB = 1 << 20
BATCH = 4


@pytest.fixture
def folder(tmp_path):
    """40 JPEGs of this test only (the test changes them): (root, samples)."""
    return make_image_folder(tmp_path / "data" / "images", classes=2, per_class=20)


def _daemon(daemon_factory, root, **entry):
    entry.setdefault("max_failure_rate", 1.0)
    pipes = {"train": pipeline_entry(root, **entry),
             "eval": pipeline_entry(root, augment="eval", resize_size=IMAGE_SIZE, **entry)}
    return daemon_factory(daemon_config(root, pipelines=pipes), name="faults")


def _stream(d, pipeline="train", num_epochs=1):
    # One credit: the daemon holds at most one batch, so it reads at most a
    # batch or two ahead of what the test took (files of the last batches are
    # read long after the test changed them).
    return conveyor.open_stream(d.unix, pipeline, BATCH, num_epochs=num_epochs, credits=1,
                                shuffle=False)


def _take_first_then(stream, change):
    """Takes batch 0, calls change(), then reads to the end: returns
    [(indices, failures, images)] of every batch."""
    out = []
    first = next(stream)
    out.append((first.indices.tolist(), list(first.failures), first.images.copy()))
    change()
    for b in stream:
        out.append((b.indices.tolist(), list(b.failures), b.images.copy()))
    return out


def test_files_deleted_mid_epoch_are_failures_naming_them(daemon_factory, folder):
    root, samples = folder
    d = _daemon(daemon_factory, root)
    gone = [samples[i][0] for i in (33, 38)]  # batches 8 and 9 of 10
    with _stream(d, num_epochs=2) as s:
        got = _take_first_then(s, lambda: [os.unlink(root / g) for g in gone])
        assert s.end is not None
    assert len(got) == 20
    for epoch in range(2):
        batches = got[10 * epoch:10 * epoch + 10]
        delivered = [i for idx, _, _ in batches for i in idx]
        failures = [f for _, fs, _ in batches for f in fs]
        assert sorted(f.path for f in failures) == gone
        for f in failures:
            assert "ENOENT" in f.reason, f.reason
            assert f.path in f.reason, f.reason  # the reader names the file too
        # Every sample once: delivered or reported failed, never both, never twice.
        assert sorted(delivered + [f.sample_index for f in failures]) == list(range(40))
        assert {f.sample_index for f in failures} == {33, 38}


def test_a_file_deleted_mid_epoch_ends_a_fail_fast_stream_naming_it(daemon_factory, folder):
    root, samples = folder
    d = _daemon(daemon_factory, root, error_policy="fail_fast")
    gone = samples[37][0]  # batch 9
    delivered = []
    with _stream(d) as s:
        delivered.extend(next(s).indices.tolist())
        os.unlink(root / gone)
        with pytest.raises(conveyor.DataError) as info:
            for b in s:
                assert not b.failures
                delivered.extend(b.indices.tolist())
    assert gone in str(info.value), info.value
    assert "ENOENT" in str(info.value), info.value
    assert delivered == list(range(36))  # batches 0-8 whole, nothing after


def test_a_file_replaced_mid_epoch_serves_the_new_picture(daemon_factory, folder):
    root, samples = folder
    d = _daemon(daemon_factory, root)
    # The eval pipeline is deterministic: a sample's pixels depend on its bytes only.
    with _stream(d, pipeline="eval") as s:
        clean = np.concatenate([b.images.copy() for b in s])
    target, donor = 37, 5
    tmp = root / "replacement.tmp"
    shutil.copyfile(root / samples[donor][0], tmp)

    def replace():
        os.rename(tmp, root / samples[target][0])  # atomic: readers see old or new, whole

    with _stream(d, pipeline="eval") as s:
        got = _take_first_then(s, replace)
    images = np.concatenate([im for _, _, im in got])
    assert all(not fs for _, fs, _ in got)
    assert np.array_equal(images[target], clean[donor])
    assert not np.array_equal(images[target], clean[target])
    others = [i for i in range(40) if i != target]
    assert np.array_equal(images[others], clean[others])


def test_a_file_truncated_mid_epoch_is_a_failure_naming_it(daemon_factory, folder):
    root, samples = folder
    d = _daemon(daemon_factory, root)
    target = samples[34][0]
    size = (root / target).stat().st_size

    def truncate():
        with open(root / target, "r+b") as f:
            f.truncate(size // 2)

    with _stream(d) as s:
        got = _take_first_then(s, truncate)
        assert s.end is not None
    failures = [f for _, fs, _ in got for f in fs]
    assert [f.path for f in failures] == [target]
    assert "truncated" in failures[0].reason, failures[0].reason
    delivered = [i for idx, _, _ in got for i in idx]
    assert sorted(delivered) == [i for i in range(40) if i != 34]


# --- memory budget -------------------------------------------------------------
def test_memory_budget_exhausted_refuses_new_streams_while_open_ones_flow(daemon_factory,
                                                                           dataset):
    root, _ = dataset
    budget = 32 * MiB
    d = daemon_factory(daemon_config(root, memory_budget="32MiB"), name="budget")
    baseline = d.rss_bytes()
    streams, refusal = [], None
    try:
        # Each stream reserves 8 slots of 24 samples (about 2.3 MiB; two
        # batches an epoch of 48): the budget holds 13 of them.
        for _ in range(64):
            try:
                s = conveyor.open_stream(d.unix, "train", 24, num_epochs=0, credits=8)
            except conveyor.ResourceExhausted as e:
                refusal = e
                break
            streams.append(s)
        assert refusal is not None, "64 streams of 2.3 MiB fit a 32 MiB budget"
        msg = str(refusal)
        print(msg)
        assert "RESOURCE_EXHAUSTED" in msg
        assert "32.0 MiB memory_budget" in msg, msg
        assert "%d streams hold" % len(streams) in msg, msg
        assert len(streams) >= 2
        st = conveyor.stats(d.unix)
        assert st.streams_open == len(streams)
        assert st.slot_bytes_in_use <= budget == st.slot_bytes_budget

        # The open streams keep flowing, every slot of every stream filled.
        for _ in range(2):
            for s in streams:
                for _ in range(8):
                    b = next(s)
                    assert b.num_samples == 24 and not b.failures
        rss = d.rss_bytes()
        print("daemon RSS %.1f MiB idle, %.1f MiB with %d streams filling a %.0f MiB budget"
              % (baseline / MiB, rss / MiB, len(streams), budget / MiB))
        if not skip_rss_check_if_sanitized():
            # Slots are the budget; decode buffers and queues are per worker
            # and per stream: a few MiB here (1.5 MiB measured).
            assert rss <= baseline + budget + 24 * MiB

        # Closing one makes room: a new stream opens and reads.
        streams.pop().close()
        assert wait_until(lambda: conveyor.stats(d.unix).streams_open == len(streams), 10)
        s = conveyor.open_stream(d.unix, "train", 24, num_epochs=0, credits=8)
        streams.append(s)
        assert next(s).num_samples == 24
        for s in streams[:-1]:  # and the others still flow
            assert next(s).num_samples == 24
    finally:
        for s in streams:
            s.close()
    assert wait_until(d.idle, 10)


# --- conveyor fetch --out on a full disk -----------------------------------------
@pytest.fixture
def small_disk(tmp_path):
    """A 320 KiB tmpfs: room for three batches of 8 (about 98 KiB each)."""
    mnt = tmp_path / "small_disk"
    mnt.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=320k", "tmpfs", str(mnt)],
                         capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip("needs root: mounting a small tmpfs (CAP_SYS_ADMIN): %s" % res.stderr.strip())
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.mark.parametrize("fmt", ["npz", "npy"])
def test_fetch_out_on_a_full_disk_fails_clearly_and_leaves_no_partial_file(daemon, small_disk,
                                                                            fmt):
    out = small_disk / "batches"
    res = subprocess.run([PYTHON, str(CLI), "fetch", "--server", daemon.unix, "--pipeline",
                          "train", "--batches", "20", "--batch-size", "8", "--out", str(out),
                          "--format", fmt], capture_output=True, text=True,
                         timeout=scaled(60), env=client_env())
    print(res.stderr)
    assert res.returncode == 1, (res.returncode, res.stdout, res.stderr)
    assert "Traceback" not in res.stderr
    assert "No space left on device" in res.stderr
    assert "ENOSPC" in res.stderr
    assert str(out) in res.stderr
    names = sorted(p.name for p in out.iterdir())
    assert not [n for n in names if n.endswith(".partial")], names
    per_batch = 1 if fmt == "npz" else 3
    assert names and len(names) % per_batch == 0, names  # whole batches only
    done = len(names) // per_batch
    assert "%d complete batch" % done in res.stderr
    for i in range(done):  # what is there is whole and readable
        if fmt == "npz":
            with np.load(out / ("batch_%05d.npz" % i)) as z:
                images, labels = z["images"], z["labels"]
        else:
            images = np.load(out / ("batch_%05d_images.npy" % i))
            labels = np.load(out / ("batch_%05d_labels.npy" % i))
        assert images.shape == (8, 3, IMAGE_SIZE, IMAGE_SIZE) and labels.shape == (8,)
