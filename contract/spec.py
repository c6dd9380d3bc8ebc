"""The run spec: what one run is, which strategies and data sets each model admits and why not.

Built by the server, validated again by the worker; torch-free, so login nodes without torch import it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from contract.program import ProgramSpec
from contract.target import LrScaling, Target, scaled_lr, worker_refusal


class Model(StrEnum):
    mlp = "mlp"
    cnn = "cnn"
    resnet18 = "resnet18"
    gpt = "gpt"


class Dataset(StrEnum):
    synthetic = "synthetic"
    digits = "digits"
    cifar10 = "cifar10"
    text = "text"


class Strategy(StrEnum):
    single = "single"
    ddp = "ddp"
    fsdp = "fsdp"
    tp = "tp"
    pp = "pp"
    fsdp_tp = "fsdp_tp"


class Precision(StrEnum):
    fp32 = "fp32"
    bf16 = "bf16"
    fp16 = "fp16"


class PipelineSchedule(StrEnum):
    gpipe = "gpipe"
    one_f_one_b = "1f1b"


class RunKind(StrEnum):
    train = "train"
    inference = "inference"
    program = "program"  # a user's own training program (contract.program), launched and followed like the worker
    probe = "probe"  # the fabric probe (worker/probe.py): collectives timed over the allocation's processes


class FsdpSharding(StrEnum):
    full = "full"
    hybrid = "hybrid"


# Layouts an inference run can take: one process, or the model's heads split over the processes.
INFERENCE_STRATEGIES = frozenset({Strategy.single, Strategy.tp})

# Which strategies each model's structure admits, and why the others are refused.
STRATEGIES_BY_MODEL: dict[Model, frozenset[Strategy]] = {
    Model.mlp: frozenset({Strategy.single, Strategy.ddp, Strategy.fsdp, Strategy.tp, Strategy.pp}),
    Model.cnn: frozenset({Strategy.single, Strategy.ddp, Strategy.fsdp, Strategy.pp}),
    Model.resnet18: frozenset({Strategy.single, Strategy.ddp, Strategy.fsdp}),
    Model.gpt: frozenset(Strategy),
}
_WHY_REFUSED: dict[tuple[Model, Strategy], str] = {
    (Model.cnn, Strategy.tp): "convolutions have no column/row-parallel plan here; use ddp or fsdp",
    (Model.resnet18, Strategy.tp): "convolutions have no column/row-parallel plan here; use ddp or fsdp",
    (Model.resnet18, Strategy.pp): "its residual blocks and batch norm are not split into pipeline stages here",
    (Model.mlp, Strategy.fsdp_tp): "2-D parallelism is for gpt, whose blocks have both attention and MLP to split",
    (Model.cnn, Strategy.fsdp_tp): "2-D parallelism is for gpt, whose blocks have both attention and MLP to split",
    (Model.resnet18, Strategy.fsdp_tp): "2-D parallelism is for gpt, whose blocks have both attention and MLP to split",
}
# Which data sets each model reads; `synthetic` takes whatever shape the model needs.
DATASETS_BY_MODEL: dict[Model, frozenset[Dataset]] = {
    Model.mlp: frozenset({Dataset.synthetic, Dataset.digits, Dataset.cifar10}),
    Model.cnn: frozenset({Dataset.synthetic, Dataset.cifar10}),
    Model.resnet18: frozenset({Dataset.synthetic, Dataset.cifar10}),
    Model.gpt: frozenset({Dataset.synthetic, Dataset.text}),
}


# Settings that only some strategies read; under any other they keep their defaults (a tp_degree is refused there).
STRATEGY_FIELDS: dict[str, frozenset[Strategy]] = {
    "tp_degree": frozenset({Strategy.tp, Strategy.fsdp_tp}),
    "fsdp_sharding": frozenset({Strategy.fsdp}),
    "pp_schedule": frozenset({Strategy.pp}),
    "microbatches": frozenset({Strategy.pp}),
}

# What only an inference run reads: a training run's listings leave them out.
INFERENCE_ONLY_FIELDS = frozenset({"checkpoint", "max_new_tokens", "temperature", "top_k"})
# What only training reads: time to accuracy (inference reports no epochs to reach a target in, and has no rate).
TRAINING_ONLY_FIELDS = frozenset(
    {"target", "stop_at_target", "lr_scaling", "warmup_epochs", "reference_lr", "reference_batch"}
)
# What a program run reads: where and how its processes start, the strategy as a label it reads from
# SCALELAB_STRATEGY, the seed of its repeat (SCALELAB_SEED), and the program; the built-in worker's fields do not
# apply to it.
PROGRAM_FIELDS = frozenset({"kind", "strategy", "nodes", "gpus", "seed", "program", "target"})
# What a fabric probe reads: where its processes run, and how long it may take (contract.fabric, worker/probe.py).
PROBE_FIELDS = frozenset({"kind", "nodes", "gpus", "seed", "probe_seconds"})
# What a training run reads and no other kind: the fabric pre-flight before training.
PREFLIGHT_FIELDS = frozenset({"fabric_preflight"})
# The fabric probe's time, in seconds, unless the spec says otherwise: about 20 s in all, as the issue bounds it.
PROBE_SECONDS_DEFAULT = 20.0

# What the server sets in each run's spec from the experiment as a whole, never the request's base or grid: an
# inference run's checkpoint, the experiment's target, and the rate and batch a learning-rate rule scales from.
SERVER_FIELDS = frozenset({"checkpoint", "target", "reference_lr", "reference_batch"})


def kind_reads(kind: str, field: str) -> bool:
    """Whether a run of `kind` reads `field`: a program only PROGRAM_FIELDS, a probe only PROBE_FIELDS, the worker
    never `program`, a training run no inference field and an inference run none of time to accuracy nor the
    pre-flight."""
    if kind == RunKind.program:
        return field in PROGRAM_FIELDS
    if kind == RunKind.probe:
        return field in PROBE_FIELDS
    if field == "probe_seconds":
        return False
    if kind == RunKind.inference:
        return field not in TRAINING_ONLY_FIELDS | PREFLIGHT_FIELDS | {"program"}
    return field != "program" and field not in INFERENCE_ONLY_FIELDS


def settings_of(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A spec's fields that its kind reads, from its JSON as stored or answered (perhaps by another version of
    scalelab, so it is not validated again): what RunSpec.settings() gives, for the pages and the client."""
    kind = spec.get("kind", RunKind.train)
    return {key: value for key, value in spec.items() if kind_reads(kind, key)}


