"""Metric records: what the worker prints, one `[METRIC] {json}` line each, and how a line is read back.

The parser also reads the `[METRIC] key=value` lines that course scripts print, so old logs can be imported.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from contract import metrics
from contract.fabric import Collective, Tier, algorithm_bandwidth, bus_bandwidth

# Written once, in the module a user's program imports (it has the standard library only).
METRIC_PREFIX = metrics.PREFIX
RECORD_VERSION = metrics.VERSION


# What a memory figure measures, by the label its record carries in memory_kind (the dashboard shows these words).
MEMORY_MEASURES = {
    "cuda_allocated": "CUDA allocated: the most the tensors held on the GPU (torch.cuda.max_memory_allocated)",
    "cpu_tensors": "CPU tensors: the most the tensors held, over one sampled training step per epoch",
    "cpu_max_rss": "CPU max RSS: the process's peak resident set, the Python/torch runtime included",
}
# Workers before these labels said "cuda" for the CUDA allocator's figures.
_MEMORY_KIND_ALIASES = {"cuda": "cuda_allocated"}


def memory_measure(kind: str | None) -> str | None:
    """The words for a memory figure's label; None when the record did not say (a program's own figure)."""
    if kind is None:
        return None
    kind = _MEMORY_KIND_ALIASES.get(kind, kind)
    return MEMORY_MEASURES.get(kind, kind)


class _Record(BaseModel):
    # Newer workers may add fields; keep them rather than refuse the record.
    model_config = ConfigDict(extra="allow")

    v: Literal[1] = 1


class NodeHardware(BaseModel):
    """One host of a run: the cores its processes were given and the threads they ran."""

    model_config = ConfigDict(extra="allow")

    host: str
    ranks: list[int]
    physical_cores: int | None = Field(default=None, description="the node's distinct (physical id, core id) pairs")
    hardware_threads: int = Field(description="logical CPUs of the node (os.cpu_count)")
    cpus_given: int = Field(description="distinct CPUs in the union of these ranks' affinity masks")
    affinity: str = Field(description='that union as a range list, e.g. "0-3,8"')
    intra_op_threads: int = Field(
        description="the most torch intra-op threads any of these ranks ran; a program's, from its batch script: "
        "the threads OMP_NUM_THREADS gives each process (or, unset, the CPUs it may run on)"
    )
    gpu_model: str | None = None
    cpus_allocated: int | None = Field(
        default=None, description="the CPUs Slurm allocated the job on this host (SLURM_CPUS_ON_NODE)"
    )

    @property
    def oversubscribed(self) -> bool:
        """More threads than the CPUs given: the figures measure contention for cores, not the code."""
        return len(self.ranks) * self.intra_op_threads > self.cpus_given


class StartRecord(_Record):
    # A user's program is given one from its spec by its batch script, which cannot know what the program will
    # run on: None is "the program did not say" (a start record the program prints itself replaces that one).
    kind: Literal["start"] = "start"
    world_size: int
    nodes: int
    device: str | None = None
    backend: str | None = None
    strategy: str
    torch_version: str | None = None
    hostname: str | None = None
    parameters: int | None = Field(default=None, description="trainable parameters of the whole model")
    precision: str | None = None
    # Provenance: what a later "run again" needs to repeat the run exactly.
    worker_version: str | None = None
    image: str | None = Field(default=None, max_length=512, description="the container image it ran in, as named")
    image_digest: str | None = Field(default=None, max_length=128, description="that image's digest, sha256:...")
    source_revision: str | None = Field(default=None, max_length=128, description="the source revision of the image")
    nodes_hardware: list[NodeHardware] | None = Field(default=None, description="one entry per host, from all ranks")

    def oversubscribed_hosts(self) -> list[str]:
        """The hosts whose processes ran more threads than the CPUs they were given (none when unknown)."""
        return [node.host for node in self.nodes_hardware or [] if node.oversubscribed]


def current_start(starts: Iterable[StartRecord]) -> StartRecord | None:
    """The run's start as it stands after its start records, in output order: the latest, with the node's hardware
    of the latest one before it where it tells none. A program's batch script prints a start record with the first
    node's hardware (server/render.py), and a program may then print its own, which knows its device and torch but
    rarely the cores it was given: that one must not erase what the script measured. Each attempt of a job (a
    requeue) prints the script's record again, so the hardware kept is always the current attempt's."""
    current: StartRecord | None = None
    for start in starts:
        if current is not None and start.nodes_hardware is None and current.nodes_hardware is not None:
            start = start.model_copy(update={"nodes_hardware": current.nodes_hardware})
        current = start
    return current


# A training sample's FLOPs and one device's TFLOP/s lie below these: a figure above is no model's (a sample of
# 10^18 FLOPs is a thousand GPT-3 sequences) or no device's (10^5 TFLOP/s is 100 PFLOP/s, a hundred of today's
# largest GPUs in one). A record claiming one is refused, as every figure a job prints is bounded.
MAX_FLOPS_PER_SAMPLE = 1e18
MAX_TFLOPS = 1e5


class ComputeRecord(_Record):
    """The compute probe at a run's start (worker/compute_probe.py): a dense matrix multiply at the run's precision
    on rank 0's device, at a few sizes; the best is the measured peak MFU is divided by."""

    kind: Literal["compute"] = "compute"
    device: str = Field(max_length=32, description="cpu or cuda")
    device_name: str | None = Field(
        default=None, max_length=200, description="torch.cuda.get_device_name(): what the datasheet table matches"
    )
    precision: str = Field(max_length=16)
    measured_tflops: float = Field(gt=0, le=MAX_TFLOPS, description="the best sustained TFLOP/s over the sizes")
    sizes: list[int] = Field(max_length=16, description="n of each n x n by n x n multiply tried")
    size_tflops: list[float] = Field(max_length=16, description="each size's sustained TFLOP/s")
    seconds: float = Field(ge=0, le=3600, description="what the probe took")
    operator_peak_tflops: float | None = Field(
        default=None, gt=0, le=MAX_TFLOPS, description="SCALELAB_PEAK_TFLOPS: the operator's figure for one device"
    )


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
        default=None, description="samples/s x model_flops_per_sample, all ranks together"
    )
    mfu: float | None = Field(
        default=None,
        description="model FLOP/s over the peak of all devices: SCALELAB_PEAK_TFLOPS where the operator sets it, else "
        "the compute probe's measured peak",
    )
    model_flops_per_sample: float | None = Field(
        default=None,
        ge=0,
        le=MAX_FLOPS_PER_SAMPLE,
        description="FLOPs one training sample costs the model (forward x 3, recomputation left out): MFU's numerator",
    )
    hardware_flops_per_sample: float | None = Field(
        default=None,
        ge=0,
        le=MAX_FLOPS_PER_SAMPLE,
        description="what the hardware computed per sample: the model's, plus the forward activation checkpointing "
        "recomputes (HFU's numerator)",
    )
    peak_memory_bytes: int | None = Field(
        default=None, description="the largest over all ranks of what a rank held (see memory_kind)"
    )
    memory_kind: str | None = Field(default=None, description="what peak_memory_bytes measures: a MEMORY_MEASURES key")
    peak_rss_bytes: int | None = Field(default=None, description="the largest peak resident set over all ranks")
    step_time_s: float | None = Field(default=None, description="mean over ranks of each rank's mean optimizer step")
    step_time_fastest_s: float | None = Field(default=None, description="the fastest rank's mean step")
    step_time_slowest_s: float | None = Field(default=None, description="the slowest rank's mean step")
    time_breakdown: dict[str, float] | None = Field(
        default=None, description="seconds per step by part (data, compute, optimizer, comm), mean over ranks"
    )


