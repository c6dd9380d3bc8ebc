"""Database tables and the API's request and response models, one family per entity."""

from __future__ import annotations

import re
import secrets
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator
from sqlalchemy import JSON, Column, Index, UniqueConstraint
from sqlmodel import Field as SQLField
from sqlmodel import SQLModel, col

from contract.records import MetricRecord
from contract.spec import RunSpec, Strategy
from contract.states import FINAL_STATES, RunState
from server.profiles import ClusterProfile
from server.services.estimate import MemoryEstimate
from server.services.sweep import MAX_RUNS, SpecBase, SpecGrid
from server.timelimit import TimeLimit


def new_id() -> str:
    """Server-made ids: short enough to type, random enough not to guess or collide."""
    return secrets.token_hex(5)


def utcnow() -> datetime:
    return datetime.now(UTC)


# States the scheduler is asked about each monitor cycle.
LIVE_STATES = frozenset({RunState.submitted, RunState.pending, RunState.running})
# Final states a run can be submitted again from (a completed run is cloned instead).
RESUBMITTABLE_STATES = FINAL_STATES - {RunState.completed}
# Final states Slurm may still take back by requeueing the job (--requeue): the monitor keeps asking a while.
REQUEUEABLE_STATES = frozenset({RunState.preempted, RunState.node_fail})


# ---- users -------------------------------------------------------------------------------------------------------

# A user name: what Slurm and Unix accept as a login, so that it can name an account too.
USER_NAME = r"^[a-z_][a-z0-9_.-]{0,31}$"
# The user requests act as where authentication is turned off (a single-user server on loopback).
LOCAL_USER = "local"


class UserBase(SQLModel):
    name: str = SQLField(primary_key=True, max_length=32)
    is_admin: bool = False
    slurm_account: str | None = SQLField(default=None, max_length=64, description="sbatch --account of the user's runs")
    max_concurrent_runs: int | None = SQLField(default=None, ge=0, description="runs not yet ended, at most")
    max_gpus_in_use: int | None = SQLField(default=None, ge=0, description="GPUs of runs not yet ended, at most")
    max_runs_per_day: int | None = SQLField(default=None, ge=0, description="runs created in any 24 hours, at most")


class User(UserBase, table=True):
    created_at: datetime = SQLField(default_factory=utcnow)
    revoked_at: datetime | None = None
    password_hash: str | None = None


class UserPublic(UserBase):
    created_at: datetime
    revoked_at: datetime | None


class ApiToken(SQLModel, table=True):
    """A bearer token: only its SHA-256 is kept; the token itself is shown once, when it is made."""

    id: str = SQLField(default_factory=new_id, primary_key=True, max_length=16)
    user_name: str = SQLField(foreign_key="user.name", index=True)
    token_hash: str = SQLField(unique=True, max_length=64)
    created_at: datetime = SQLField(default_factory=utcnow)
    last_used_at: datetime | None = None
    revoked_at: datetime | None = None


class WebSession(SQLModel, table=True):
    """A signed-in browser: the cookie's SHA-256, and the CSRF token its pages send back."""

    id_hash: str = SQLField(primary_key=True, max_length=64)
    user_name: str = SQLField(foreign_key="user.name", index=True)
    csrf_token: str = SQLField(max_length=64)
    created_at: datetime = SQLField(default_factory=utcnow)
    expires_at: datetime


# ---- cluster profiles --------------------------------------------------------------------------------------------


class ProfilesPublic(BaseModel):
    data: list[ClusterProfile]
    count: int
    default: str = Field(description="the profile of runs that name none")


# ---- experiments -------------------------------------------------------------------------------------------------

OptionValue = Annotated[str, StringConstraints(max_length=64)] | Annotated[int, Field(ge=-(10**9), le=10**9)]


class Resources(BaseModel):
    model_config = ConfigDict(extra="forbid")

    profile: str | None = Field(
        default=None, max_length=64, description="cluster profile (GET /api/profiles); default: the server's"
    )
    partition: str | None = Field(
        default=None, max_length=64, description="a partition of the profile; default: the profile's"
    )
    nodes: Annotated[int, Field(ge=1, le=1024)] = 1
    time_limit: TimeLimit = Field(default="00:10:00", description="Slurm wall-time limit, [D-]HH:MM:SS")
    sbatch_options: dict[Annotated[str, StringConstraints(max_length=40)], OptionValue] = Field(
        default={}, max_length=32, description="more sbatch options, among those the profile allows"
    )
    max_concurrent: int | None = Field(
        default=None,
        ge=1,
        le=MAX_RUNS,
        description="at most this many runs of the experiment in Slurm at once; the rest wait in scalelab",
    )


