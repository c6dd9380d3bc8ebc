"""Data parallel: a full replica per process, gradients all-reduced in buckets during backward."""

# No `from __future__ import annotations`: DDP checks the comm hook's annotations at run time.

import time
from typing import TYPE_CHECKING

import torch
from torch import nn
from torch.distributed import GradBucket, ProcessGroup  # type: ignore[attr-defined]
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.device_mesh import DeviceMesh
from torch.nn.parallel import DistributedDataParallel

from contract.spec import RunSpec

if TYPE_CHECKING:
    from worker.models.spec import ModelSpec


class CommTimer:
    """Seconds the gradient all-reduces took, each from launch to completion.

    Buckets overlap backward and each other, so the sum says how long communication was under way,
    not how much it delayed the step.
    """

    def __init__(self, group: ProcessGroup) -> None:
        self.group = group
        self.seconds = 0.0

    def take(self) -> float:
        seconds, self.seconds = self.seconds, 0.0
        return seconds


def _timed_allreduce(timer: CommTimer, bucket: GradBucket) -> torch.futures.Future[torch.Tensor]:
    started = time.perf_counter()

    def finished(future: torch.futures.Future[torch.Tensor]) -> torch.Tensor:
        timer.seconds += time.perf_counter() - started
        return future.value()

    return default_hooks.allreduce_hook(timer.group, bucket).then(finished)


class TimedDDP(DistributedDataParallel):
    """DDP whose gradient all-reduces are timed; the training loop reads `comm_timer` after each epoch."""

    def __init__(self, model: nn.Module, mesh: DeviceMesh) -> None:
        super().__init__(model, device_mesh=mesh)
        self.comm_timer = CommTimer(mesh.get_group())
        self.register_comm_hook(self.comm_timer, _timed_allreduce)


def apply_ddp(model: nn.Module, mesh: DeviceMesh, spec: RunSpec, model_spec: "ModelSpec") -> nn.Module:
    return TimedDDP(model, mesh)