class StepRecord(_Record):
    """Every `step_log_every` optimizer steps, for curves finer than an epoch."""

    kind: Literal["step"] = "step"
    epoch: int
    step: int = Field(description="optimizer steps since the start of the run")
    train_loss: float
    lr: float | None = Field(default=None, description="the learning rate this step took (the built-in worker's)")


class MemoryRecord(_Record):
    """One rank's peak memory in an epoch, or (epoch 0) over an inference run; printed by rank 0 for every rank."""

    kind: Literal["memory"] = "memory"
    epoch: int
    rank: int
    peak_allocated_bytes: int = Field(description="what the rank held at its peak, as memory_kind measures it")
    peak_reserved_bytes: int | None = Field(default=None, description="CUDA only: what its allocator reserved")
    memory_kind: str = Field(description="what peak_allocated_bytes measures: a MEMORY_MEASURES key")
    peak_rss_bytes: int | None = Field(default=None, description="the process's peak resident set (cpu_max_rss)")


class TimingRecord(_Record):
    """Where one rank's optimizer steps went in an epoch, seconds per step; printed by rank 0 for every rank.

    data, compute, optimizer and comm are disjoint and together make the step; comm_overlapped_s is
    communication hidden under compute, already inside compute_s.
    """

    kind: Literal["timing"] = "timing"
    epoch: int
    rank: int
    steps: int
    step_s: float = Field(description="this rank's mean wall time per optimizer step")
    data_s: float = Field(description="taking the batch: indexing, augmentation, moving")
    compute_s: float = Field(description="forward and backward, less the communication they waited for")
    optimizer_s: float = Field(description="the optimizer step, the grad scaler and zeroing the gradients")
    comm_s: float = Field(description="communication the rank waited for, not hidden under compute")
    comm_overlapped_s: float | None = Field(default=None, description="communication while the rank computed")
    method: str = Field(description="how communication was measured and what overlaps")


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
    memory_kind: str = Field(description="what peak_memory_bytes measures: a MEMORY_MEASURES key")
    peak_rss_bytes: int | None = Field(default=None, description="the largest peak resident set over all ranks")


