"""Parallel strategies, composed once before training by a registry keyed by strategy name.

Each strategy turns the model into a `Parallelized`: what one rank runs for a training step and for a
prediction, which data shard it reads, and whether its losses count. The training loop knows nothing else.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.nn.parallel import DistributedDataParallel

from contract.spec import RunSpec, Strategy
from worker.distributed import DistEnv
from worker.models.spec import ModelSpec
from worker.parallel.ac import apply_ac
from worker.parallel.compile import compile_units
from worker.parallel.ddp import apply_ddp
from worker.parallel.dims import DegreeError, ParallelDims
from worker.parallel.single import apply_single
from worker.precision import PrecisionPolicy

if TYPE_CHECKING:
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining.schedules import PipelineScheduleSingle

# A step of a strategy: the model, the run's mesh, its spec, and the model's spec (its plans and units).
Apply = Callable[[nn.Module, DeviceMesh, RunSpec, ModelSpec], nn.Module]
LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class OnUse:
    """worker.parallel.<module>.<name>, imported when first called. FSDP, tensor and pipeline parallelism are
    imported by the runs that use them only: torch's pipelining brings torch._dynamo, and FSDP and tensor
    parallelism bring DTensor, which took `import worker.train` from 2.0 to 3.8 s of CPU at every rank's start
    (measured on 2 cores), for a DDP run that needs none of them; on a parallel file system every rank of a large
    job reads those thousands of files again. (The models' tensor plans import their styles the same way.)"""

    module: str
    name: str

    def load(self) -> Callable[..., Any]:
        return getattr(importlib.import_module(f"worker.parallel.{self.module}"), self.name)  # type: ignore[no-any-return]

    def __call__(self, *args: Any) -> Any:
        return self.load()(*args)


apply_fsdp: Apply = OnUse("fsdp", "apply_fsdp")
apply_tp: Apply = OnUse("tp", "apply_tp")
apply_pp: Apply = OnUse("pp", "apply_pp")
build_schedule = OnUse("pp", "build_schedule")


@dataclass(frozen=True)
class Layout:
    """How a module strategy is put together: split the model first, then wrap it for data parallelism.

    Activation checkpointing and compilation go between the two, as the wrappers expect.
    """

    split: Apply | None
    wrap: Apply
    comm: str | None = None  # the communication inside a step, as timing records name it


STRATEGIES: dict[Strategy, Layout] = {
    Strategy.single: Layout(split=None, wrap=apply_single),
    Strategy.ddp: Layout(split=None, wrap=apply_ddp, comm="gradient all-reduces"),
    Strategy.fsdp: Layout(split=None, wrap=apply_fsdp, comm="all-gathers and reduce-scatters"),
    Strategy.tp: Layout(split=apply_tp, wrap=apply_single, comm="activation all-reduces"),
    Strategy.fsdp_tp: Layout(split=apply_tp, wrap=apply_fsdp, comm="all-gathers, reduce-scatters and all-reduces"),
    # pp: plus a schedule, built after the stage is ready.
    Strategy.pp: Layout(split=apply_pp, wrap=apply_single, comm="sends and receives between stages"),
}


class Parallelized:
    """One rank's share of the model, run the same way whatever the strategy."""

    def __init__(
        self,
        module: nn.Module,
        precision: PrecisionPolicy,
        loss_fn: LossFn,
        mesh: DeviceMesh,
        spec: RunSpec,
        comm: str | None = None,
    ):
        self.module = module
        # What a step communicates inside forward and backward (None: nothing), for the step timer to sample.
        self.comm = comm if mesh.size() > 1 else None
        self.precision = precision
        self.loss_fn = loss_fn
        self.accum = spec.grad_accum_steps
        # Ranks of one tensor-parallel group (or one pipeline) see the same samples; only one of them reports.
        names = mesh.mesh_dim_names or ()
        self.data_rank = mesh.get_local_rank("dp") if "dp" in names else 0
        self.data_world = mesh.size(names.index("dp")) if "dp" in names else 1
        self.reports = "tp" not in names or mesh.get_local_rank("tp") == 0

    def train_step(self, inputs: torch.Tensor, targets: torch.Tensor, sync: bool) -> torch.Tensor:
        """Forward and backward of one microstep; the batch's mean loss, detached."""
        # Backward inside the sync switch too: DDP reads it in forward, but FSDP2 reads it in backward, and with
        # forward alone inside it reduce-scattered every microstep's gradients.
        with _gradient_sync(self.module, sync):
            with self.precision.autocast():
                loss = self.loss_fn(self.module(inputs), targets)
            self.precision.backward(loss / self.accum)
        return loss.detach()

    def predict(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor | None:
        """The outputs for a batch (None on ranks that produce none); targets only feed a pipeline's loss."""
        with self.precision.autocast():
            output: torch.Tensor = self.module(inputs)
        return output


class PipelineParallelized(Parallelized):
    def __init__(
        self,
        module: nn.Module,
        schedule: PipelineScheduleSingle,
        stage: PipelineStage,
        precision: PrecisionPolicy,
        loss_fn: LossFn,
        mesh: DeviceMesh,
        spec: RunSpec,
        comm: str | None = None,
    ) -> None:
        super().__init__(module, precision, loss_fn, mesh, spec, comm)
        self.schedule, self.stage = schedule, stage
        self.reports = stage.is_last  # only the last stage sees outputs and losses

    def _run(self, step: Callable[..., object], inputs: torch.Tensor, targets: torch.Tensor) -> object:
        kwargs: dict[str, object] = {}
        if self.stage.is_last:
            kwargs = {"target": targets, "losses": self._losses}
        with self.precision.autocast():
            return step(inputs, **kwargs) if self.stage.is_first else step(**kwargs)

    def train_step(self, inputs: torch.Tensor, targets: torch.Tensor, sync: bool) -> torch.Tensor:
        self._losses: list[torch.Tensor] = []
        self._run(self.schedule.step, inputs, targets)
        if not self._losses:
            return torch.zeros((), device=inputs.device)
        # The schedule's loss_fn divided by the accumulation steps; report the plain mean loss.
        return torch.stack(self._losses).mean().detach() * self.accum

    def predict(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor | None:
        self._losses = []
        output = self._run(self.schedule.eval, inputs, targets)
        return output if isinstance(output, torch.Tensor) else None


@contextlib.contextmanager
def _gradient_sync(module: nn.Module, sync: bool) -> Iterator[None]:
    """Skip the gradient reduction on accumulation microsteps; the last one reduces the sum."""
    if sync:
        yield
    elif isinstance(module, DistributedDataParallel):
        with module.no_sync():
            yield
    elif callable(set_sync := getattr(module, "set_requires_gradient_sync", None)):  # FSDP2
        set_sync(False)
        try:
            yield
        finally:
            set_sync(True)
    else:
        yield


def parallelize(
    model: nn.Module,
    model_spec: ModelSpec,
    spec: RunSpec,
    dist_env: DistEnv,
    device: torch.device,
    precision: PrecisionPolicy,
    loss_fn: LossFn,
) -> Parallelized:
    """Check the layout against the launch, build the mesh, and apply the strategy, once, with the model's plans."""
    dims = ParallelDims.from_spec(spec, dist_env.world_size, dist_env.nodes)
    mesh = dims.mesh(device.type, spec)
    try:
        layout = STRATEGIES[spec.strategy]
    except KeyError:
        raise DegreeError(f"unknown strategy {spec.strategy!r}; known: {', '.join(STRATEGIES)}") from None
    if layout.split is not None:
        model = layout.split(model, mesh, spec, model_spec)
    model = model.to(device)
    if spec.activation_checkpointing:
        model = apply_ac(model, model_spec)
    if spec.compile:
        model = compile_units(model, model_spec)
    module = layout.wrap(model, mesh, spec, model_spec)
    if spec.strategy is Strategy.pp:
        # The schedule's loss is divided by the accumulation steps, as train_step divides its own.
        def scaled(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
            return loss_fn(output, target) / spec.grad_accum_steps

        schedule, stage = build_schedule(module, mesh, spec, device, scaled)
        return PipelineParallelized(module, schedule, stage, precision, loss_fn, mesh, spec, layout.comm)
    return Parallelized(module, precision, loss_fn, mesh, spec, layout.comm)
