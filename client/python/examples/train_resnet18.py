#!/usr/bin/python3
"""Trains torchvision's ResNet-18 on CPU, fed by conveyord, and prints how long
each step waited for data against how long it computed.

    train_resnet18.py --server unix:///tmp/conveyor-demo/conveyor.sock \\
        --pipeline demo-train --batch-size 32 --steps 40 \\
        [--compare-dataloader /path/to/image_folder --workers 2]

The conveyor run reads batches through conveyor.torch.TorchLoader: uint8
NCHW tensors that view the daemon's shared memory, converted to float and
normalized in the training process. With --compare-dataloader the same model
trains for the same steps on torchvision's ImageFolder of that folder
(PIL decode + RandomResizedCrop + flip at the pipeline's size) through a
torch DataLoader with --workers processes, for comparison.

Per step: "step N: data X ms, compute Y ms, loss L"; per run a summary line
"<name>: steps S, data wait mean X ms (P% of step time), compute mean Y ms,
Z images/s".
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import torch  # noqa: E402
import torchvision  # noqa: E402

import conveyor  # noqa: E402
import conveyor.torch  # noqa: E402

MEAN = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1) * 255
STD = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1) * 255


def endless(make_epoch_iter):
    """Batches of epoch after epoch from make_epoch_iter(epoch)."""
    epoch = 0
    while True:
        got = False
        for item in make_epoch_iter(epoch):
            got = True
            yield item
        if not got:
            raise RuntimeError("epoch %d had no batch" % epoch)
        epoch += 1


def train(name, batches, num_classes, steps, lr, quiet):
    """Runs `steps` SGD steps of a fresh ResNet-18 on (images uint8 NCHW,
    labels) from `batches`; returns (data wait s list, compute s list, images)."""
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=num_classes)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    waits, computes, images = [], [], 0
    it = iter(batches)
    for step in range(steps):
        t0 = time.perf_counter()
        x, y = next(it)
        t1 = time.perf_counter()
        x = (x.float() - MEAN) / STD
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        t2 = time.perf_counter()
        waits.append(t1 - t0)
        computes.append(t2 - t1)
        images += int(y.shape[0])
        if not quiet:
            print("%s step %d: data %.1f ms, compute %.1f ms, loss %.3f"
                  % (name, step, 1e3 * (t1 - t0), 1e3 * (t2 - t1), loss.item()), flush=True)
    wait, compute = sum(waits), sum(computes)
    print("%s: steps %d, data wait mean %.1f ms (%.1f%% of step time), compute mean %.1f ms, "
          "%.1f images/s" % (name, steps, 1e3 * wait / steps, 100 * wait / (wait + compute),
                             1e3 * compute / steps, images / (wait + compute)), flush=True)
    return waits, computes, images


def dataloader_batches(root, size, batch_size, workers):
    """torchvision's ImageFolder through a DataLoader: uint8 NCHW like the
    daemon's train pipeline (random resized crop + flip)."""
    tf = torchvision.transforms.Compose([
        torchvision.transforms.RandomResizedCrop(size),
        torchvision.transforms.RandomHorizontalFlip(),
        torchvision.transforms.PILToTensor(),
    ])
    ds = torchvision.datasets.ImageFolder(root, transform=tf)
    dl = torch.utils.data.DataLoader(ds, batch_size=batch_size, shuffle=True, drop_last=True,
                                     num_workers=workers, persistent_workers=workers > 0)
    return endless(lambda epoch: iter(dl))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", default=os.environ.get("CONVEYOR_SERVER",
                                                       "unix:///run/conveyor/conveyor.sock"))
    ap.add_argument("--pipeline", required=True)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--threads", type=int, default=0,
                    help="torch intra-op threads (0: torch's default)")
    ap.add_argument("--compare-dataloader", metavar="IMAGE_FOLDER",
                    help="also train on this ImageFolder through a torch DataLoader")
    ap.add_argument("--workers", type=int, default=2, help="DataLoader worker processes")
    ap.add_argument("--quiet", action="store_true", help="summary lines only")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    try:
        loader = conveyor.torch.TorchLoader(args.server, pipeline=args.pipeline,
                                            batch_size=args.batch_size, seed=0)
        info = loader.loader.pipeline_info()
        if info.layout != conveyor.loader.pb.NCHW or info.dtype != conveyor.loader.pb.UINT8:
            print("error: pipeline %r must be uint8 NCHW for this example" % args.pipeline,
                  file=sys.stderr)
            return 2
        size = int(info.sample_shape[-1])
        num_classes = max(int(info.num_classes), 2)
        print("pipeline %s: %d samples, %d classes, %dx%d, %d batches/epoch of %d"
              % (info.name, info.dataset_size, info.num_classes, size, size, len(loader),
                 args.batch_size), flush=True)

        def conveyor_epoch(epoch):
            loader.set_epoch(epoch)
            return iter(loader)

        train("conveyor", endless(conveyor_epoch), num_classes, args.steps, args.lr, args.quiet)
        loader.close()
    except conveyor.ConveyorError as e:
        print("error: %s" % e, file=sys.stderr)
        return 1
    if args.compare_dataloader:
        train("dataloader", dataloader_batches(args.compare_dataloader, size, args.batch_size,
                                               args.workers),
              num_classes, args.steps, args.lr, args.quiet)
    return 0


if __name__ == "__main__":
    sys.exit(main())
