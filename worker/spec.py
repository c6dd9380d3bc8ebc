"""The contract between server and worker: the run spec and the metric records.

Torch-free on purpose: the server imports this module on login nodes without torch.
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

METRIC_PREFIX = "[METRIC]"
RECORD_VERSION = 1
# The run spec's file in a run directory (an inference run reads its checkpoint's training spec there too).
SPEC_FILE = "spec.json"
# Files of an inference run's directory: the prompts the server stored there, the text the worker generated.
PROMPTS_FILE = "prompts.txt"
# Where a training run keeps its checkpoints, inside its run directory.
CHECKPOINTS_DIR = "checkpoints"
GENERATIONS_FILE = "generations.jsonl"
# Layouts an inference run can take: one process, or the model's heads split over the processes.


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


# What only an inference run reads: a training run's listings leave them out.
INFERENCE_ONLY_FIELDS = frozenset({"checkpoint", "max_new_tokens", "temperature", "top_k"})


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

    @model_validator(mode="before")
    @classmethod
    def _inference_defaults(cls, data: Any) -> Any:
        # Training's default strategy (ddp) is no inference layout: inference starts from one process.
        if isinstance(data, dict) and data.get("kind") in (RunKind.inference, "inference"):
            return {"strategy": Strategy.single, **data}
        return data

    @model_validator(mode="after")
    def _degrees_fit(self) -> RunSpec:
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
        if self.tp_degree is not None and self.strategy not in (Strategy.tp, Strategy.fsdp_tp):
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

    def settings(self) -> dict[str, Any]:
        """The spec as JSON values, without the inference fields when it trains (they only hold their defaults)."""
        return self.model_dump(mode="json", exclude=set(INFERENCE_ONLY_FIELDS) if self.kind is RunKind.train else None)

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


class _Record(BaseModel):
    # Newer workers may add fields; keep them rather than refuse the record.
    model_config = ConfigDict(extra="allow")

    v: Literal[1] = 1


class StartRecord(_Record):
    kind: Literal["start"] = "start"
    world_size: int
    nodes: int
    device: str
    backend: str
    strategy: str
    torch_version: str
    hostname: str
    parameters: int | None = Field(default=None, description="trainable parameters of the whole model")
    precision: str | None = None
    # Provenance: what a later "run again" needs to repeat the run exactly.
    worker_version: str | None = None
    image: str | None = Field(default=None, max_length=512, description="the container image it ran in, as named")
    image_digest: str | None = Field(default=None, max_length=128, description="that image's digest, sha256:...")
    source_revision: str | None = Field(default=None, max_length=128, description="the source revision of the image")


class EpochRecord(_Record):
    kind: Literal["epoch"] = "epoch"
    epoch: int
    train_loss: float
    val_loss: float | None = None
    val_accuracy: float | None = Field(default=None, description="per token for language models")
    val_perplexity: float | None = Field(default=None, description="language models: exp(val_loss)")
    epoch_time_s: float
    comm_time_s: float | None = Field(
        default=None, description="ddp: rank 0's gradient all-reduces, launch to completion, overlapping backward"
    )
    samples_per_s: float | None = Field(default=None, description="global, all processes together")
    tokens_per_s: float | None = Field(default=None, description="language models: samples/s x context")
    model_tflops_per_s: float | None = Field(
        default=None, description="language models: 6 x parameters x tokens/s (attention left out), all ranks"
    )
    mfu: float | None = Field(default=None, description="model FLOP/s over the peak (SCALELAB_PEAK_TFLOPS per device)")
    peak_memory_bytes: int | None = Field(default=None, description="the largest peak over all ranks")
    memory_kind: str | None = Field(default=None, description="cuda_max_allocated or cpu_max_rss")


class StepRecord(_Record):
    """Every `step_log_every` optimizer steps, for curves finer than an epoch."""

    kind: Literal["step"] = "step"
    epoch: int
    step: int = Field(description="optimizer steps since the start of the run")
    train_loss: float


class MemoryRecord(_Record):
    """One rank's peak memory in an epoch, or (epoch 0) over an inference run; printed by rank 0 for every rank."""

    kind: Literal["memory"] = "memory"
    epoch: int
    rank: int
    peak_allocated_bytes: int
    peak_reserved_bytes: int | None = None
    memory_kind: str = Field(description="cuda (allocated and reserved) or cpu_max_rss (resident set)")


class ResumeRecord(_Record):
    """The run continues from a checkpoint: records of later epochs printed before this one are superseded."""

    kind: Literal["resume"] = "resume"
    epoch: int = Field(description="the last epoch the checkpoint holds")


class RequestRecord(_Record):
    """Inference: one prompt's generation (a prompt shares its batch's timings)."""

    kind: Literal["request"] = "request"
    index: int = Field(description="the prompt's line in the prompts file, from 0")
    prompt_tokens: int
    new_tokens: int
    ttft_s: float = Field(description="time to first token: from the batch's start to its first new token")
    tokens_per_s: float = Field(description="this prompt's new tokens over its batch's generation time")