class EndRecord(_Record):
    kind: Literal["end"] = "end"
    status: Literal["completed", "failed", "interrupted"]
    total_time_s: float
    error: str | None = None
    # Left out unless true, so that every other end record reads and is stored as before.
    stopped_at_target: bool | None = Field(
        default=None, description="true: completed at the target (stop_at_target), before the planned epochs"
    )
    target_epoch: int | None = Field(default=None, ge=1, description="stopped at the target: the epoch that reached it")


def _plain_name(name: str) -> str:
    if any(ord(char) < 32 or ord(char) == 127 for char in name):
        raise ValueError("a file name must not hold control characters")
    return name


# A file's name relative to the program's workdir, as the probe (contract/workdir_probe.py) writes it.
FileName = Annotated[str, Field(min_length=1, max_length=512), AfterValidator(_plain_name)]


class FileSeen(BaseModel):
    """One file of a program's workdir, as the batch script's probe saw it (never through a link)."""

    model_config = ConfigDict(extra="ignore")

    name: FileName
    bytes: int = Field(ge=0)
    sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$", description="none: beyond the probe's bounds")
    mtime_ns: int | None = Field(default=None, description="its modification time, as the file system keeps it")
    created: bool | None = Field(default=None, description="a written file: it was not there at the run's start")


class CodeRecord(_Record):
    """Which code a program's run started: printed by its batch script's probe before the launch."""

    kind: Literal["code"] = "code"
    script: FileSeen | None = Field(default=None, description="the file the command names (none: it names none)")
    script_error: str | None = Field(default=None, max_length=200)
    files: list[FileSeen] = Field(default=[], max_length=64, description="the workdir's top-level files, by name")
    files_more: int = Field(default=0, ge=0, description="top-level files beyond those, not hashed")
    git_revision: str | None = Field(default=None, pattern=r"^[0-9a-f]{40,64}$")
    git_dirty: bool | None = Field(default=None, description="the work tree differs from that revision")
    git: str | None = Field(default=None, max_length=200, description="why git could not tell")


class WorkdirRecord(_Record):
    """A program's shared workdir at its run's start (its newest files: what the run found) or end (the files
    created or changed since: what it wrote), printed by its batch script's probe."""

    kind: Literal["workdir"] = "workdir"
    phase: Literal["start", "end"]
    files: list[FileSeen] = Field(max_length=32)
    complete: bool = Field(description="the whole workdir was listed within the probe's bounds")


# A launch's clock, in Unix seconds, lies between these: a value outside is no clock's (a record claiming one is
# refused). Requeues are bounded by Slurm's MaxBatchRequeue (at most 1024), exit statuses by the shell's 0-255.
LAUNCH_AT_MIN, LAUNCH_AT_MAX = 946_684_800.0, 32_503_680_000.0  # 2000-01-01 and 3000-01-01
MAX_LAUNCH_ATTEMPT = 1024