class RunSpec(BaseModel):
    """Everything one training run needs; built by the server, validated again by the worker."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: Model = Model.mlp
    dataset: Dataset = Dataset.synthetic
    strategy: Strategy = Strategy.ddp
    nodes: Annotated[int, Field(ge=1, le=1024, description="Slurm nodes")] = 1
    gpus: Annotated[
        int, Field(ge=1, le=8192, description="training processes in all: one per GPU (one per CPU slot without GPUs)")
    ] = 1
    tp_degree: Annotated[
        int | None, Field(ge=1, le=64, description="tensor-parallel group size (tp: all gpus; fsdp_tp: a divisor)")
    ] = None
    pp_schedule: PipelineSchedule = PipelineSchedule.gpipe
    microbatches: Annotated[
        int, Field(ge=1, le=1024, description="pipeline microbatches per step; 1 is naive model parallelism")
    ] = 4
    fsdp_sharding: Annotated[
        FsdpSharding, Field(description="full: shard over all processes; hybrid: shard in a node, replicate across")
    ] = FsdpSharding.full
    epochs: Annotated[int, Field(ge=1, le=10_000)] = 2
    steps_per_epoch: Annotated[
        int | None, Field(ge=1, le=10_000_000, description="cap on optimizer steps per epoch")
    ] = None
    global_batch_size: Annotated[int, Field(ge=1, le=1_048_576, description="samples per step over all processes")] = 64
    grad_accum_steps: Annotated[int, Field(ge=1, le=1024, description="microsteps per optimizer step")] = 1
    lr: Annotated[float, Field(gt=0, le=10, description="learning rate")] = 0.05
    precision: Precision = Precision.fp32
    compile: Annotated[bool, Field(description="torch.compile the model")] = False
    activation_checkpointing: Annotated[bool, Field(description="recompute activations in backward")] = False
    depth: Annotated[int | None, Field(ge=1, le=256, description="hidden layers (mlp) or blocks (gpt)")] = None
    width: Annotated[int | None, Field(ge=8, le=65_536, description="hidden size (mlp) or embedding (gpt)")] = None
    heads: Annotated[int | None, Field(ge=1, le=256, description="attention heads (gpt)")] = None
    context: Annotated[int | None, Field(ge=8, le=65_536, description="tokens per sequence (gpt)")] = None
    seed: Annotated[int, Field(ge=0, le=2**31 - 1)] = 0
    checkpoint_every: Annotated[
        int, Field(ge=0, le=10_000, description="epochs between checkpoints; 0: only when Slurm signals the job")
    ] = 0
    step_log_every: Annotated[int, Field(ge=0, le=1_000_000, description="a step record every N steps; 0: none")] = 0
    # Last, so that the fields every training run shows keep their order.
    kind: Annotated[RunKind, Field(description="train a model, or generate text from a trained gpt's checkpoint")] = (
        RunKind.train
    )
    # Inference: global_batch_size is the prompts generated together, seed seeds the sampling.
    checkpoint: Annotated[
        str | None,
        Field(
            max_length=1024,
            pattern=r"^/[A-Za-z0-9_./+-]*$",
            description="inference: the directory of the finished gpt training run to load (set by the server)",
        ),
    ] = None
    max_new_tokens: Annotated[int, Field(ge=1, le=4096, description="inference: tokens generated per prompt")] = 32
    temperature: Annotated[
        float, Field(ge=0, le=10, description="inference: sampling temperature; 0 is greedy decoding")
    ] = 0.0
    top_k: Annotated[
        int | None, Field(ge=1, le=1_000_000, description="inference: sample among the k likeliest tokens only")
    ] = None
    program: Annotated[
        ProgramSpec | None, Field(description="kind program: the user's own program to launch instead of the worker")
    ] = None
    # Time to accuracy (contract.target): after `program`, so that the order of the fields before it stays.
    target: Annotated[
        Target | None, Field(description="the experiment's quality target (set by the server from the request's)")
    ] = None
    stop_at_target: Annotated[
        bool, Field(description="end the run at the end of the epoch that reaches the target, a checkpoint kept")
    ] = False
    lr_scaling: Annotated[
        LrScaling,
        Field(description="scale lr with the global batch against the grid's smallest: none, linear or sqrt"),
    ] = LrScaling.none
    warmup_epochs: Annotated[
        int,
        Field(ge=0, le=1000, description="epochs over which the rate rises linearly from the reference rate to lr"),
    ] = 0
    reference_lr: Annotated[
        float | None,
        Field(gt=0, le=10, description="the rate the request gave, for reference_batch (set by the server)"),
    ] = None
    reference_batch: Annotated[
        int | None,
        Field(ge=1, le=1_048_576, description="the grid's smallest global batch, which lr_scaling scales from"),
    ] = None
    # The fabric (contract.fabric, worker/probe.py): after the fields above, so that their order stays.
    fabric_preflight: Annotated[
        bool,
        Field(description="time a few all-reduces per tier (a few seconds) in the allocation before training"),
    ] = False
    probe_seconds: Annotated[
        float,
        Field(ge=1, le=600, description="kind probe: the time the whole probe may take; sizes stop growing by it"),
    ] = PROBE_SECONDS_DEFAULT

    @model_validator(mode="before")
    @classmethod
    def _inference_defaults(cls, data: Any) -> Any:
        # Training's default strategy (ddp) is no inference layout: inference starts from one process.
        if isinstance(data, dict) and data.get("kind") in (RunKind.inference, "inference"):
            return {"strategy": Strategy.single, **data}
        return data

    @model_validator(mode="after")
    def _degrees_fit(self) -> RunSpec:
        if self.kind is RunKind.program:
            return self._program_fits()
        if self.kind is RunKind.probe:
            return self._probe_fits()
        if self.program is not None:
            raise ValueError("program applies to runs of kind 'program' only")
        self._target_fits()
        if self.kind is RunKind.inference:
            if self.model is not Model.gpt:
                raise ValueError(f"inference generates text with a gpt model, not '{self.model}'")
            if self.strategy not in INFERENCE_STRATEGIES:
                raise ValueError(
                    f"inference runs on one process (single) or tensor parallel (tp), not '{self.strategy}'"
                )
            if self.strategy is Strategy.tp and self.gpus == 1:
                # So that a grid over strategy [single, tp] x gpus [1, 2, ...] names each layout once.
                raise ValueError("tensor-parallel inference over 1 process is the single layout: use strategy single")
            if self.checkpoint is None:
                raise ValueError("inference needs a checkpoint: the finished gpt training run to load")
        elif self.checkpoint is not None:
            raise ValueError("checkpoint applies to inference runs only")
        if self.gpus % self.nodes:
            raise ValueError(
                f"gpus ({self.gpus}) must be a multiple of nodes ({self.nodes}): every node runs as many processes"
            )
        if self.strategy not in STRATEGIES_BY_MODEL[self.model]:
            why = _WHY_REFUSED.get((self.model, self.strategy), "")
            raise ValueError(f"strategy '{self.strategy}' does not fit model '{self.model}': {why}".rstrip(": "))
        if self.dataset not in DATASETS_BY_MODEL[self.model]:
            fits = ", ".join(sorted(DATASETS_BY_MODEL[self.model]))
            raise ValueError(f"model '{self.model}' does not read data set '{self.dataset}'; it reads: {fits}")
        if self.strategy is Strategy.single and self.gpus != 1:
            raise ValueError(f"strategy 'single' runs one process, but gpus is {self.gpus}: use 'ddp' for more")
        if self.tp_degree is not None and self.strategy not in STRATEGY_FIELDS["tp_degree"]:
            raise ValueError(f"tp_degree applies to strategies tp and fsdp_tp, not '{self.strategy}'")
        if self.strategy is Strategy.tp and self.tp_degree not in (None, self.gpus):
            raise ValueError(
                f"strategy 'tp' splits over all gpus ({self.gpus}); for tp_degree {self.tp_degree} "
                "with data parallelism across the groups use fsdp_tp"
            )
        if self.strategy is Strategy.fsdp_tp and (self.tp_degree is None or self.gpus % self.tp_degree):
            raise ValueError(f"fsdp_tp needs a tp_degree that divides gpus ({self.gpus}), got {self.tp_degree}")
        share = self.dp_degree * self.grad_accum_steps
        if self.global_batch_size % share:
            parts = (
                f"gpus ({self.gpus})"
                if share == self.gpus
                else f"{share} (data-parallel degree {self.dp_degree} x grad_accum_steps {self.grad_accum_steps})"
            )
            raise ValueError(
                f"global_batch_size ({self.global_batch_size}) must be divisible by {parts}: "
                "every process takes an equal share of each batch"
            )
        if self.strategy is Strategy.pp and (self.global_batch_size // self.grad_accum_steps) % self.microbatches:
            raise ValueError(
                f"each pipeline step's batch ({self.global_batch_size // self.grad_accum_steps}) must be divisible "
                f"by microbatches ({self.microbatches})"
            )
        if self.strategy is Strategy.pp and self.precision is Precision.fp16:
            raise ValueError("fp16 does not fit pp: the pipeline schedule runs backward without loss scaling; use bf16")
        if self.heads is not None and self.width is not None and self.width % self.heads:
            raise ValueError(f"width ({self.width}) must be divisible by heads ({self.heads})")
        return self

    def _target_fits(self) -> None:
        """The target and the learning-rate rule: what the built-in worker can report, stop at and schedule."""
        if self.target is not None:
            if self.kind is RunKind.inference:
                raise ValueError("a target is for training runs: inference reports no epochs")
            if refused := worker_refusal(self.target, self.model):
                raise ValueError(refused)
        if self.stop_at_target and self.target is None:
            raise ValueError("stop_at_target needs the experiment's target (target: {metric, at_least | at_most})")
        if self.lr_scaling is LrScaling.none:
            if self.reference_lr is not None or self.reference_batch is not None:
                raise ValueError("reference_lr and reference_batch go with an lr_scaling rule (linear or sqrt)")
            return
        if self.reference_lr is None or self.reference_batch is None:
            raise ValueError(
                f"lr_scaling {self.lr_scaling} needs reference_lr and reference_batch, which the server sets from "
                "the grid's smallest global batch"
            )
        expected = scaled_lr(self.reference_lr, self.reference_batch, self.global_batch_size, self.lr_scaling)
        if not math.isclose(self.lr, expected, rel_tol=1e-9):
            raise ValueError(
                f"lr {self.lr} is not what lr_scaling {self.lr_scaling} gives for global_batch_size "
                f"{self.global_batch_size} from reference_lr {self.reference_lr} at {self.reference_batch}: "
                f"{expected:g}"
            )

    def _program_fits(self) -> RunSpec:
        if self.program is None:
            raise ValueError("a run of kind 'program' needs its program: command and workdir")
        # A field at its default says nothing: a program run's whole dump (the database's copy, spec.json) reads back.
        fields = type(self).model_fields
        given = sorted(
            name for name in self.model_fields_set - PROGRAM_FIELDS if getattr(self, name) != fields[name].default
        )
        if given:
            raise ValueError(
                f"{', '.join(given)}: the built-in worker's settings do not apply to a program; "
                "pass values to the program as program.params"
            )
        if self.gpus % self.nodes:
            raise ValueError(
                f"gpus ({self.gpus}) must be a multiple of nodes ({self.nodes}): every node runs as many processes"
            )
        if self.program.batch is not None and (refused := self.program.batch.refusal(self.program.params)):
            raise ValueError(refused)
        return self

    def _probe_fits(self) -> RunSpec:
        fields = type(self).model_fields
        given = sorted(
            name for name in self.model_fields_set - PROBE_FIELDS if getattr(self, name) != fields[name].default
        )
        if given:
            raise ValueError(f"{', '.join(given)}: a fabric probe reads only {', '.join(sorted(PROBE_FIELDS))}")
        if self.gpus % self.nodes:
            raise ValueError(
                f"gpus ({self.gpus}) must be a multiple of nodes ({self.nodes}): every node runs as many processes"
            )
        if self.gpus < 2:
            raise ValueError("a fabric probe needs two processes or more: one process has no fabric to measure")
        return self

    def global_batch(self) -> int | None:
        """The samples per step over all processes: the spec's where its kind reads it, a program's where it declares
        its batch, else None (a program's batch is its own)."""
        if self.reads("global_batch_size"):
            return self.global_batch_size
        if self.program is not None and self.program.batch is not None:
            return self.program.batch.global_batch(self.program.params, self.gpus)
        return None

    def settings(self) -> dict[str, Any]:
        """The spec as JSON values, with only the fields its kind reads (the others only hold their defaults)."""
        return settings_of(self.model_dump(mode="json"))

    def reads(self, field: str) -> bool:
        """Whether this run's kind reads `field` (the others only hold their defaults), without dumping the spec."""
        return kind_reads(self.kind, field)

    @property
    def gpus_per_node(self) -> int:
        return self.gpus // self.nodes

    @property
    def tp(self) -> int:
        """Tensor-parallel degree."""
        if self.strategy is Strategy.tp:
            return self.gpus
        return (self.tp_degree or 1) if self.strategy is Strategy.fsdp_tp else 1

    @property
    def pp(self) -> int:
        """Pipeline stages."""
        return self.gpus if self.strategy is Strategy.pp else 1

    @property
    def dp_degree(self) -> int:
        """How many processes read different data."""
        return self.gpus // (self.tp * self.pp)
