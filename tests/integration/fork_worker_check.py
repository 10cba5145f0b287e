"""The issue's case, run as a program of its own (so that a hang is a
timeout of this process, and so that it can run under another interpreter:
Debian's grpcio or the newest one from PyPI): a TorchLoader mid-epoch (a
live stream in this process), then DataLoader(ConveyorDataset(...),
num_workers=1) with the default "fork" context, TRIES times; then the
TorchLoader's epoch goes on.

    python3 fork_worker_check.py ADDRESS TRIES [--grpc-first] [--hold]

--grpc-first imports grpc before conveyor (gRPC's fork support then stays
as the environment says). Prints one JSON object per try ({"try", "ok",
"batches", "same": labels and image checksums as a plain Loader's, "error"}), then {"parent_batches"}; exit status 0 when
it got there. --hold: then one more worker, and after its first batch
print "WORKER <pid>" and wait (the test kills this process, and the worker
must not outlive it).
"""

import json
import sys
import time

if "--grpc-first" in sys.argv:
    import grpc  # noqa: F401

import torch.utils.data  # noqa: E402

import conveyor  # noqa: E402
import conveyor.torch as ctorch  # noqa: E402


def main():
    address, tries = sys.argv[1], int(sys.argv[2])
    hold = "--hold" in sys.argv
    # (labels, checksum of the images): the images come through the shared
    # memory of the worker's own stream.
    ref = [(b.labels.tolist(), int(b.images.sum(dtype="int64")))
           for b in conveyor.Loader(address, pipeline="train", batch_size=8, seed=3).epoch(0)]
    train = ctorch.TorchLoader(address, pipeline="train", batch_size=4, seed=1)
    it = iter(train)
    parent = [next(it) for _ in range(2)]  # the stream is open: mid-epoch
    for t in range(tries):
        ds = ctorch.ConveyorDataset(conveyor.Loader(address, pipeline="train", batch_size=8,
                                                    seed=3))
        dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=1, timeout=60)
        got, error = [], None
        try:
            for x, y in dl:
                got.append((y.tolist(), int(x.sum(dtype=torch.int64))))
        except Exception as e:  # the refusal under --grpc-first is the expected outcome there
            error = "%s: %s" % (type(e).__name__, e)
        print(json.dumps({"try": t, "ok": error is None and got == ref, "batches": len(got),
                          "same": got == ref, "error": error}), flush=True)
        # The parent's stream goes on between the workers.
        parent.append(next(it, None))
    parent.extend(it)
    parent = [b for b in parent if b is not None]
    print(json.dumps({"parent_batches": len(parent)}), flush=True)
    if hold:
        it = iter(train)
        next(it)  # a stream open again while the worker starts
        ds = ctorch.ConveyorDataset(conveyor.Loader(address, pipeline="train", batch_size=8))
        dl_iter = iter(torch.utils.data.DataLoader(ds, batch_size=None, num_workers=1))
        next(dl_iter)
        print("WORKER %d" % dl_iter._workers[0].pid, flush=True)
        time.sleep(600)
    train.close()


if __name__ == "__main__":
    main()
