"""Data parallel: a full replica per process, gradients all-reduced in buckets during backward."""

# No `from __future__ import annotations`: DDP checks the comm hook's annotations at run time.

import os
import time
from typing import TYPE_CHECKING

import torch
from torch import nn
from torch.distributed import GradBucket, ProcessGroup  # type: ignore[attr-defined]
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.device_mesh import DeviceMesh
from torch.nn.parallel import DistributedDataParallel
from torch.profiler import record_function

from contract.spec import RunSpec

if TYPE_CHECKING:
    from worker.models.spec import ModelSpec


# TEST ONLY: seconds each gradient all-reduce is held back, to make a run's communication slow on purpose (the
# off_model flag's test). Marked as a gloo event, so that the worker's timing bills it as communication waited for,
# which is what it stands for. Never set by the server or in a batch script.
TEST_ONLY_COMM_DELAY = "SCALELAB_TEST_ONLY_COMM_DELAY_S"


class CommTimer:
    """Seconds the gradient all-reduces took, each from launch to completion.

    Buckets overlap backward and each other, so the sum says how long communication was under way,
    not how much it delayed the step.
    """

    def __init__(self, group: ProcessGroup) -> None:
        self.group = group
        self.seconds = 0.0
        self.test_only_delay_s = float(os.environ.get(TEST_ONLY_COMM_DELAY, "0") or 0)

    def take(self) -> float:
        seconds, self.seconds = self.seconds, 0.0
        return seconds


def _timed_allreduce(timer: CommTimer, bucket: GradBucket) -> torch.futures.Future[torch.Tensor]:
    started = time.perf_counter()
    if timer.test_only_delay_s > 0:
        with record_function("gloo:test_only_comm_delay"):
            time.sleep(timer.test_only_delay_s)

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