# Characters that would let a name hide or disguise itself on the dashboard: control characters, and the
# bidirectional overrides that reorder what follows them.
_UNSHOWABLE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def showable(name: str) -> str:
    if _UNSHOWABLE.search(name):
        raise ValueError("a name may not hold control characters or bidirectional overrides")
    return name


MAX_PROMPTS = 256
MAX_PROMPTS_CHARS = 64 * 1024
MAX_PROMPT_CHARS = 4096


class InferenceInput(BaseModel):
    """What an inference experiment generates from: a trained checkpoint, and the prompts."""

    model_config = ConfigDict(extra="forbid")

    checkpoint_run: str | None = Field(
        default=None,
        pattern=r"^[0-9a-f]{1,16}$",
        description="the id of a completed gpt training run of scalelab (trained on text, with a checkpoint)",
    )
    checkpoint_path: str | None = Field(
        default=None,
        max_length=1024,
        pattern=r"^/[A-Za-z0-9_./+-]*$",
        description="or: the directory of such a run, under one of the cluster profile's checkpoint_roots",
    )
    prompts: str = Field(
        default="",
        max_length=MAX_PROMPTS_CHARS,
        description=f"the prompts file's text: one prompt per line (blank lines are skipped), "
        f"at most {MAX_PROMPTS} prompts of {MAX_PROMPT_CHARS} characters",
    )

    @field_validator("prompts")
    @classmethod
    def _prompts_fit(cls, prompts: str) -> str:
        lines = [line for line in prompts.splitlines() if line.strip()]
        if len(lines) > MAX_PROMPTS:
            raise ValueError(f"the prompts file holds {len(lines)} prompts; at most {MAX_PROMPTS} fit one experiment")
        for number, line in enumerate(lines, start=1):
            if len(line) > MAX_PROMPT_CHARS:
                raise ValueError(f"prompt {number} is longer than {MAX_PROMPT_CHARS} characters")
            if "\x00" in line:
                raise ValueError(f"prompt {number} holds a NUL character")
        return prompts

    def prompt_lines(self) -> str:
        """The prompts file as the worker reads it: one prompt per line."""
        return "".join(line + "\n" for line in self.prompts.splitlines() if line.strip())


class ExperimentBase(SQLModel):
    name: str = SQLField(min_length=1, max_length=200, description="free text, shown on the dashboard")

    @field_validator("name")
    @classmethod
    def _showable(cls, name: str) -> str:
        return showable(name)


class ExperimentCreate(ExperimentBase):
    """An experiment: fixed spec fields in `base`, and lists of values to sweep in `grid`."""

    model_config = ConfigDict(extra="forbid")  # type: ignore[assignment]

    base: SpecBase = Field(
        default_factory=SpecBase, description="run spec fields shared by every run; unset ones take their defaults"
    )
    grid: SpecGrid = Field(
        default_factory=SpecGrid,
        description="run spec field -> values to sweep; one run per combination",
        examples=[{"strategy": ["ddp"], "gpus": [1, 2, 4]}],
    )
    resources: Resources = Field(default_factory=Resources)
    on_invalid: Literal["refuse", "skip"] = Field(
        default="refuse",
        description="grid combinations that cannot run: refuse the experiment (422 naming each), "
        "or skip them and submit the rest (the response lists what was skipped and why)",
    )
    inference: InferenceInput | None = Field(
        default=None, description="kind inference: the checkpoint to load and the prompts to generate for"
    )


