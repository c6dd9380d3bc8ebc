"""A CIFAR-10 CNN trained the way the training courses' scripts do it: the reference the worker is measured against.

Launch it with torchrun, one process per core or GPU:

    torchrun --standalone --nproc-per-node=2 benches/course_baseline.py --data DIR --epochs 3

What makes it "course style", on purpose (these are what the benchmark measures against the worker):
- torchvision.datasets.CIFAR10 keeps the images as a uint8 array and builds a PIL image per sample;
- per-sample transforms: RandomCrop(32, padding=4) and RandomHorizontalFlip (the same augmentation the worker
  applies to whole batches), then ToTensor and Normalize (the worker normalises the whole set once, up front);
- a DataLoader with a DistributedSampler collates every batch from single samples;
- `loss.item()` after every step, which waits for the step to finish (on a GPU it drains the queue).
Everything else matches the worker: the very same CNN (built by worker.models.cnn with the same seed, so even
the initial weights are equal), SGD with momentum 0.9 and the same learning rate, mean cross-entropy, DDP.

Rank 0 prints one `[METRIC] epoch=... key=value` line per epoch, the course scripts' format that
contract.records.parse_metric_line reads.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler
from torchvision import datasets, transforms  # type: ignore[import-untyped]

from contract.configs import CnnConfig
from contract.spec import Dataset, Model, RunSpec
from worker.datasets import cifar10
from worker.datasets.bundle import DataBundle, Split
from worker.models import cnn


class LocalCIFAR10(datasets.CIFAR10):  # type: ignore[misc]
    """torchvision's CIFAR10, unchanged except that it accepts files other than the official download.

    torchvision checks each file's MD5 against the real archive; the benchmark's files are made up (nothing can
    be downloaded here), so the checksums are dropped. Reading, decoding and transforming are torchvision's own.
    """

    train_list: ClassVar[list[list[str | None]]] = [[name, None] for name in cifar10.TRAIN_FILES]
    test_list: ClassVar[list[list[str | None]]] = [[cifar10.VAL_FILE, None]]
    meta: ClassVar[dict[str, str | None]] = {**datasets.CIFAR10.meta, "md5": None}


def build_model(num_classes: int, seed: int) -> nn.Module:
    """The worker's CNN itself, from the same seed: the worker seeds the global generator alike before building."""
    spec = RunSpec(model=Model.cnn, dataset=Dataset.cifar10)
    empty = Split(torch.empty(0), torch.empty(0, dtype=torch.long))
    shape_only = DataBundle(empty, empty, num_classes, CnnConfig().input_shape, "classification")
    torch.manual_seed(seed)
    return cnn.build(spec, shape_only)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True, help="the directory that holds cifar-10-batches-py/")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--global-batch-size", type=int, default=256, help="samples per step over all processes")
    parser.add_argument("--lr", type=float, default=0.02)
    parser.add_argument("--workers", type=int, default=2, help="DataLoader worker processes per rank")
    parser.add_argument("--seed", type=int, default=0)
    return parser


@torch.no_grad()
def evaluate(model: nn.Module, loader: DataLoader[Any], criterion: nn.Module) -> tuple[float, float]:
    """Loss and accuracy over the test set, summed over all ranks."""
    model.eval()
    sums = torch.zeros(3, dtype=torch.float64)
    for images, labels in loader:
        output = model(images)
        sums[0] += criterion(output, labels).item() * len(labels)
        sums[1] += (output.argmax(dim=1) == labels).sum().item()
        sums[2] += len(labels)
    dist.all_reduce(sums)
    loss, correct, total = sums.tolist()
    return loss / total, correct / total


def main() -> None:
    args = _parser().parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    normalize = transforms.Normalize(cifar10.MEAN, cifar10.STD)  # the same statistics the worker normalises with
    train_tf = transforms.Compose(
        [
            transforms.RandomCrop(32, padding=cifar10.CROP_PADDING),
            transforms.RandomHorizontalFlip(),
            transforms.ToTensor(),
            normalize,
        ]
    )
    test_tf = transforms.Compose([transforms.ToTensor(), normalize])
    train_set = LocalCIFAR10(str(args.data), train=True, transform=train_tf)
    test_set = LocalCIFAR10(str(args.data), train=False, transform=test_tf)
    per_rank = args.global_batch_size // world
    train_sampler: DistributedSampler[Any] = DistributedSampler(train_set, shuffle=True, seed=args.seed)
    test_sampler: DistributedSampler[Any] = DistributedSampler(test_set, shuffle=False)
    train_loader: DataLoader[Any] = DataLoader(
        train_set, batch_size=per_rank, sampler=train_sampler, num_workers=args.workers
    )
    test_loader: DataLoader[Any] = DataLoader(
        test_set, batch_size=per_rank, sampler=test_sampler, num_workers=args.workers
    )

    model: nn.Module = DistributedDataParallel(build_model(len(train_set.classes), args.seed))
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    for epoch in range(1, args.epochs + 1):
        train_sampler.set_epoch(epoch)
        model.train()
        dist.barrier()  # start the clock together, as the worker does
        started = time.perf_counter()
        running_loss, seen, data_time = 0.0, 0, 0.0
        # Time spent waiting for the next batch, as the ImageNet example's "Data" meter counts it: where a
        # per-sample pipeline shows up (in the training process itself with num_workers=0).
        fetch_started = time.perf_counter()
        for images, labels in train_loader:
            data_time += time.perf_counter() - fetch_started
            optimizer.zero_grad()
            loss = criterion(model(images), labels)
            loss.backward()
            optimizer.step()
            running_loss += loss.item() * len(labels)
            seen += len(labels)
            fetch_started = time.perf_counter()
        dist.barrier()  # the epoch ends when the slowest rank is done, as in the worker's closing all-reduce
        epoch_time = time.perf_counter() - started
        val_loss, val_accuracy = evaluate(model, test_loader, criterion)
        if rank == 0:
            print(
                f"[METRIC] epoch={epoch} train_loss={running_loss / seen:.6f} val_loss={val_loss:.6f} "
                f"val_accuracy={val_accuracy:.6f} epoch_time_s={epoch_time:.4f} "
                f"samples_per_s={seen * world / epoch_time:.2f} data_time_s={data_time:.4f} workers={args.workers} "
                f"threads={torch.get_num_threads()}",
                flush=True,
            )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