class LaunchRecord(_Record):
    """One launch of the run's processes, as the batch script saw it: its start just before the launcher, and its
    end just after, with the launcher's exit status. Written by the script (for a program and for the worker alike),
    so it needs no cooperation: the wall time between the two is the program's, start-up included. A requeued job
    launches again (`attempt`: Slurm's restart count); the run's time is the sum of its launches."""

    kind: Literal["launch"] = "launch"
    event: Literal["start", "end"]
    at: float = Field(ge=LAUNCH_AT_MIN, le=LAUNCH_AT_MAX, description="when, in Unix seconds (the node's clock)")
    attempt: int = Field(default=0, ge=0, le=MAX_LAUNCH_ATTEMPT, description="the job's restart count: 0 first")
    exit_status: int | None = Field(default=None, ge=0, le=255, description="the end's: the launcher's exit status")

    @model_validator(mode="after")
    def _status_at_end(self) -> LaunchRecord:
        # An end says how the launch ended; a start cannot know it.
        if (self.event == "end") != (self.exit_status is not None):
            raise ValueError("exit_status: an end record carries one, a start record none")
        return self


# A fabric measurement's bounds: a message from 1 byte to 64 GiB, a collective of at most 8192 ranks (the most
# processes a run has), a time from a nanosecond to an hour. A figure outside is no measurement's.
FABRIC_MAX_BYTES = 64 * 2**30
FABRIC_MAX_RANKS = 8192
FABRIC_MIN_SECONDS, FABRIC_MAX_SECONDS = 1e-9, 3600.0
# How far a record's bandwidths may be from what its size and time give (rounding of the printed figures).
_FABRIC_TOLERANCE = 1e-6


class _FabricShape(_Record):
    """Where a fabric measurement ran: the tier, the ranks of the collective, the backend and the allocation."""

    tier: Tier
    ranks: int = Field(ge=1, le=FABRIC_MAX_RANKS, description="the processes taking part in the collective")
    backend: Literal["gloo", "nccl", "mpi", "ucc"] = Field(description="torch.distributed's backend")
    nodes: int = Field(ge=1, le=1024, description="the run's nodes")
    processes_per_node: int = Field(ge=1, le=FABRIC_MAX_RANKS)
    preflight: bool = Field(default=False, description="measured by a training run's pre-flight, not a probe run")


class FabricRecord(_FabricShape):
    """One collective at one message size, timed by the fabric probe (worker/probe.py): the median of its timed
    iterations, warm-up excluded, the slowest rank's. Bandwidths by nccl-tests' definitions (contract.fabric), which
    the record is checked against: a record whose figures do not follow from its size and time is refused."""

    kind: Literal["fabric"] = "fabric"
    collective: Collective
    nbytes: int = Field(
        ge=1, le=FABRIC_MAX_BYTES, description="the buffer's bytes as nccl-tests counts them (all-gather: the output)"
    )
    seconds: float = Field(ge=FABRIC_MIN_SECONDS, le=FABRIC_MAX_SECONDS, description="median time of one collective")
    iterations: int = Field(ge=1, le=10_000, description="timed iterations the median is of")
    algbw_bytes_per_s: float = Field(ge=0, description="algorithm bandwidth: nbytes / seconds")
    busbw_bytes_per_s: float = Field(ge=0, description="bus bandwidth: algbw x nccl-tests' factor")

    @model_validator(mode="after")
    def _follows(self) -> FabricRecord:
        algbw = algorithm_bandwidth(self.nbytes, self.seconds)
        busbw = bus_bandwidth(self.collective, self.ranks, self.nbytes, self.seconds)
        for name, printed, expected in (
            ("algbw", self.algbw_bytes_per_s, algbw),
            ("busbw", self.busbw_bytes_per_s, busbw),
        ):
            if not math.isclose(printed, expected, rel_tol=_FABRIC_TOLERANCE, abs_tol=1e-9):
                raise ValueError(f"{name}_bytes_per_s {printed:g} is not what nbytes and seconds give: {expected:g}")
        return self


class FabricFitRecord(_FabricShape):
    """One tier's latency and bandwidth, fitted (contract.fabric.fit_alpha_beta) from that tier's fabric records."""

    kind: Literal["fabric_fit"] = "fabric_fit"
    alpha_s: float = Field(ge=0, le=FABRIC_MAX_SECONDS, description="latency: seconds per collective")
    beta_bytes_per_s: float = Field(gt=0, le=1e15, description="bus bandwidth large messages reach")
    points: int = Field(ge=2, le=10_000, description="the measurements fitted")


class LegacyRecord(_Record):
    """A course script's `[METRIC] key=value ...` line that names no epoch."""

    kind: Literal["legacy"] = "legacy"
    values: dict[str, float | str]