class ExperimentChanges(BaseModel):
    """What to change in a cloned experiment's request; whatever is not given stays as it was."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(default=None, min_length=1, max_length=200)
    base: dict[Annotated[str, StringConstraints(max_length=64)], Any] = Field(
        default={}, max_length=64, description="spec fields to set; null resets one to its default"
    )
    grid: dict[Annotated[str, StringConstraints(max_length=64)], Any] = Field(
        default={}, max_length=64, description="fields to sweep, with their values; null stops sweeping one"
    )
    resources: dict[Annotated[str, StringConstraints(max_length=64)], Any] = Field(
        default={}, max_length=16, description="resources to change; null resets one to its default"
    )
    on_invalid: Literal["refuse", "skip"] | None = None
    inference: dict[Annotated[str, StringConstraints(max_length=64)], Any] = Field(
        default={}, max_length=8, description="inference settings to change; null resets one"
    )

    @field_validator("name")
    @classmethod
    def _showable(cls, name: str | None) -> str | None:
        return None if name is None else showable(name)

    def apply(self, request: dict[str, Any]) -> dict[str, Any]:
        """The original request with these changes laid over it (to be validated as a new request)."""
        merged = {**request, "name": self.name or request.get("name")}
        for section in ("base", "grid", "resources", "inference"):
            target = dict(request.get(section) or {})
            for key, value in getattr(self, section).items():
                if value is None:
                    target.pop(key, None)
                else:
                    target[key] = value
            merged[section] = target
        if not merged["inference"]:
            del merged["inference"]  # a training experiment's, or one whose inference settings were all reset
        if self.on_invalid is not None:
            merged["on_invalid"] = self.on_invalid
        return merged


class Experiment(ExperimentBase, table=True):
    id: str = SQLField(default_factory=new_id, primary_key=True, max_length=16)
    owner: str | None = SQLField(default=None, foreign_key="user.name", index=True, description="who submitted it")
    # Indexed: lists are newest first, and without it each page of a list sorted the whole table.
    created_at: datetime = SQLField(default_factory=utcnow, index=True)
    max_concurrent: int | None = SQLField(default=None, description="runs in the scheduler at once, at most")
    request: dict[str, Any] = SQLField(sa_column=Column(JSON, nullable=False), description="the request as submitted")


class ExperimentPublic(ExperimentBase):
    id: str
    owner: str | None = Field(description="who submitted it (none: from before there were users)")
    created_at: datetime
    request: dict[str, Any]
    run_count: int
    states: dict[str, int] = Field(description="how many runs are in each state")


class ExperimentsPublic(BaseModel):
    data: list[ExperimentPublic]
    count: int


# ---- runs --------------------------------------------------------------------------------------------------------


class RunBase(SQLModel):
    experiment_id: str = SQLField(foreign_key="experiment.id", index=True)
    owner: str | None = SQLField(
        default=None, foreign_key="user.name", index=True, description="who submitted it (none: from before users)"
    )
    position: int = SQLField(description="index of the run in the experiment's grid")
    state: RunState = SQLField(default=RunState.created, index=True)
    job_id: str | None = SQLField(default=None, index=True, description="the scheduler's job id")
    scheduler: str = SQLField(description="slurm, local, or import (a log of a run made outside scalelab)")
    profile: str | None = SQLField(default=None, description="the cluster profile it was rendered for")
    attempt: int = SQLField(default=0, description="times it was submitted (resubmissions count)")
    waiting: bool = SQLField(
        default=False, index=True, description="held back by the experiment's concurrency limit until a slot frees"
    )
    scheduler_state: str | None = SQLField(default=None, description="the scheduler's state, verbatim")
    scheduler_reason: str | None = SQLField(default=None, description="why the job waits or ended, verbatim")
    exit_code: str | None = SQLField(default=None, description="Slurm's exit:signal")
    message: str | None = SQLField(default=None, description="what went wrong, for the user")
    run_dir: str
    created_at: datetime = SQLField(default_factory=utcnow)
    submitted_at: datetime | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    # Provenance, from the worker's latest start record: what "run again" repeats.
    image: str | None = SQLField(default=None, description="the container image the run ran in, as named")
    image_digest: str | None = SQLField(default=None, description="that image's digest (sha256:...)")
    worker_version: str | None = SQLField(default=None, description="the scalelab worker's version")
    torch_version: str | None = None
    source_revision: str | None = SQLField(default=None, description="the source revision the image was built from")
    rerun_of: str | None = SQLField(default=None, description="the run this one repeats, on the same image")


class Run(RunBase, table=True):
    id: str = SQLField(default_factory=new_id, primary_key=True, max_length=16)
    spec: dict[str, Any] = SQLField(sa_column=Column(JSON, nullable=False))
    # Ingestion bookkeeping: where the next unread byte of the output file is, and whether reading is over.
    log_offset: int = 0
    ingest_done: bool = False
    parse_errors: int = 0


# The runs page and GET /api/runs list runs newest first in grid order: read in index order, the first page of
# 10,000 runs costs 100 row reads instead of a scan and sort of every run (46 ms to 2.5 ms; migration 0005).
Index("ix_run_listing", col(Run.created_at).desc(), col(Run.position))


class RunPublic(RunBase):
    id: str
    spec: dict[str, Any]
    parse_errors: int
    ingest_done: bool = Field(description="the run has ended and all its output has been read: its metrics are final")


class RunsPublic(BaseModel):
    data: list[RunPublic]
    count: int


class SkippedRun(BaseModel):
    combination: dict[str, Any] = Field(description="the grid values of the combination")
    reason: str


class ExperimentCreated(ExperimentPublic):
    runs: list[RunPublic]
    skipped: list[SkippedRun] = Field(default=[], description="combinations left out (on_invalid: skip)")


class RunEstimate(BaseModel):
    index: int = Field(description="the run's position in `runs`")
    estimate: MemoryEstimate | None = Field(description="memory per GPU; none when the worker would refuse the run")
    warning: str | None = Field(
        description="the estimate exceeds the partition's GPU memory, or why no estimate could be made"
    )


class ExperimentPreview(BaseModel):
    name: str
    runs: list[RunSpec] = Field(description="the run specs the grid expands into, in submission order")
    count: int
    skipped: list[SkippedRun] = Field(default=[], description="combinations left out (on_invalid: skip)")
    estimates: list[RunEstimate] = Field(
        default=[], description="memory per GPU of each run: parameters, gradients, optimizer state, activations"
    )
    index: int = Field(description="which run's batch script `script` is")
    script: str = Field(description="that run's batch script; RUN_ID stands for the id its run would get")


class RunEventKind(StrEnum):
    submitted = "submitted"
    submit_failed = "submit_failed"
    state = "state"
    requeued = "requeued"
    cancel_requested = "cancel_requested"
    resubmitted = "resubmitted"
    reconciled = "reconciled"


class RunEventBase(SQLModel):
    at: datetime = SQLField(default_factory=utcnow)
    kind: RunEventKind
    job_id: str | None = None
    state: RunState | None = None
    scheduler_state: str | None = None
    detail: str | None = SQLField(default=None, description="Slurm's reason or our message")


class RunEvent(RunEventBase, table=True):
    """The course of a run: each submission, state change, requeue and cancellation, for its history."""

    id: int | None = SQLField(default=None, primary_key=True)
    run_id: str = SQLField(foreign_key="run.id", index=True)


class RunEventsPublic(BaseModel):
    data: list[RunEventBase]
    count: int


class RunLog(BaseModel):
    run_id: str
    offset: int = Field(description="where this text starts in the output, in bytes")
    next_offset: int = Field(description="the offset to ask for next")
    size: int = Field(description="the output's size in bytes when it was read")
    text: str = Field(description="the output from offset, at most the requested size, cut at a character boundary")
    complete: bool = Field(description="the run has ended and the text reaches the end: nothing more will come")


# ---- imports -----------------------------------------------------------------------------------------------------

MAX_IMPORT_FILE_CHARS = 16 * 1024 * 1024
MAX_IMPORT_CHARS = 64 * 1024 * 1024  # all files together: one request is held in memory whole


class ImportFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(
        min_length=1,
        max_length=255,
        pattern=r"^[^/\x00-\x1f]+$",
        description="the log's file name, to name it in errors; never used as a path",
        examples=["run_4gpus.out"],
    )
    content: str = Field(max_length=MAX_IMPORT_FILE_CHARS, description="the log's text")


class ImportCreate(ExperimentBase):
    """Logs of runs made outside scalelab: one run per file, all imported or none."""

    model_config = ConfigDict(extra="forbid")  # type: ignore[assignment]

    files: list[ImportFile] = Field(min_length=1, max_length=MAX_RUNS)

    @field_validator("files")
    @classmethod
    def _files_fit(cls, files: list[ImportFile]) -> list[ImportFile]:
        seen: set[str] = set()
        for file in files:
            if file.name in seen:
                raise ValueError(f"two files are named {file.name!r}: each file names one run")
            seen.add(file.name)
        if sum(len(file.content) for file in files) > MAX_IMPORT_CHARS:
            raise ValueError(f"the files hold more than {MAX_IMPORT_CHARS // 2**20} MiB of text: import them in parts")
        return files


# ---- metrics -----------------------------------------------------------------------------------------------------


class Metric(SQLModel, table=True):
    """Every record a run printed (the history)."""

    __table_args__ = (UniqueConstraint("run_id", "offset"),)

    id: int | None = SQLField(default=None, primary_key=True)
    run_id: str = SQLField(foreign_key="run.id", index=True)
    # The byte offset of the line in the output file: unique per run, so a record can never be stored twice.
    offset: int
    kind: str
    epoch: int | None = None
    record: dict[str, Any] = SQLField(sa_column=Column(JSON, nullable=False))


class Generation(BaseModel):
    """One prompt and the text an inference run generated after it."""

    index: int = Field(description="the prompt's place among the prompts, from 0")
    prompt: str
    completion: str
    prompt_tokens: int = Field(description="tokens of the prompt the model saw (it keeps the last ones that fit)")
    new_tokens: int


class GenerationsPublic(BaseModel):
    run_id: str
    data: list[Generation]
    count: int
    complete: bool = Field(description="the run wrote its generations (they appear all at once, when it is done)")


class InferenceRow(BaseModel):
    """One inference run's figures, for comparing layouts and compile on/off."""

    run_id: str
    state: RunState
    strategy: Strategy
    tp: int
    compile: bool
    precision: str
    batch_size: int
    tokens_per_s: float | None = Field(description="aggregate over all prompts")
    request_tokens_per_s: float | None = Field(description="mean over the prompts")
    ttft_s: float | None = Field(description="mean time to first token")
    latency_p50_s: float | None = Field(description="per-token latency, median")
    latency_p95_s: float | None
    load_time_s: float | None
    compile_time_s: float | None
    peak_memory_bytes: int | None = Field(description="the largest over the ranks")
    memory_per_rank: list[int] = Field(description="each rank's peak memory in bytes, by rank")
    memory_kind: str | None


