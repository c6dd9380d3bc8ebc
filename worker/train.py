"""The one training loop every model and strategy shares."""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F

from worker import data, models
from worker.distributed import DistEnv, backend_for
from worker.parallel import parallelize
from worker.report import Reporter, peak_memory
from worker.spec import EpochRecord, RunSpec, StartRecord


@dataclass
class Context:
    spec: RunSpec
    dist_env: DistEnv
    device: torch.device
    reporter: Reporter


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _global_sums(
    values: list[float], device: torch.device, op: dist.ReduceOp.RedOpType = dist.ReduceOp.SUM
) -> list[float]:
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(tensor, op=op)
    return tensor.tolist()


def train_epoch(
    model: nn.Module, optimizer: torch.optim.Optimizer, split: data.Split, ctx: Context, epoch: int
) -> tuple[float, int]:
    """Mean training loss over all ranks, and the samples all ranks processed."""
    per_rank_batch = ctx.spec.global_batch_size // ctx.dist_env.world_size
    indices = data.train_shard(
        len(split), ctx.dist_env.rank, ctx.dist_env.world_size, ctx.spec.seed, epoch, per_rank_batch
    )
    model.train()
    loss_sum = torch.zeros((), dtype=torch.float64, device=ctx.device)
    for batch in indices.split(per_rank_batch):
        inputs = split.inputs[batch].to(ctx.device, non_blocking=True)
        targets = split.targets[batch].to(ctx.device, non_blocking=True)
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(inputs), targets)
        loss.backward()
        optimizer.step()
        # Accumulate on the device: .item() per step would stall a GPU pipeline.
        loss_sum += loss.detach() * len(batch)
    total_loss, total_samples = _global_sums([loss_sum.item(), float(len(indices))], ctx.device)
    return total_loss / max(total_samples, 1.0), int(total_samples)


@torch.no_grad()
def evaluate(model: nn.Module, split: data.Split, ctx: Context) -> tuple[float, float]:
    """Loss and accuracy over the whole validation set, each sample seen by exactly one rank."""
    model.eval()
    indices = data.val_shard(len(split), ctx.dist_env.rank, ctx.dist_env.world_size)
    loss_sum = correct = 0.0
    for batch in indices.split(1024):
        inputs = split.inputs[batch].to(ctx.device)
        targets = split.targets[batch].to(ctx.device)
        logits = model(inputs)
        loss_sum += F.cross_entropy(logits, targets, reduction="sum").item()
        correct += (logits.argmax(dim=1) == targets).sum().item()
    total_loss, total_correct, total = _global_sums([loss_sum, correct, float(len(indices))], ctx.device)
    return total_loss / total, total_correct / total


def run(ctx: Context) -> None:
    spec, dist_env = ctx.spec, ctx.dist_env
    torch.manual_seed(spec.seed)
    bundle = data.load(spec)
    model = models.build(spec.model, bundle.num_features, bundle.num_classes).to(ctx.device)
    model = parallelize(model, spec, dist_env, ctx.device.type)
    optimizer = torch.optim.SGD(model.parameters(), lr=spec.lr, momentum=0.9)
    ctx.reporter.record(
        StartRecord(
            world_size=dist_env.world_size,
            nodes=dist_env.nodes,
            device=ctx.device.type,
            backend=backend_for(ctx.device),
            strategy=spec.strategy.value,
            torch_version=torch.__version__,
            hostname=socket.gethostname(),
        )
    )
    for epoch in range(1, spec.epochs + 1):
        _sync(ctx.device)
        dist.barrier()
        started = time.perf_counter()
        train_loss, samples = train_epoch(model, optimizer, bundle.train, ctx, epoch)
        _sync(ctx.device)
        epoch_time = time.perf_counter() - started
        val_loss, val_accuracy = evaluate(model, bundle.val, ctx)
        memory, memory_kind = peak_memory(ctx.device)
        (peak,) = _global_sums([float(memory)], ctx.device, op=dist.ReduceOp.MAX)
        ctx.reporter.record(
            EpochRecord(
                epoch=epoch,
                train_loss=train_loss,
                val_loss=val_loss,
                val_accuracy=val_accuracy,
                epoch_time_s=epoch_time,
                samples_per_s=samples / epoch_time,
                peak_memory_bytes=int(peak),
                memory_kind=memory_kind,
            )
        )
        ctx.reporter.progress(
            f"epoch {epoch}/{spec.epochs}: train loss {train_loss:.4f}, val loss {val_loss:.4f}, "
            f"val acc {val_accuracy:.2%}, {epoch_time:.2f} s"
        )
