"""Pipeline parallelism: the model cut into consecutive stages, one per process, fed microbatches by a schedule.

With one microbatch this is naive model parallelism: one stage works while the others wait.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe
from torch.distributed.pipelining.schedules import PipelineScheduleSingle

from contract.spec import Model, PipelineSchedule, RunSpec
from contract.splits import even_groups
from worker.parallel.dims import DegreeError

SCHEDULES: dict[PipelineSchedule, type[PipelineScheduleSingle]] = {
    PipelineSchedule.gpipe: ScheduleGPipe,
    PipelineSchedule.one_f_one_b: Schedule1F1B,
}


def sequential_stage(model: nn.Sequential, stage: int, stages: int, name: str) -> nn.Module:
    """Cut before layers with weights, so each stage gets an equal share of them."""
    weighted = [i for i, layer in enumerate(model) if any(True for _ in layer.parameters())]
    if len(weighted) < stages:
        raise DegreeError(f"{name} has {len(weighted)} layers with weights: too few for {stages} pipeline stages")
    groups = even_groups(len(weighted), stages)
    start = 0 if stage == 0 else weighted[groups[stage].start]
    end = len(model) if stage == stages - 1 else weighted[groups[stage + 1].start]
    return model[start:end]


def gpt_stage(model: nn.Module, stage: int, stages: int) -> nn.Module:
    """Keep this stage's blocks; the embeddings live on the first stage, the norm and head on the last."""
    blocks: nn.ModuleDict = model.get_submodule("blocks")  # type: ignore[assignment]
    keys = list(blocks.keys())
    if len(keys) < stages:
        raise DegreeError(f"gpt has {len(keys)} blocks: too few for {stages} pipeline stages (raise depth)")
    mine = {keys[i] for i in even_groups(len(keys), stages)[stage]}
    for key in keys:
        if key not in mine:
            del blocks[key]
    # The model's forward skips what is None: the stage before or after provides it.
    dropped = ([] if stage == 0 else ["tok_emb", "pos_emb"]) + ([] if stage == stages - 1 else ["norm", "head"])
    for name in dropped:
        setattr(model, name, None)
    return model


def cut_stage(model: nn.Module, spec: RunSpec, stage: int, stages: int) -> nn.Module:
    if spec.model is Model.gpt:
        return gpt_stage(model, stage, stages)
    if not isinstance(model, nn.Sequential):
        raise DegreeError(f"model {spec.model} is not a sequence of layers that can be cut into stages")
    return sequential_stage(model, stage, stages, spec.model.value)


def apply_pp(model: nn.Module, mesh: DeviceMesh, spec: RunSpec) -> nn.Module:
    """This rank's stage of the model."""
    pp_mesh = mesh["pp"]
    return cut_stage(model, spec, pp_mesh.get_local_rank(), pp_mesh.size())


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