class InferencePublic(BaseModel):
    experiment_id: str
    data: list[InferenceRow]
    count: int


class MetricsPublic(BaseModel):
    data: list[MetricRecord]
    count: int


class RunSummary(SQLModel, table=True):
    """The latest figures of a run, kept current by ingestion (the summary beside the history)."""

    run_id: str = SQLField(foreign_key="run.id", primary_key=True)
    world_size: int | None = None
    device: str | None = None
    epochs_done: int = 0
    first_epoch_time_s: float | None = None
    epoch_time_sum_s: float = 0.0
    last_train_loss: float | None = None
    last_val_loss: float | None = None
    last_val_accuracy: float | None = None
    last_samples_per_s: float | None = None
    peak_memory_bytes: int | None = None
    total_time_s: float | None = None
    end_status: str | None = None

    @property
    def mean_epoch_time_s(self) -> float | None:
        """Mean over epochs after the first, which pays for warm-up; the first alone if it is the only one."""
        if self.epochs_done == 0 or self.first_epoch_time_s is None:
            return None
        if self.epochs_done == 1:
            return self.first_epoch_time_s
        return (self.epoch_time_sum_s - self.first_epoch_time_s) / (self.epochs_done - 1)


class CompareRow(BaseModel):
    run_id: str
    state: RunState
    strategy: Strategy
    gpus: int
    nodes: int
    global_batch_size: int
    epochs_done: int
    mean_epoch_time_s: float | None
    speedup: float | None = Field(description="against the timed run of the same series with the fewest GPUs")
    efficiency: float | None = Field(description="speed-up divided by the ratio of GPUs")
    final_train_loss: float | None
    final_val_loss: float | None
    final_val_accuracy: float | None
    samples_per_s: float | None
    peak_memory_bytes: int | None
    # Last, so that the CSV's first columns stay those that scripts of earlier versions read.
    experiment_id: str
    series: str = Field(
        description="the run's scaling series: its strategy and whatever else tells it apart from the other series"
    )
    ingest_done: bool = Field(description="the run has ended and all its output has been read: its figures are final")


class EpochPoint(BaseModel):
    """One epoch of a run's history, as its last print of that epoch gave it."""

    epoch: int
    train_loss: float
    val_loss: float | None
    val_accuracy: float | None
    epoch_time_s: float


class ComparePublic(BaseModel):
    experiment_id: str | None = Field(default=None, description="the experiment compared, if one was asked for alone")
    data: list[CompareRow]
    count: int
    histories: dict[str, list[EpochPoint]] | None = Field(
        default=None, description="run id -> its epochs in order, when asked for with history=true"
    )