MetricRecord = Annotated[
    StartRecord
    | EpochRecord
    | StepRecord
    | MemoryRecord
    | TimingRecord
    | ResumeRecord
    | RequestRecord
    | InferenceRecord
    | EndRecord
    | ComputeRecord
    | CodeRecord
    | WorkdirRecord
    | LaunchRecord
    | FabricRecord
    | FabricFitRecord
    | LegacyRecord,
    Field(discriminator="kind"),
]
# What the worker prints (legacy records only come from course scripts' logs).
WorkerRecord = (
    StartRecord
    | EpochRecord
    | StepRecord
    | MemoryRecord
    | TimingRecord
    | ResumeRecord
    | RequestRecord
    | InferenceRecord
    | EndRecord
    | LaunchRecord
    | FabricRecord
    | FabricFitRecord
    | ComputeRecord
)
_record_adapter: TypeAdapter[MetricRecord] = TypeAdapter(MetricRecord)


class MetricParseError(ValueError):
    """A line carries the metric prefix but no valid record."""


# ---- bounds of a record: whatever a job prints, what reaches the database is within these ---------------------------

# A record's JSON, in characters: the longest line reading takes (server/services/ingestion/reading.py) is as long.
MAX_RECORD_CHARS = 1024 * 1024
# Nesting of arrays and objects: a worker's record nests 4 deep (a start record's hosts' ranks).
MAX_DEPTH = 32
# One string (a key or a value), in characters, and one array's items or one object's keys.
MAX_STRING_CHARS = 64 * 1024
MAX_ITEMS = 64 * 1024
# Integers are stored in 64-bit columns (epochs, offsets, bytes): one beyond them could not be written.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# Figures of what the model learned, which a training that diverged makes NaN or infinite: kept as printed where the
# database can hold them (SQLite; PostgreSQL's json type cannot). Every other figure (times, rates, sizes) must be a
# finite number: it is summed, divided and charted.
NON_FINITE_FIGURES = frozenset({"train_loss", "val_loss", "val_accuracy", "val_perplexity"})


def _out_of_bounds(value: Any, keeps_non_finite: bool) -> str | None:
    """What puts a parsed JSON value beyond the bounds above, with where it is; None when nothing does. Walked with
    a stack, not recursion: the value's depth is what is being checked."""
    stack: list[tuple[Any, str, int]] = [(value, "record", 0)]
    while stack:
        item, where, depth = stack.pop()
        where = where if len(where) <= 80 else where[:77] + "..."
        if isinstance(item, bool) or item is None:
            continue
        if isinstance(item, int):
            if not INT64_MIN <= item <= INT64_MAX:
                return f"{where}: the integer is beyond 64 bits"
        elif isinstance(item, float):
            name = where.rpartition(".")[2]
            if not math.isfinite(item) and not (keeps_non_finite and name in _MAY_BE_NON_FINITE):
                return f"{where}: {item} is not a finite number"
        elif isinstance(item, str):
            if len(item) > MAX_STRING_CHARS:
                return f"{where}: a string longer than {MAX_STRING_CHARS} characters"
        elif isinstance(item, dict | list):
            if depth >= MAX_DEPTH:
                return f"{where}: nested more than {MAX_DEPTH} deep"
            if len(item) > MAX_ITEMS:
                return f"{where}: more than {MAX_ITEMS} items"
            if isinstance(item, dict):
                for key, member in item.items():
                    if len(key) > MAX_STRING_CHARS:
                        return f"{where}: a key longer than {MAX_STRING_CHARS} characters"
                    stack.append((member, f"{where}.{key[:40]}" if depth else key[:40], depth + 1))
            else:
                stack.extend((member, f"{where}[{index}]", depth + 1) for index, member in enumerate(item))
    return None


def out_of_bounds(value: Any, keeps_non_finite: bool = False) -> str | None:
    """What puts a JSON value (a record's, or a document that carries records: a scaling card) beyond the bounds
    above, with where it is; None when nothing does."""
    return _out_of_bounds(value, keeps_non_finite)


# A body these bytes cannot hold, so plainly within the bounds: shorter than any string may be, fewer brackets than
# the nesting allowed, no integer of 19 digits or more, and no non-finite figure (nor a word holding its letters).
_MAYBE_BEYOND = re.compile(rb"[0-9]{19}|nan|inf", re.IGNORECASE)


