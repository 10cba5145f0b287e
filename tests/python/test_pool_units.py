"""The pieces of the multi-daemon Loader that need no daemon
(conveyor/_pool.py, conveyor/_pool_servers.py): how an epoch is cut into
ranges and what each range asks a daemon for, how a fingerprint difference
is named, and how servers= entries become daemons."""

import pytest

from conveyor._pool import PoolOptions, _Epochs, auto_range_batches, fingerprint_difference
from conveyor._pool_servers import ServerSet
from conveyor._stubs import pb
from conveyor.errors import InvalidRequest


def ranges(epochs):
    out = []
    while True:
        r = epochs.next_range()
        if r is None:
            return out
        out.append(r)


def rank_offsets(n, batch, world, drop_last, base=0):
    """The resume offset (global position) of each of a rank's batches in
    an epoch, by the sampler's rule (core/data/sampler.h)."""
    left = n - base
    per_rank = left // world if drop_last else -(-left // world)
    return [base + k * batch * world for k in range(-(-per_rank // batch))]


def all_batches(n, batch, world, drop_last, first_epoch, num_epochs, base=0):
    """(epoch, batch index, resume offset) of each batch of the stream."""
    out = []
    for e in range(first_epoch, first_epoch + num_epochs):
        offsets = rank_offsets(n, batch, world, drop_last, base if e == first_epoch else 0)
        out += [(e, k, off) for k, off in enumerate(offsets)]
    return out


@pytest.mark.parametrize("n,batch,world,drop_last,range_batches,base", [
    (48, 2, 1, False, 2, 0), (48, 5, 2, False, 3, 0), (50, 4, 3, True, 2, 0),
    (7, 8, 1, False, 4, 0), (10, 1, 4, False, 1, 0), (1000, 16, 8, True, 8, 0),
    (100, 4, 2, False, 3, 37), (64, 32, 1, False, 8, 0)])
def test_ranges_cover_the_stream_once_each_at_its_first_batch(n, batch, world, drop_last,
                                                             range_batches, base):
    ep = _Epochs(n, batch, world, drop_last, first_epoch=3, num_epochs=3, resume_offset=base,
                 range_batches=range_batches)
    rs = ranges(ep)
    flat = all_batches(n, batch, world, drop_last, 3, 3, base)
    assert ep.total == len(flat)
    assert sum(r.count for r in rs) == ep.total
    assert [r.g for r in rs] == [sum(x.count for x in rs[:i]) for i in range(len(rs))]
    assert all(1 <= r.count <= range_batches for r in rs)
    assert all(r.count == range_batches for r in rs[:-1])  # ranges run across epochs
    for r in rs:
        assert (r.epoch, r.first, r.offset) == flat[r.g]
        assert r.position0 == r.first * batch
        assert r.epoch_samples == ep.samples_of(r.epoch)
        assert ep.epochs_left(r.epoch) == 6 - r.epoch
    assert rs[0].epoch_samples == (
        (n - base) // world if drop_last else -(-(n - base) // world))
    # The rest of a range after some of its batches: the same rule.
    for r in rs:
        for delivered in range(r.count):
            rest = ep.range_at(r.g + delivered, r.count - delivered)
            assert (rest.epoch, rest.first, rest.offset) == flat[r.g + delivered]


def test_an_endless_stream_has_no_total_and_never_runs_out():
    ep = _Epochs(10, 3, 1, False, first_epoch=0, num_epochs=0, resume_offset=0, range_batches=2)
    assert ep.total is None
    rs = [ep.next_range() for _ in range(50)]
    assert [r.epoch for r in rs][-1] > 10


def test_an_epoch_with_nothing_left_for_the_rank_is_refused():
    with pytest.raises(InvalidRequest, match="leaves no samples"):
        _Epochs(3, 2, 4, True, first_epoch=0, num_epochs=1, resume_offset=0, range_batches=2)


def info(**kw):
    p = pb.PipelineInfo(name="train", dataset_size=48, sample_shape=[3, 64, 64], dtype=pb.UINT8,
                        layout=pb.NCHW, kind="image")
    p.fingerprint.update({"dataset": "digest=sha256:aa;samples=48",
                          "transform": "v1;kind=0;mode=0;out=64x64", "samples": "error_policy=skip",
                          "order": "global", "decoders": "libjpeg-turbo=2001005"})
    for k, v in kw.items():
        if k == "fingerprint":
            p.fingerprint.update(v)
        else:
            setattr(p, k, v)
    return p


def test_a_fingerprint_difference_names_the_part_and_its_field():
    assert fingerprint_difference(info(), info()) is None
    assert fingerprint_difference(info(), info(dataset_size=49)) == "dataset_size (48 vs 49)"
    assert fingerprint_difference(info(), info(fingerprint={
        "transform": "v1;kind=0;mode=1;out=64x64"})) == "transform (mode: 0 vs 1)"
    assert fingerprint_difference(info(), info(fingerprint={
        "dataset": "digest=sha256:bb;samples=48"})) == "dataset (digest: sha256:aa vs sha256:bb)"
    assert fingerprint_difference(info(), info(fingerprint={"order": "dataset"})) == \
        "order (global vs dataset)"
    old = info()
    old.ClearField("fingerprint")
    assert "older conveyord" in fingerprint_difference(info(), old)


def test_server_entries_become_daemons_and_names_are_resolved():
    answers = {"pool.svc": ["10.0.0.1:7070", "10.0.0.2:7070"]}
    s = ServerSet(["unix:///run/conveyor/conveyor.sock", "10.0.0.9:7070", "pool.svc:7070",
                   "[fd00::1]:7070"], resolver=lambda host, port: answers[host])
    assert s.has_names
    assert [e.address for e in s.current()] == ["unix:///run/conveyor/conveyor.sock",
                                                 "10.0.0.9:7070", "[fd00::1]:7070"]
    s.resolve()
    eps = s.current()
    assert [e.address for e in eps] == ["unix:///run/conveyor/conveyor.sock", "10.0.0.9:7070",
                                         "10.0.0.1:7070", "10.0.0.2:7070", "[fd00::1]:7070"]
    assert [e.is_local for e in eps] == [True, False, False, False, False]
    assert eps[2].server_name == "pool.svc" and eps[1].server_name is None
    # A failed resolution keeps the last answer and says why.
    answers["pool.svc"] = []
    s.resolve()
    assert len(s.current()) == 5 and s.errors == {"pool.svc": "no address"}
    answers["pool.svc"] = ["10.0.0.3:7070"]
    s.resolve()
    assert [e.address for e in s.current()][2:4] == ["10.0.0.3:7070", "[fd00::1]:7070"]
    assert s.errors == {}


@pytest.mark.parametrize("entries,match", [
    ([], "at least one"), (["host"], "is not"), (["host:0"], "port must be"),
    (["[fd00::1]7070"], "IPv6"), ([""], "non-empty"), ([7070], "non-empty")])
def test_bad_server_entries_are_refused_naming_them(entries, match):
    with pytest.raises(InvalidRequest, match=match):
        ServerSet(entries)


@pytest.mark.parametrize("field,value,match", [
    ("policy", "fastest", "pool policy"), ("range_batches", 65, "range_batches"),
    ("range_batches", 0, "range_batches"), ("ranges_ahead", 1, "ranges_ahead"),
    ("stall_timeout", 0, "stall_timeout"), ("resolve_every", -1, "resolve_every"),
    ("streams_per_daemon", 0, "streams_per_daemon"), ("buffer_bytes", 0, "buffer_bytes")])
def test_bad_pool_options_are_refused_naming_them(field, value, match):
    with pytest.raises(InvalidRequest, match=match):
        PoolOptions(**{field: value}).check()


def test_ranges_are_sized_to_the_buffer_by_default():
    p = info()  # 3 x 64 x 64 uint8: 12 KiB a sample
    assert auto_range_batches(p, 32, 4, 512 << 20) == 16   # 384 KiB batches: capped
    assert auto_range_batches(p, 2048, 4, 512 << 20) == 5  # 24 MiB batches
    p.dtype = pb.FLOAT32
    assert auto_range_batches(p, 2048, 4, 512 << 20) == 1  # 96 MiB: at least 1
