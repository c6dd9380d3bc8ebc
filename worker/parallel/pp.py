"""Pipeline parallelism: the model cut into consecutive stages, one per process, fed microbatches by a schedule.

With one microbatch this is naive model parallelism: one stage works while the others wait.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe
from torch.distributed.pipelining.schedules import PipelineScheduleSingle

from contract.spec import PipelineSchedule, RunSpec
from worker.parallel.dims import DegreeError

if TYPE_CHECKING:
    from worker.models.spec import ModelSpec

SCHEDULES: dict[PipelineSchedule, type[PipelineScheduleSingle]] = {
    PipelineSchedule.gpipe: ScheduleGPipe,
    PipelineSchedule.one_f_one_b: Schedule1F1B,
}


def cut_stage(model: nn.Module, model_spec: ModelSpec, stage: int, stages: int) -> nn.Module:
    """The part of the model that stage `stage` of `stages` keeps, as the model's spec cuts it."""
    if model_spec.pipeline_stage is None:
        raise DegreeError(f"model {model_spec.model} is not a sequence of layers that can be cut into stages")
    return model_spec.pipeline_stage(model, stage, stages)


def apply_pp(model: nn.Module, mesh: DeviceMesh, spec: RunSpec, model_spec: ModelSpec) -> nn.Module:
    """This rank's stage of the model."""
    pp_mesh = mesh["pp"]
    return cut_stage(model, model_spec, pp_mesh.get_local_rank(), pp_mesh.size())


def build_schedule(
    module: nn.Module,
    mesh: DeviceMesh,
    spec: RunSpec,
    device: torch.device,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
) -> tuple[PipelineScheduleSingle, PipelineStage]:
    pp_mesh = mesh["pp"]
    stage = PipelineStage(module, pp_mesh.get_local_rank(), pp_mesh.size(), device, group=pp_mesh.get_group())
    return SCHEDULES[spec.pp_schedule](stage, n_microbatches=spec.microbatches, loss_fn=loss_fn), stage