class InferenceRecord(_Record):
    """Inference: the figures of the whole generation, once it is over (memory per rank in memory records)."""

    kind: Literal["inference"] = "inference"
    tp: int = Field(description="tensor-parallel degree (1: a single process)")
    compile: bool
    precision: str
    batch_size: int
    requests: int = Field(description="prompts generated for")
    new_tokens: int = Field(description="tokens generated over all prompts")
    load_time_s: float = Field(description="building the model and loading (resharding) the checkpoint")
    compile_time_s: float | None = Field(default=None, description="compile on: the warm-up generation's time")
    ttft_s: float = Field(description="mean time to first token over the prompts")
    ttft_p50_s: float
    tokens_per_s: float = Field(description="aggregate: all new tokens over the whole generation time")
    request_tokens_per_s: float = Field(description="mean over the prompts of each one's tokens/s")
    latency_p50_s: float = Field(description="per-token latency (one decoding step), median")
    latency_p95_s: float
    generation_time_s: float
    peak_memory_bytes: int = Field(description="the largest peak over all ranks")
    memory_kind: str


class EndRecord(_Record):
    kind: Literal["end"] = "end"
    status: Literal["completed", "failed", "interrupted"]
    total_time_s: float
    error: str | None = None


class LegacyRecord(_Record):
    """A course script's `[METRIC] key=value ...` line that names no epoch."""

    kind: Literal["legacy"] = "legacy"
    values: dict[str, float | str]


MetricRecord = Annotated[
    StartRecord
    | EpochRecord
    | StepRecord
    | MemoryRecord
    | ResumeRecord
    | RequestRecord
    | InferenceRecord
    | EndRecord
    | LegacyRecord,
    Field(discriminator="kind"),
]
# What the worker prints (legacy records only come from course scripts' logs).
WorkerRecord = (
    StartRecord | EpochRecord | StepRecord | MemoryRecord | ResumeRecord | RequestRecord | InferenceRecord | EndRecord
)
_record_adapter: TypeAdapter[MetricRecord] = TypeAdapter(MetricRecord)


class MetricParseError(ValueError):
    """A line carries the metric prefix but no valid record."""


def format_record(record: WorkerRecord) -> str:
    """One stdout line for a record: the prefix, then compact JSON."""
    return f"{METRIC_PREFIX} {record.model_dump_json(exclude_none=True)}"


# Names course scripts use for the epoch fields, mapped to ours.
_LEGACY_KEYS = {
    "loss": "train_loss",
    "train_loss": "train_loss",
    "val_loss": "val_loss",
    "val_acc": "val_accuracy",
    "val_accuracy": "val_accuracy",
    "accuracy": "val_accuracy",
    "time": "epoch_time_s",
    "epoch_time": "epoch_time_s",
    "epoch_time_s": "epoch_time_s",
    "throughput": "samples_per_s",
    "samples_per_sec": "samples_per_s",
    "samples_per_s": "samples_per_s",
    "peak_memory_bytes": "peak_memory_bytes",
}


def _legacy_value(text: str) -> float | str:
    try:
        return float(text)
    except ValueError:
        return text


def _parse_legacy(body: str) -> MetricRecord:
    values: dict[str, float | str] = {}
    for token in body.split():
        key, sep, value = token.partition("=")
        if not sep or not key:
            raise MetricParseError(f"legacy metric token {token[:40]!r} is not key=value")
        values[key] = _legacy_value(value)
    if not values:
        raise MetricParseError("empty metric line")
    if "epoch" not in values:
        return LegacyRecord(values=values)
    fields: dict[str, Any] = {"epoch": values.pop("epoch")}
    for key in list(values):
        if key in _LEGACY_KEYS:
            fields[_LEGACY_KEYS[key]] = values.pop(key)
    return _validate({"kind": "epoch", **fields, **values})


def _validate(data: Any) -> MetricRecord:
    try:
        return _record_adapter.validate_python(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "record"
        raise MetricParseError(f"{where}: {first['msg']}") from None


def parse_metric_line(line: str) -> MetricRecord | None:
    """The record on one output line; None for a line that is not a metric line.

    Raises MetricParseError for a line with the prefix whose record is broken.
    """
    stripped = line.strip()
    if not stripped.startswith(METRIC_PREFIX):
        return None
    body = stripped[len(METRIC_PREFIX) :].strip()
    if not body.startswith("{"):
        return _parse_legacy(body)
    try:
        data = json.loads(body)
    except json.JSONDecodeError as exc:
        raise MetricParseError(f"invalid JSON: {exc.msg} at column {exc.colno}") from None
    if not isinstance(data, dict):
        raise MetricParseError("the record is not a JSON object")
    if data.get("v") != RECORD_VERSION:
        raise MetricParseError(f"unsupported record version {data.get('v')!r}; this server reads v{RECORD_VERSION}")
    return _validate(data)
