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


class Model(StrEnum):
    mlp = "mlp"


class Dataset(StrEnum):
    synthetic = "synthetic"


class Strategy(StrEnum):
    single = "single"
    ddp = "ddp"


class Precision(StrEnum):
    fp32 = "fp32"


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
    epochs: Annotated[int, Field(ge=1, le=10_000)] = 2
    global_batch_size: Annotated[int, Field(ge=1, le=1_048_576, description="samples per step over all processes")] = 64
    lr: Annotated[float, Field(gt=0, le=10, description="learning rate")] = 0.05
    precision: Precision = Precision.fp32
    seed: Annotated[int, Field(ge=0, le=2**31 - 1)] = 0

    @model_validator(mode="after")
    def _degrees_fit(self) -> RunSpec:
        if self.gpus % self.nodes:
            raise ValueError(
                f"gpus ({self.gpus}) must be a multiple of nodes ({self.nodes}): every node runs as many processes"
            )
        if self.global_batch_size % self.gpus:
            raise ValueError(
                f"global_batch_size ({self.global_batch_size}) must be divisible by gpus ({self.gpus}): "
                "every process takes an equal share of each batch"
            )
        if self.strategy is Strategy.single and self.gpus != 1:
            raise ValueError(f"strategy 'single' runs one process, but gpus is {self.gpus}: use 'ddp' for more")
        return self

    @property
    def gpus_per_node(self) -> int:
        return self.gpus // self.nodes


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


class EpochRecord(_Record):
    kind: Literal["epoch"] = "epoch"
    epoch: int
    train_loss: float
    val_loss: float | None = None
    val_accuracy: float | None = None
    epoch_time_s: float
    samples_per_s: float | None = None
    peak_memory_bytes: int | None = Field(default=None, description="the largest peak over all ranks")
    memory_kind: str | None = Field(default=None, description="cuda_max_allocated or cpu_max_rss")


class EndRecord(_Record):
    kind: Literal["end"] = "end"
    status: Literal["completed", "failed"]
    total_time_s: float
    error: str | None = None


class LegacyRecord(_Record):
    """A course script's `[METRIC] key=value ...` line that names no epoch."""

    kind: Literal["legacy"] = "legacy"
    values: dict[str, float | str]


MetricRecord = Annotated[StartRecord | EpochRecord | EndRecord | LegacyRecord, Field(discriminator="kind")]
_record_adapter: TypeAdapter[MetricRecord] = TypeAdapter(MetricRecord)


class MetricParseError(ValueError):
    """A line carries the metric prefix but no valid record."""


def format_record(record: StartRecord | EpochRecord | EndRecord) -> str:
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