def plainly_bounded(body: bytes) -> bool:
    """Whether a record's JSON body cannot break the bounds whatever it holds: such a body (every line the worker
    prints) needs no walk over its parsed value. False says only that the walk must look."""
    return (
        len(body) <= MAX_STRING_CHARS
        and body.count(b"{") + body.count(b"[") <= MAX_DEPTH
        and _MAYBE_BEYOND.search(body) is None
    )


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


# Legacy names of the figures that may be non-finite, as course scripts print them.
_MAY_BE_NON_FINITE = NON_FINITE_FIGURES | {key for key, ours in _LEGACY_KEYS.items() if ours in NON_FINITE_FIGURES}


def _legacy_value(text: str) -> float | str:
    try:
        return float(text)
    except ValueError:
        return text


def _parse_legacy(body: str, keeps_non_finite: bool) -> MetricRecord:
    values: dict[str, float | str] = {}
    for token in body.split():
        key, sep, value = token.partition("=")
        if not sep or not key:
            raise MetricParseError(f"legacy metric token {token[:40]!r} is not key=value")
        values[key] = _legacy_value(value)
    if not values:
        raise MetricParseError("empty metric line")
    if "epoch" not in values:
        _check_bounds({"values": values}, keeps_non_finite)
        return LegacyRecord(values=values)
    fields: dict[str, Any] = {"epoch": values.pop("epoch")}
    for key in list(values):
        if key in _LEGACY_KEYS:
            fields[_LEGACY_KEYS[key]] = values.pop(key)
    record = _validate({"kind": "epoch", **fields, **values}, keeps_non_finite)
    # Validation made the epoch an integer of a number printed as a float (epoch=1e30): bounded again.
    _check_bounds(record.model_dump(), keeps_non_finite)
    return record


def _check_bounds(data: Any, keeps_non_finite: bool) -> None:
    problem = _out_of_bounds(data, keeps_non_finite)
    if problem is not None:
        raise MetricParseError(problem)


def _validate(data: Any, keeps_non_finite: bool) -> MetricRecord:
    _check_bounds(data, keeps_non_finite)
    try:
        return _record_adapter.validate_python(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "record"
        raise MetricParseError(f"{where}: {first['msg']}") from None


def parse_record_json(body: bytes) -> MetricRecord | None:
    """The record of a line's JSON body (what follows `[METRIC] `), parsed and validated in one pass, as a busy
    server reads most lines; None for anything else, whose reason parse_metric_line then gives: a body that is not
    plainly within the bounds included, which it walks."""
    if not plainly_bounded(body):
        return None
    try:
        record = _record_adapter.validate_json(body)
    except ValidationError:
        return None
    # The version must be printed, not defaulted: a record without it is refused, as parse_metric_line refuses it.
    return record if "v" in record.model_fields_set else None


def parse_metric_line(line: str, *, keeps_non_finite: bool = False) -> MetricRecord | None:
    """The record on one output line; None for a line that is not a metric line.

    Raises MetricParseError for a line with the prefix whose record is broken or beyond the bounds (non-finite
    figures, integers beyond 64 bits, nesting, lengths). `keeps_non_finite`: the record goes to a database that can
    hold a NaN or infinite figure of learning (NON_FINITE_FIGURES); otherwise no figure may be one.
    """
    stripped = line.strip()
    if not stripped.startswith(METRIC_PREFIX):
        return None
    body = stripped[len(METRIC_PREFIX) :].strip()
    if len(body) > MAX_RECORD_CHARS:
        raise MetricParseError(f"the record is longer than {MAX_RECORD_CHARS} characters")
    if not body.startswith("{"):
        return _parse_legacy(body, keeps_non_finite)
    try:
        data = json.loads(body)
    except json.JSONDecodeError as exc:
        raise MetricParseError(f"invalid JSON: {exc.msg} at column {exc.colno}") from None
    except RecursionError:
        raise MetricParseError(f"record: nested more than {MAX_DEPTH} deep") from None
    except ValueError as exc:  # an integer of more digits than Python converts
        raise MetricParseError(f"invalid JSON: {str(exc)[:120]}") from None
    if not isinstance(data, dict):
        raise MetricParseError("the record is not a JSON object")
    if data.get("v") != RECORD_VERSION:
        raise MetricParseError(f"unsupported record version {data.get('v')!r}; this server reads v{RECORD_VERSION}")
    return _validate(data, keeps_non_finite)
