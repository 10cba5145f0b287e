"""Client numbers at the edges of their types (issue 9, defect 4): a request
whose stream length cannot be represented is refused with INVALID_ARGUMENT or
OUT_OF_RANGE naming the field; a huge count that fits streams correctly.

Before the fix the stream's batch count (first epoch's batches + (num_epochs
- 1) x batches per epoch) wrapped around 2**64: num_epochs = 2**64 - 1 gave a
stream of 2**64 - 3 batches, and 2**63 + 1 epochs of 2 batches ended after
one epoch as if it were complete.

The dataset has 48 images; batch 16 makes 3 batches an epoch, batch 24 two.
"""

import itertools
import re

import grpc
import pytest

import conveyor

U64 = 2 ** 64 - 1
U32 = 2 ** 32 - 1
REFUSED = (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.OUT_OF_RANGE)


def _open(address, batch_size=16, **kw):
    args = dict(seed=0, credits=2, num_epochs=1)
    args.update(kw)
    return conveyor.open_stream(address, "train", batch_size, **args)


def _refused(address, field, **kw):
    """The request must fail (at open or at the first batch) with a status of
    REFUSED whose message names `field`."""
    delivered = []
    try:
        with _open(address, **kw) as stream:
            for b in itertools.islice(stream, 4):
                delivered.append((b.epoch, b.batch_in_epoch))
    except conveyor.ConveyorError as e:
        err = e
    else:
        pytest.fail("accepted: (epoch, batch) %s delivered, end %s" % (delivered, stream.end))
    assert not delivered, "batches delivered before the error: %s" % delivered
    assert err.code in REFUSED, err
    assert re.search(field, str(err)), "the error does not name %s: %s" % (field, err)


@pytest.mark.parametrize("num_epochs,batch_size", [
    (U64, 16),                       # total wrapped to 2**64 - 3: practically endless
    (2 ** 63 + 1, 24),               # total wrapped to 2: ended after one epoch
    (U64 // 3 + 1, 16),              # the first count whose 3 batches an epoch overflow
])
def test_num_epochs_whose_batch_count_overflows_is_refused(daemon, num_epochs, batch_size):
    _refused(daemon.unix, "num_epochs", num_epochs=num_epochs, batch_size=batch_size)


def test_huge_num_epochs_that_fits_streams_epoch_after_epoch(daemon):
    """2**62 epochs of 3 batches fit in the count: the stream runs like an
    endless one (epochs 0, 1, 2, ... of 3 batches each)."""
    with _open(daemon.unix, num_epochs=2 ** 62) as stream:
        got = [(b.epoch, b.batch_in_epoch, b.num_samples) for b in itertools.islice(stream, 7)]
        assert stream.batches_per_epoch == 3
        assert stream.end is None
    assert got == [(e, i, 16) for e in range(3) for i in range(3)][:7]


@pytest.mark.parametrize("first_epoch,num_epochs", [(U64, 2), (2 ** 63, 2 ** 63), (U64, 1)])
def test_epoch_range_past_the_last_epoch_number_is_refused(daemon, first_epoch, num_epochs):
    _refused(daemon.unix, "first_epoch|num_epochs", first_epoch=first_epoch,
             num_epochs=num_epochs)


def test_endless_stream_never_wraps_its_epoch_number(daemon):
    """An endless stream from the last epoch number must not go on at epoch 0
    (before the fix it did): refused at open naming first_epoch, or ended
    with an error when it runs out of epoch numbers."""
    epochs = []
    try:
        with _open(daemon.unix, first_epoch=U64, num_epochs=0) as stream:
            for b in itertools.islice(stream, 6):  # 2 epochs of 3 batches
                epochs.append(b.epoch)
    except conveyor.ConveyorError as e:
        assert e.code in REFUSED, e
        assert re.search("epoch", str(e)), e
    assert all(e == U64 for e in epochs), "epoch numbers wrapped: %s" % epochs


def test_resume_offset_at_the_top_of_its_type_is_out_of_range(daemon):
    _refused(daemon.unix, "offset", resume=(0, U64, 1))


@pytest.mark.parametrize("field,kw", [
    ("batch_size", {"batch_size": U32}),
    ("credits", {"credits": U32}),
    ("rank", {"rank": U32, "world_size": U32}),
])
def test_u32_fields_at_the_top_of_their_type_are_refused(daemon, field, kw):
    _refused(daemon.unix, field, **kw)


def test_largest_world_size_streams_one_sample_per_rank(daemon):
    """world_size 2**32 - 1 over 48 images: every rank gets one sample (the
    epoch padded by wrapping), no overflow in the padded size."""
    with _open(daemon.unix, rank=U32 - 1, world_size=U32, num_epochs=2) as stream:
        got = [(b.epoch, b.num_samples) for b in stream]
        assert stream.end is not None
    assert got == [(0, 1), (1, 1)]


def test_batch_size_and_credits_at_their_limits_stream(daemon):
    """max_batch_size (64) and 64 credits: one batch of the 48 images an epoch."""
    with _open(daemon.unix, batch_size=64, credits=64, num_epochs=2) as stream:
        got = [b.num_samples for b in stream]
        assert stream.end is not None
    assert got == [48, 48]
