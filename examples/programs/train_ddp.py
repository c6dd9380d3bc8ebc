"""Train a small MLP on handwritten digits with DistributedDataParallel: a plain, course-style training script.

Nothing in it is scalelab's: it reads its rank from the environment that srun or torchrun set, and prints one
`[METRIC]` line per epoch, which is all scalelab needs to follow and compare it. Run it alone, on 2 processes
with torchrun, or from scalelab (examples/programs/experiment.json):

    python train_ddp.py --epochs 3
    torchrun --standalone --nproc-per-node=2 train_ddp.py --epochs 3 --lr 0.1

The data is scikit-learn's 8x8 digits, which ship with the library (no download); `--dataset synthetic` makes a
seeded random set of the same shape where scikit-learn is not installed. On CPUs it uses gloo, on GPUs NCCL.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

try:
    # scalelab's helper, where scalelab is importable: it checks names and values, and prints on rank 0 only.
    from contract.metrics import epoch as report_epoch
except ImportError:
    # Without scalelab (the script copied elsewhere), the same line formatted here: the protocol is only this.
    def report_epoch(epoch: int, train_loss: float, epoch_time_s: float, **fields: float | None) -> None:
        if int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0"))) != 0:
            return
        record = {"v": 1, "kind": "epoch", "epoch": epoch, "train_loss": train_loss, "epoch_time_s": epoch_time_s}
        record.update({name: value for name, value in fields.items() if value is not None})
        print("[METRIC] " + json.dumps(record, separators=(",", ":"), allow_nan=False), flush=True)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Train an MLP on the 8x8 digits with DDP.")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--batch-size", type=int, default=64, help="global: divided among the processes")
    parser.add_argument("--hidden", type=int, default=64, help="width of the two hidden layers")
    parser.add_argument("--dataset", choices=["digits", "synthetic"], default="digits")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def load_data(name: str, seed: int) -> tuple[TensorDataset, TensorDataset]:
    """The same split on every rank (a seeded permutation), a fifth of the samples kept for validation."""
    if name == "digits":
        from sklearn.datasets import load_digits

        raw = load_digits()
        inputs = torch.tensor(raw.data, dtype=torch.float32)
        targets = torch.tensor(raw.target, dtype=torch.long)
    else:
        inputs = torch.rand(1797, 64, generator=torch.Generator().manual_seed(seed))
        # Something to learn: the class is which of ten groups of six pixels is brightest.
        targets = inputs[:, :60].reshape(-1, 10, 6).sum(dim=2).argmax(dim=1)
    inputs = (inputs - inputs.mean()) / inputs.std()
    order = torch.randperm(len(targets), generator=torch.Generator().manual_seed(seed))
    n_val = len(targets) // 5
    train, val = order[n_val:], order[:n_val]
    return TensorDataset(inputs[train], targets[train]), TensorDataset(inputs[val], targets[val])


def build_model(hidden: int) -> nn.Module:
    return nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 10))


def gradient_norm(model: nn.Module) -> float:
    """The norm of all gradients together; after DDP's all-reduce it is the same on every rank."""
    norms = [param.grad.norm() for param in model.parameters() if param.grad is not None]
    return float(torch.stack(norms).norm())


def peak_memory_bytes(device: torch.device) -> int:
    """This process's peak: CUDA's allocated memory, or on CPUs its resident set (Linux counts it in KiB)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device)
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


@torch.no_grad()
def evaluate(model: nn.Module, data: TensorDataset) -> tuple[float, float]:
    """Loss and accuracy over the whole validation set, on one process."""
    model.eval()
    inputs, targets = (tensor.to(next(model.parameters()).device) for tensor in data.tensors)
    logits = model(inputs)
    loss = nn.functional.cross_entropy(logits, targets).item()
    accuracy = (logits.argmax(dim=1) == targets).float().mean().item()
    model.train()
    return loss, accuracy


def main() -> None:
    args = parse_args()
    # srun (through scalelab) and torchrun both set these; alone, the script is one process.
    rank = int(os.environ.get("RANK", "0"))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    distributed = "WORLD_SIZE" in os.environ
    if distributed:
        dist.init_process_group(backend)  # reads MASTER_ADDR and MASTER_PORT
    if rank == 0:
        print(f"training on {world_size} process(es), {device.type}, {args}", flush=True)

    try:
        train(args, rank, world_size, device, distributed)
        if distributed:
            dist.barrier()  # leave together: no rank tears down while another still talks to it
    finally:
        if distributed:
            dist.destroy_process_group()


def train(args: argparse.Namespace, rank: int, world_size: int, device: torch.device, distributed: bool) -> None:
    """The training loop; its DDP model is freed when it returns, so that the process group is destroyed with
    nothing left that uses it."""
    train_set, val_set = load_data(args.dataset, args.seed)
    if args.batch_size % world_size:
        raise SystemExit(f"--batch-size {args.batch_size} does not divide among {world_size} processes")
    sampler = DistributedSampler(train_set, num_replicas=world_size, rank=rank, shuffle=True, seed=args.seed)
    loader = DataLoader(train_set, batch_size=args.batch_size // world_size, sampler=sampler)

    torch.manual_seed(args.seed)  # the same initial weights everywhere (DDP also broadcasts rank 0's)
    model = build_model(args.hidden).to(device)
    ddp_model = DistributedDataParallel(model) if distributed else model
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=args.lr, momentum=0.9)

    for epoch in range(1, args.epochs + 1):
        sampler.set_epoch(epoch)  # a different shuffle each epoch, the same on every rank
        started = time.perf_counter()
        loss_sum = torch.zeros((), device=device)
        norm_sum, steps = 0.0, 0
        for inputs, targets in loader:
            inputs, targets = inputs.to(device), targets.to(device)
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(ddp_model(inputs), targets)
            loss.backward()
            norm_sum += gradient_norm(ddp_model)
            optimizer.step()
            loss_sum += loss.detach()
            steps += 1
        # The mean loss over every process's batches, and the largest peak memory of any process.
        mean_loss = loss_sum.double() / steps / world_size
        peak = torch.tensor(peak_memory_bytes(device), dtype=torch.float64, device=device)
        if distributed:
            dist.all_reduce(mean_loss, op=dist.ReduceOp.SUM)
            dist.all_reduce(peak, op=dist.ReduceOp.MAX)
        epoch_time = time.perf_counter() - started
        if rank == 0:
            val_loss, val_accuracy = evaluate(model, val_set)
            train_loss = mean_loss.item()
            print(f"epoch {epoch}/{args.epochs}: train loss {train_loss:.4f}, val accuracy {val_accuracy:.3f}")
            report_epoch(
                epoch,
                train_loss,
                epoch_time,
                val_loss=val_loss,
                val_accuracy=val_accuracy,
                samples_per_s=len(sampler) * world_size / epoch_time,
                peak_memory_bytes=int(peak.item()),
                grad_norm=norm_sum / steps,  # a metric of this program's own: scalelab charts it too
            )
        if distributed:
            dist.barrier()  # the others wait while rank 0 validates, so the next epoch's time is its own


if __name__ == "__main__":
    main()
    # Leave without Python's own shutdown: torch's gloo threads can still hold tensors then, and freeing them
    # aborts the process now and then ("terminate called without an active exception", exit -6) after all went
    # well. Flush first: os._exit skips it.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
