"""Metric lines for your own training program: what scalelab reads from its output, printed on rank 0 only.

scalelab follows a program run by reading `[METRIC] {json}` lines from its output (contract.records parses them).
This module prints them for a Python program; it uses the standard library only, so a program can import it
without scalelab's dependencies, or copy this one file next to itself. Call it on every rank: only rank 0 (RANK,
else SLURM_PROCID, else 0) prints, and every rank checks its values the same way.

A complete example, a DDP training loop reporting each epoch::

    import time
    import torch
    from contract import metrics

    began_run = time.perf_counter()
    metrics.start(device="cuda", backend="nccl", torch_version=torch.__version__)  # once, before the first epoch
    for epoch in range(1, epochs + 1):
        began = time.perf_counter()
        train_loss = train_one_epoch(model, loader)            # your code
        val_loss, val_accuracy = evaluate(model, val_loader)   # your code
        metrics.epoch(
            epoch,
            train_loss=train_loss,
            epoch_time_s=time.perf_counter() - began,
            val_loss=val_loss,
            val_accuracy=val_accuracy,
            samples_per_s=len(loader.dataset) / (time.perf_counter() - began),
            peak_memory_bytes=torch.cuda.max_memory_allocated(),
            grad_norm=last_grad_norm,                          # any number of your own: a custom metric
        )
    metrics.record("end", status="completed", total_time_s=time.perf_counter() - began_run)

which prints, on rank 0::

    [METRIC] {"v":1,"kind":"epoch","epoch":1,"train_loss":0.71,"epoch_time_s":3.2,...,"grad_norm":1.4}

The dashboard charts each custom metric (`grad_norm` here) against GPUs and over epochs. The batch script already
prints a start record from the run's spec; `start()` replaces its unknowns (device, backend, torch version).
"""

from __future__ import annotations

import json
import math
import os
import re
import socket
import sys
from typing import Any

PREFIX = "[METRIC]"
VERSION = 1
# A custom metric's name: a column of the comparison's CSV (`metric.NAME`) and a choice in the dashboard's menu.
CUSTOM_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
# What every record says of itself: no field may take these names.
_OWN_FIELDS = ("v", "kind")


def rank() -> int:
    """This process's rank: RANK (either launcher sets it), else Slurm's SLURM_PROCID, else 0 (one process)."""
    for name in ("RANK", "SLURM_PROCID"):
        value = _env_int(name)
        if value is not None:
            return value
    return 0


def _env_int(name: str) -> int | None:
    value = os.environ.get(name, "").strip()
    return int(value) if value.isascii() and value.isdigit() else None


def record(kind: str, /, **fields: Any) -> str | None:
    """Print one record of `kind` (one contract.records reads: start, epoch, end...) with `fields`, those that
    are None left out; the line printed, None on the other ranks.

    Raises ValueError naming a field whose value JSON cannot carry: NaN, an infinity, an object.
    """
    if not isinstance(kind, str) or not CUSTOM_NAME.match(kind):
        raise ValueError(f"kind {kind!r}: a lowercase name such as 'epoch' or 'end'")
    body: dict[str, Any] = {"v": VERSION, "kind": kind}
    for name, value in fields.items():
        if name in _OWN_FIELDS:
            raise ValueError(f"{name}: every record sets it itself")
        if value is None:
            continue
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{name}: {value!r} cannot go into a metric record ({exc})") from None
        body[name] = value
    line = f"{PREFIX} {json.dumps(body, separators=(',', ':'), allow_nan=False)}"
    if rank() != 0:
        return None
    sys.stdout.write(line + "\n")
    sys.stdout.flush()  # the server reads the output while the program runs, not when it ends
    return line


def _number(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):  # True is an int to Python, not a figure
        raise ValueError(f"{name}: {value!r} is not a number")
    if not math.isfinite(value):
        raise ValueError(f"{name}: {value!r} is not a finite number")
    return value


def epoch(
    epoch: int,
    train_loss: float,
    epoch_time_s: float,
    *,
    val_loss: float | None = None,
    val_accuracy: float | None = None,
    samples_per_s: float | None = None,
    peak_memory_bytes: int | None = None,
    model_flops_per_sample: float | None = None,
    hardware_flops_per_sample: float | None = None,
    **custom: float,
) -> str | None:
    """Print an epoch's record: its figures, and any numbers of your own (`custom`) kept as the run's own metrics.
    `model_flops_per_sample`: one training sample's FLOPs (forward x 3, a multiply-add counted as 2, recomputation
    left out), from which scalelab computes the run's MFU; `hardware_flops_per_sample` the same with recomputation
    (HFU)."""
    if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 0:
        raise ValueError(f"epoch: {epoch!r} is not an epoch number (0, 1, 2, ...)")
    named = {
        "train_loss": train_loss,
        "epoch_time_s": epoch_time_s,
        "val_loss": val_loss,
        "val_accuracy": val_accuracy,
        "samples_per_s": samples_per_s,
        "peak_memory_bytes": peak_memory_bytes,
        "model_flops_per_sample": model_flops_per_sample,
        "hardware_flops_per_sample": hardware_flops_per_sample,
    }
    fields = {name: _number(name, value) for name, value in named.items() if value is not None}
    if peak_memory_bytes is not None and not isinstance(peak_memory_bytes, int):
        raise ValueError(f"peak_memory_bytes: {peak_memory_bytes!r} is not a whole number of bytes")
    for name, value in custom.items():
        if not CUSTOM_NAME.match(name) or name in _OWN_FIELDS:
            raise ValueError(f"{name}: a custom metric's name is lowercase letters, digits and _ (at most 64)")
        fields[name] = _number(name, value)
    return record("epoch", epoch=epoch, **fields)


def start(**fields: Any) -> str | None:
    """Print a start record: what your program knows of its start (device, backend, torch_version...).

    The launch's figures are filled in from the environment scalelab sets (world size, nodes, strategy, host,
    image); a field given here wins. Print it once, before the first epoch: a start begins a new attempt, and the
    epochs printed before it stop counting.
    """
    world_size = _env_int("WORLD_SIZE") or _env_int("SLURM_NTASKS") or 1
    per_node = _env_int("LOCAL_WORLD_SIZE")
    nodes = world_size // per_node if per_node else _env_int("SLURM_NNODES") or 1
    # Outside scalelab no strategy is named: data parallel over several processes is the likeliest.
    strategy = os.environ.get("SCALELAB_STRATEGY") or ("ddp" if world_size > 1 else "single")
    launch = {
        "world_size": world_size,
        "nodes": max(1, nodes),
        "strategy": strategy,
        "hostname": socket.gethostname(),
        "image": os.environ.get("SCALELAB_IMAGE"),
        "image_digest": os.environ.get("SCALELAB_IMAGE_DIGEST") or None,
    }
    return record("start", **{**launch, **fields})
