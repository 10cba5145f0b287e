"""Epochs: one stream runs several epochs without a gap - the pipeline
produces the next epoch's first batches while the trainer still holds the
last batch of the previous one - with a new order every epoch and
end-of-epoch markers the client sees."""

import numpy as np

import conveyor
from conveyor_integration import wait_until

SEED = 4


def test_multi_epoch_stream_has_markers_and_a_new_order_every_epoch(daemon, dataset):
    _, samples = dataset
    n, batch, epochs = len(samples), 8, 3
    loader = conveyor.Loader(daemon.unix, pipeline="train", batch_size=batch, seed=SEED, rank=0,
                             world_size=1)
    per_epoch = {}
    ends = []
    with loader.stream(num_epochs=epochs, first_epoch=0) as stream:
        for b in stream:
            per_epoch.setdefault(b.epoch, []).append(b.indices.copy())
            if b.end_of_epoch:
                ends.append((b.epoch, b.batch_in_epoch))
        markers = [(m.epoch, m.batches, m.samples) for m in stream.epoch_ends]
        end = stream.end
    assert sorted(per_epoch) == list(range(epochs))
    # Markers: the last batch of every epoch says so, and an EpochEnd follows it.
    assert ends == [(e, n // batch - 1) for e in range(epochs)]
    assert markers == [(e, n // batch, n) for e in range(epochs)]
    assert end is not None and end.batches == epochs * n // batch and end.samples == epochs * n
    orders = [np.concatenate(per_epoch[e]).tolist() for e in range(epochs)]
    for order in orders:
        assert sorted(order) == list(range(n)), "every epoch is a permutation of the dataset"
    assert len({tuple(o) for o in orders}) == epochs, "a new order every epoch"
    # The loader's position moved on to the epoch after the stream.
    assert loader.state_dict()["epoch"] == epochs and loader.state_dict()["offset"] == 0
    loader.close()


def test_next_epoch_is_produced_while_the_last_batch_of_the_previous_is_held(daemon, dataset):
    """No gap at the epoch boundary. The trainer holds (does not release)
    the last batch of epoch e; meanwhile the daemon must already have emitted
    (GetStats batches_emitted) and sent the first batch of epoch e+1 - with
    a barrier at the boundary it could not, since the held slot would be the
    epoch's. Checked at two boundaries."""
    _, samples = dataset
    batch, credits = 8, 4
    per_epoch = len(samples) // batch
    stream = conveyor.open_stream(daemon.unix, "train", batch, seed=SEED, num_epochs=3,
                                  credits=credits, auto_release=False)
    with stream:
        sid = stream.stream_id

        def emitted():
            for s in conveyor.stats(daemon.unix).streams:
                if s.stream_id == sid:
                    return s.batches_emitted
            return None

        for e in range(2):  # the boundaries 0|1 and 1|2
            last = None
            for k in range(0 if e == 0 else 1, per_epoch):  # epoch e's batch 0 was taken before
                b = next(stream)
                assert (b.epoch, b.batch_in_epoch) == (e, k)
                if k + 1 < per_epoch:
                    b.release()
                else:
                    last = b
            assert last.end_of_epoch
            # Holding the last batch of epoch e: the next epoch is under way.
            boundary = (e + 1) * per_epoch
            assert wait_until(lambda: (emitted() or 0) > boundary, 30), \
                "epoch %d's first batch was not produced while epoch %d's last is held" % (e + 1, e)
            first = next(stream)
            assert (first.epoch, first.batch_in_epoch) == (e + 1, 0)
            assert not last.released and stream.held == 2
            assert stream.epoch_ends[-1].epoch == e
            last.release()
            first.release()
