"""The one training loop every model and strategy shares."""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.nn import functional as F

from contract import flops
from contract.records import EpochRecord, MemoryRecord, ResumeRecord, StepRecord, TimingRecord
from contract.rundir import TEST_ONLY_STEP_DELAY_MAX_S, TEST_ONLY_STEP_DELAY_VAR
from contract.spec import RunSpec, Strategy
from contract.target import warmup_lr
from worker import compute_probe, data, models
from worker.checkpoint import Checkpoints, any_rank, stop_agreed
from worker.distributed import DistEnv
from worker.memory import Peaks, TensorPeak, peaks
from worker.parallel import Parallelized, parallelize
from worker.precision import PrecisionPolicy
from worker.report import Reporter
from worker.start import start_record
from worker.stopping import StopSignal
from worker.timing import FIRST_SAMPLED, SAMPLED, StepTimer, StepTimes


@dataclass
class Context:
    spec: RunSpec
    dist_env: DistEnv
    device: torch.device
    reporter: Reporter
    checkpoint_dir: Path
    stop: StopSignal


class Interrupted(Exception):
    """Stopped on a signal after saving a checkpoint; a requeued job resumes from it."""


def loss_fn(output: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy per prediction: per sample for classifiers, per token for language models."""
    return F.cross_entropy(output.flatten(0, -2).float(), targets.flatten())


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _reduce(values: torch.Tensor, op: dist.ReduceOp.RedOpType = dist.ReduceOp.SUM) -> list[float]:
    dist.all_reduce(values, op=op)
    return values.tolist()


def probe_peak(ctx: Context) -> float:
    """Rank 0's compute probe, reported, and the peak every rank's MFU divides by: the operator's figure where
    SCALELAB_PEAK_TFLOPS sets one, else the measured peak (a collective: every rank calls it). Rank 0 alone probes,
    so that ranks sharing a CPU's cores do not measure each other."""
    peak = torch.zeros(1, dtype=torch.float64, device=ctx.device)
    if ctx.dist_env.is_main:
        probe = compute_probe.compute_record(ctx.device, ctx.spec.precision)
        ctx.reporter.record(probe)
        peak[0] = probe.operator_peak_tflops or probe.measured_tflops
    dist.broadcast(peak, 0)
    return float(peak.item())


def _channels_last(spec: RunSpec, bundle: data.DataBundle) -> bool:
    """Images in NHWC: cuDNN picks faster kernels, and on the 2-core CPUs here the course CNN's step went
    from 118-215 ms to 74-77 ms (max-pooling above all), 1.40x over 13 paired 2-rank DDP epochs.

    Only for single and ddp: FSDP refuses parameters that are not contiguous in the default layout, and
    pipeline stages send only contiguous activations.
    """
    return len(bundle.sample_shape) == 3 and spec.strategy in (Strategy.single, Strategy.ddp)


def _to_device(split: data.Split, device: torch.device, channels_last: bool) -> data.Split:
    # Small data sets live on the device for the whole run: no copies, no loader inside the step loop.
    inputs = split.inputs.to(device)
    if channels_last:
        inputs = inputs.contiguous(memory_format=torch.channels_last)
    return data.Split(inputs, split.targets.to(device))


@dataclass
class Progress:
    step: int = 0


def steps_per_epoch(spec: RunSpec, train_size: int) -> int:
    steps = train_size // spec.global_batch_size
    return steps if spec.steps_per_epoch is None else min(steps, spec.steps_per_epoch)


def step_lr(spec: RunSpec, step: int, epoch_steps: int) -> float:
    """The learning rate of optimizer step `step` of the run (0 first, counted from the run's first epoch, so that a
    resumed run continues the warm-up where it was): Goyal et al.'s gradual warm-up rises linearly from the rate
    the request gave (reference_lr, the smallest batch's) to the run's scaled `lr` over warmup_epochs epochs.
    Without an lr_scaling rule there is nothing to rise from: the rate is `lr` throughout."""
    start = spec.lr if spec.reference_lr is None else spec.reference_lr
    return warmup_lr(start, spec.lr, step, spec.warmup_epochs * epoch_steps)


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr


def delay_per_step() -> float:
    """The seconds of TEST_ONLY_STEP_DELAY_VAR (0 where unset or not a number in [0, TEST_ONLY_STEP_DELAY_MAX_S])."""
    try:
        delay = float(os.environ.get(TEST_ONLY_STEP_DELAY_VAR, "0"))
    except ValueError:
        return 0.0
    return delay if 0 < delay <= TEST_ONLY_STEP_DELAY_MAX_S else 0.0


def train_epoch(
    par: Parallelized,
    optimizer: torch.optim.Optimizer,
    precision: PrecisionPolicy,
    bundle: data.DataBundle,
    ctx: Context,
    epoch: int,
    progress: Progress,
    timer: StepTimer,
    tensors: TensorPeak,
) -> tuple[float, int]:
    """Mean training loss over the epoch's samples, and how many samples all data-parallel ranks took."""
    spec = ctx.spec
    step_batch = spec.global_batch_size // par.data_world
    indices = data.train_shard(len(bundle.train), par.data_rank, par.data_world, spec.seed, epoch, step_batch)
    steps = steps_per_epoch(spec, len(bundle.train))
    par.module.train()
    timer.begin_epoch(steps)
    memory_step = tensors.step_to_sample(steps, timer.sampled)
    # Summed on the device: a .item() per step would stall the GPU's queue at every step.
    loss_sum = torch.zeros((), dtype=torch.float64, device=ctx.device)
    delay = delay_per_step()
    for step in range(steps):
        with tensors.watch(optimizer, step == memory_step), timer.step(step):
            with timer.part("optimizer"):
                set_lr(optimizer, step_lr(spec, progress.step, steps))
                optimizer.zero_grad(set_to_none=True)
            batch = indices[step * step_batch : (step + 1) * step_batch]
            micro_batches = batch.split(step_batch // spec.grad_accum_steps)
            step_loss = torch.zeros((), dtype=torch.float64, device=ctx.device)
            for micro, chunk in enumerate(micro_batches):
                with timer.part("data"):
                    inputs, targets = bundle.train.inputs[chunk], bundle.train.targets[chunk]
                    if bundle.augment is not None:
                        inputs = bundle.augment(inputs)
                with timer.part("compute"):
                    loss = par.train_step(inputs, targets, sync=micro == len(micro_batches) - 1)
                    step_loss += loss * len(chunk)
            with timer.part("optimizer"):
                precision.step(optimizer)
            if delay:
                time.sleep(delay)
            loss_sum += step_loss
            progress.step += 1
            if spec.step_log_every and progress.step % spec.step_log_every == 0:
                with timer.part("comm"):
                    _report_step(par, step_loss / step_batch, ctx, epoch, progress.step, current_lr(optimizer))
    weight = 1.0 if par.reports else 0.0
    totals = torch.stack([loss_sum * weight, torch.tensor(steps * step_batch * weight, device=ctx.device)])
    total_loss, total_samples = _reduce(totals.to(torch.float64))
    return total_loss / max(total_samples, 1.0), int(total_samples)


def current_lr(optimizer: torch.optim.Optimizer) -> float:
    """The rate the optimizer's last step took (every group takes the same)."""
    return float(optimizer.param_groups[0]["lr"])


def _report_step(par: Parallelized, loss: torch.Tensor, ctx: Context, epoch: int, step: int, lr: float) -> None:
    """The step's mean loss, averaged over the reporting ranks (a host sync, so only every N steps)."""
    weight = 1.0 if par.reports else 0.0
    total, count = _reduce(torch.stack([loss.double() * weight, torch.tensor(weight, device=ctx.device).double()]))
    ctx.reporter.record(StepRecord(epoch=epoch, step=step, train_loss=total / max(count, 1.0), lr=lr))


@torch.no_grad()
def evaluate(par: Parallelized, split: data.Split, ctx: Context) -> tuple[float, float]:
    """Loss and accuracy over the whole validation set, each sample counted once by one reporting rank."""
    par.module.eval()
    indices = data.val_shard(len(split), par.data_rank, par.data_world)
    # Fixed-size batches, and as many on every rank: sharded and pipelined forwards are collective. Short or
    # empty batches are padded with sample 0 and the padding masked out.
    size = ctx.spec.global_batch_size // ctx.spec.grad_accum_steps // par.data_world
    batches = math.ceil(math.ceil(len(split) / par.data_world) / size)
    sums = torch.zeros(3, dtype=torch.float64, device=ctx.device)
    for index in range(batches):
        chunk = indices[index * size : (index + 1) * size]
        real = len(chunk)
        padded = torch.cat([chunk, torch.zeros(size - real, dtype=chunk.dtype)])
        inputs, targets = split.inputs[padded], split.targets[padded]
        output = par.predict(inputs, targets)
        if output is None or not par.reports:
            continue
        per_item = F.cross_entropy(output.flatten(0, -2).float(), targets.flatten(), reduction="none")
        per_sample = per_item.view(size, -1).mean(dim=1)[:real]
        correct = (output.argmax(dim=-1) == targets).double().view(size, -1).mean(dim=1)[:real]
        sums += torch.stack([per_sample.double().sum(), correct.sum(), torch.tensor(real, device=ctx.device)])
    total_loss, total_correct, total = _reduce(sums)
    return total_loss / total, total_correct / total


def _from_every_rank(ctx: Context, mine: torch.Tensor) -> list[list[Any]]:
    """Each rank's values, in rank order, on every rank (rank 0 prints them)."""
    everyone = [torch.zeros_like(mine) for _ in range(ctx.dist_env.world_size)]
    dist.all_gather(everyone, mine)
    return [values.tolist() for values in everyone]


def report_memory(ctx: Context, epoch: int, tensors: TensorPeak | None = None) -> Peaks:
    """Every rank's peak memory to rank 0, which prints a record per rank; returns the largest of each measure."""
    mine = peaks(ctx.device, tensors)
    reserved = -1 if mine.reserved is None else mine.reserved
    everyone = _from_every_rank(
        ctx, torch.tensor([mine.held, reserved, mine.rss], dtype=torch.int64, device=ctx.device)
    )
    for rank, (held, rank_reserved, rss) in enumerate(everyone):
        ctx.reporter.record(
            MemoryRecord(
                epoch=epoch,
                rank=rank,
                peak_allocated_bytes=held,
                peak_reserved_bytes=None if rank_reserved < 0 else rank_reserved,
                # Every rank measures alike: same device, same sampled steps.
                memory_kind=mine.kind,
                peak_rss_bytes=rss,
            )
        )
    return Peaks(
        held=max(int(values[0]) for values in everyone),
        kind=mine.kind,
        reserved=max(int(values[1]) for values in everyone) if mine.reserved is not None else None,
        rss=max(int(values[2]) for values in everyone),
    )


@dataclass(frozen=True)
class StepSpread:
    """The ranks' step times together, for the epoch record's headline."""

    mean_s: float
    fastest_s: float
    slowest_s: float
    breakdown: dict[str, float]


def report_timing(ctx: Context, epoch: int, mine: StepTimes, method: str) -> StepSpread:
    """Every rank's step times to rank 0, which prints a timing record per rank; returns their spread."""
    values = torch.tensor(mine.to_list(), dtype=torch.float64, device=ctx.device)
    ranks = [StepTimes.from_list(rank_values) for rank_values in _from_every_rank(ctx, values)]
    for rank, times in enumerate(ranks):
        ctx.reporter.record(TimingRecord(epoch=epoch, rank=rank, method=method, **vars(times)))
    steps = [times.step_s for times in ranks]
    parts = [times.breakdown() for times in ranks]
    return StepSpread(
        mean_s=sum(steps) / len(steps),
        fastest_s=min(steps),
        slowest_s=max(steps),
        breakdown={part: sum(p[part] for p in parts) / len(parts) for part in parts[0]},
    )


def timing_method(par: Parallelized) -> str:
    """One sentence for the timing records: how communication was measured and what overlaps."""
    if par.comm is None:
        return "no communication inside a step (comm_s: step-record loss reductions only)"
    return (
        f"{par.comm} profiled on steps {FIRST_SAMPLED + 1}-{FIRST_SAMPLED + SAMPLED}: "
        "waited for in comm_s (taken out of forward+backward), run under compute in comm_overlapped_s"
    )


def stops_at_target(spec: RunSpec, record: EpochRecord, device: torch.device) -> bool:
    """Whether the run ends after this epoch: stop_at_target, the epoch's figure reaches the target, and planned
    epochs remain (a target reached at the last one ends the run as planned). Every rank holds the same reduced
    figures; the decision is still agreed, as the checkpoint that follows it is collective."""
    target = spec.target
    if not spec.stop_at_target or target is None or record.epoch >= spec.epochs:
        return False
    return any_rank(target.reached(getattr(record, target.metric, None)), device)


def run(ctx: Context) -> int | None:
    """Train the spec's run from its latest checkpoint, if any; the epoch that reached the target where the run
    stopped there (stop_at_target), else None."""
    spec, dist_env = ctx.spec, ctx.dist_env
    precision = PrecisionPolicy(spec.precision, ctx.device)
    # Rank 0 loads first, downloading if it must; the others read the files once it is done.
    if not dist_env.is_main:
        dist.barrier()
    bundle = data.load(spec, dist_env.rank)
    if dist_env.is_main:
        dist.barrier()
    bundle = data.DataBundle(
        _to_device(bundle.train, ctx.device, _channels_last(spec, bundle)),
        _to_device(bundle.val, ctx.device, _channels_last(spec, bundle)),
        bundle.num_classes,
        bundle.sample_shape,
        bundle.task,
        bundle.augment,
    )
    torch.manual_seed(spec.seed)  # every rank builds the same initial weights
    model_spec = models.model_spec(spec.model)
    model = model_spec.build(spec, bundle)
    if _channels_last(spec, bundle):
        model = model.to(memory_format=torch.channels_last)
    parameters = sum(p.numel() for p in model.parameters())
    par = parallelize(model, model_spec, spec, dist_env, ctx.device, precision, loss_fn)
    optimizer = torch.optim.SGD(par.module.parameters(), lr=spec.lr, momentum=0.9)
    ctx.reporter.record(start_record(spec, dist_env, ctx.device, parameters))
    device_peak = probe_peak(ctx)
    per_sample = flops.training_flops(spec)
    language = bundle.task == "language"
    checkpoints = Checkpoints(ctx.checkpoint_dir, par.module, optimizer, dist_env.is_main)
    done = checkpoints.latest() or 0
    if done:
        checkpoints.load(done)
        saved = checkpoints.record(done)
        if saved:
            ctx.reporter.record(saved)  # before the resume record, which keeps each epoch's latest print
        ctx.reporter.record(ResumeRecord(epoch=done))
        # A job requeued after its stop at the target (killed before it could end) trains no further.
        if saved and stops_at_target(spec, saved, ctx.device):
            _report_target(ctx, done, "training no further from its checkpoint")
            return done
    progress = Progress(step=done * steps_per_epoch(spec, len(bundle.train)))
    timer = StepTimer(ctx.device, communicates=par.comm is not None)
    tensors = TensorPeak(ctx.device)
    for epoch in range(done + 1, spec.epochs + 1):
        _sync(ctx.device)
        dist.barrier()
        started = time.perf_counter()
        train_loss, samples = train_epoch(par, optimizer, precision, bundle, ctx, epoch, progress, timer, tensors)
        _sync(ctx.device)
        # Counting the tensors is the measurement's time, not training's.
        epoch_time = time.perf_counter() - started - tensors.take_overhead()
        spread = report_timing(ctx, epoch, timer.summary(), timing_method(par))
        comm_timer = getattr(par.module, "comm_timer", None)
        comm_time = comm_timer.take() if comm_timer is not None else None
        val_loss, val_accuracy = evaluate(par, bundle.val, ctx)
        peak = report_memory(ctx, epoch, tensors)
        tokens_per_s = samples * bundle.sample_shape[0] / epoch_time if language else None
        samples_per_s = samples / epoch_time
        record = EpochRecord(
            epoch=epoch,
            train_loss=train_loss,
            val_loss=val_loss,
            val_accuracy=val_accuracy,
            val_perplexity=math.exp(min(val_loss, 50.0)) if language else None,
            epoch_time_s=epoch_time,
            comm_time_s=comm_time,
            samples_per_s=samples_per_s,
            tokens_per_s=tokens_per_s,
            model_tflops_per_s=samples_per_s * per_sample.model / 1e12,
            mfu=flops.utilization(samples_per_s, per_sample.model, device_peak, dist_env.world_size),
            model_flops_per_sample=per_sample.model,
            hardware_flops_per_sample=per_sample.hardware,
            peak_memory_bytes=peak.held,
            memory_kind=peak.kind,
            peak_rss_bytes=peak.rss,
            step_time_s=spread.mean_s,
            step_time_fastest_s=spread.fastest_s,
            step_time_slowest_s=spread.slowest_s,
            time_breakdown=spread.breakdown,
            # The rate of the epoch's last step, as an epoch's own figure (not a declared EpochRecord field): the
            # dashboard charts such figures over the epochs and against GPUs, and a program's own `lr` stays one.
            lr=current_lr(optimizer),
        )
        ctx.reporter.record(record)
        ctx.reporter.progress(
            f"epoch {epoch}/{spec.epochs}: train loss {train_loss:.4f}, val loss {val_loss:.4f}, "
            f"val acc {val_accuracy:.2%}, {epoch_time:.2f} s"
        )
        at_target = stops_at_target(spec, record, ctx.device)
        stopping = stop_agreed(ctx.stop, ctx.device)
        # At the target the trained model is kept whatever checkpoint_every says: it is what the run was for.
        if at_target or stopping or (spec.checkpoint_every and epoch % spec.checkpoint_every == 0):
            checkpoints.save(epoch, record)
        if at_target:
            _report_target(ctx, epoch, "stopping")
            return epoch
        if stopping:
            raise Interrupted(f"signal {ctx.stop.signal} after epoch {epoch}; checkpoint saved")
    return None


def _report_target(ctx: Context, epoch: int, what: str) -> None:
    """The human line on rank 0: which target, at which epoch of how many, and that the run stops there."""
    target = ctx.spec.target.describe() if ctx.spec.target is not None else "the target"
    ctx.reporter.progress(f"target {target} reached at epoch {epoch} of {ctx.spec.epochs}: {what} (stop_at_target)")
