"""Tensor parallelism: each weight matrix split over the group, column-wise then row-wise, so one all-reduce
per pair of layers brings the activations back together."""

from __future__ import annotations

from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor.parallel import ColwiseParallel, ParallelStyle, RowwiseParallel, parallelize_module

from contract.spec import Model, RunSpec
from worker.parallel.dims import DegreeError


def mlp_plan(model: nn.Module, tp: int) -> dict[str, ParallelStyle]:
    """Hidden Linear layers in column/row pairs; an unpaired last layer stays whole on every rank."""
    linears = [name for name, module in model.named_children() if isinstance(module, nn.Linear)]
    pairs = len(linears) // 2
    plan: dict[str, ParallelStyle] = {}
    for i in range(pairs):
        column, row = linears[2 * i], linears[2 * i + 1]
        layer: nn.Linear = model.get_submodule(column)  # type: ignore[assignment]
        width = layer.out_features
        if width % tp:
            raise DegreeError(f"mlp width {width} does not split over {tp} tensor-parallel ranks")
        plan[column], plan[row] = ColwiseParallel(), RowwiseParallel()
    return plan


def gpt_plan(model: nn.Module, tp: int) -> dict[str, ParallelStyle]:
    """Attention heads and the feed-forward hidden units split over the group; embeddings and norms replicated."""
    plan: dict[str, ParallelStyle] = {}
    blocks: nn.ModuleDict = model.get_submodule("blocks")  # type: ignore[assignment]
    for key, block in blocks.items():
        q: nn.Linear = block.get_submodule("attn.q")  # type: ignore[assignment]
        head_dim: int = getattr(block.get_submodule("attn"), "head_dim")  # noqa: B009  (typed attribute of gpt)
        heads = q.out_features // head_dim
        if heads % tp:
            raise DegreeError(f"gpt has {heads} attention heads, which do not split over {tp} ranks")
        for name in ("attn.q", "attn.k", "attn.v", "mlp.fc"):
            plan[f"blocks.{key}.{name}"] = ColwiseParallel()
        for name in ("attn.proj", "mlp.proj"):
            plan[f"blocks.{key}.{name}"] = RowwiseParallel()
    return plan


PLANS = {Model.mlp: mlp_plan, Model.gpt: gpt_plan}


def apply_tp(model: nn.Module, mesh: DeviceMesh, spec: RunSpec) -> nn.Module:
    tp_mesh = mesh["tp"]
    return parallelize_module(model, tp_mesh, PLANS[spec.model](model, tp_mesh.size()))
