"""A run: one combination of an experiment's grid, submitted as one job. Its table keeps the scheduler's view of
the job, the provenance the worker reported, and where ingestion stopped reading its output. Which states the
monitor and the submission code act on is the state machine's (server/runstate.py).
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, Field, computed_field
from sqlalchemy import JSON, Column, Index
from sqlmodel import AutoString, SQLModel, col
from sqlmodel import Field as SQLField

from contract.states import FailureKind, RunState
from server.models.common import BIG_INTEGER, new_id, utcnow

# Where a run came from: submitted by scalelab, or imported from the log of a run made elsewhere, which had no job
# and cannot run again. Kept apart from `scheduler`, the backend its job went to (migration 0013).
Origin = Literal["submitted", "imported"]
# The longest reason kept of a run's first unreadable line, and of why its reading stopped.
FIRST_PARSE_ERROR_CHARS = 500
INGEST_STOPPED_CHARS = 1000
FAILURE_DETAIL_CHARS = 2000
ORIGIN_DESCRIPTION = "where it came from: submitted by scalelab, or imported from the log of a run made elsewhere"


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
    nodes: str | None = SQLField(default=None, description="the nodes the job runs or ran on, as Slurm writes them")
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
    # An inference run submitted while the training run it reads had not ended (migration 0024;
    # server/services/dependencies.py): its job waits in Slurm for that run's job to complete.
    after_run: str | None = SQLField(
        default=None,
        index=True,
        max_length=16,
        description="the training run whose checkpoint this inference run reads, submitted before that run ended: "
        "its job waits in Slurm until the training completes, and ends if it does not",
    )
    after_job: str | None = SQLField(
        default=None, max_length=32, description="the job of after_run that this run's job waits for"
    )
    # Why it failed, once it ended without completing (migration 0017; server/services/failure_kinds.py).
    failure_kind: FailureKind | None = SQLField(
        default=None,
        index=True,
        sa_type=AutoString(length=32),  # text, as the migration makes it: a kind added later needs none
        description="why it did not complete, as a kind with a remedy",
    )
    failure_detail: str | None = SQLField(
        default=None,
        max_length=FAILURE_DETAIL_CHARS,
        description="the evidence for its failure kind and what to do: the message quoted, or which rank hung where",
    )
    # The hang watchdog (migration 0018; server/services/hangs.py).
    stalled_at: datetime | None = SQLField(
        default=None,
        description="when it was found stalled (no new record for longer than its bound) and its ranks were asked "
        "for their stacks; none: not stalled, or records came again since",
    )


class Run(RunBase, table=True):
    id: str = SQLField(default_factory=new_id, primary_key=True, max_length=16)
    spec: dict[str, Any] = SQLField(sa_column=Column(JSON, nullable=False))
    origin: str = SQLField(
        default="submitted",
        max_length=16,
        sa_column_kwargs={"server_default": "submitted"},
        description=ORIGIN_DESCRIPTION,
    )
    # The partition its script was rendered for (migration 0019; none: a run from before it, or imported): a fabric
    # probe's measurements are the partition's (server/services/fabric.py).
    partition: str | None = SQLField(default=None, max_length=64)
    # Ingestion bookkeeping: where the next unread byte of the output file is, and whether reading is over.
    log_offset: int = SQLField(default=0, sa_type=BIG_INTEGER)
    # Which file that offset is into ("device:inode"; None: none read yet), so that a job replacing its output is
    # seen; "refused" once reading stopped for good (server/services/ingestion/reading.py; migration 0014).
    output_file: str | None = SQLField(default=None, max_length=64)
    ingest_done: bool = False
    parse_errors: int = 0
    first_parse_error: str | None = SQLField(default=None, max_length=FIRST_PARSE_ERROR_CHARS)
    # Why reading its output stopped before its end (a limit reached, output that could not be stored): it is read
    # no further (migration 0015).
    ingest_stopped: str | None = SQLField(default=None, max_length=INGEST_STOPPED_CHARS)
    # Metric records stored of its output, against the per-run limit (SCALELAB_MAX_RECORDS_PER_RUN).
    records_read: int = SQLField(default=0, sa_type=BIG_INTEGER, sa_column_kwargs={"server_default": "0"})
    # When the monitor last stored new records of it, the latest few (seconds since the epoch, the server's clock):
    # its pace, which the hang watchdog's bound follows (server/services/stalls.py; migration 0018).
    record_arrivals: list[float] | None = SQLField(default=None, sa_column=Column(JSON, nullable=True))
    # Whether the stacks asked for at `stalled_at` were read and the verdict given (failure_detail).
    stall_judged: bool = False
    # Bumped by the database on every UPDATE of the row, whoever writes it (a trigger: migration 0012): what the
    # server's kept answers of a run are keyed by. Read it with a query: a loaded Run holds it as it was loaded.
    row_version: int = SQLField(default=0, sa_column_kwargs={"server_default": "0"})


# The runs page and GET /api/runs list runs newest first in grid order: read in index order, the first page of
# 10,000 runs costs 100 row reads instead of a scan and sort of every run (46 ms to 2.5 ms; migration 0005).
Index("ix_run_listing", col(Run.created_at).desc(), col(Run.position))


def waiting_for_training(state: RunState, scheduler_reason: str | None, after_run: str | None) -> str | None:
    """Why a run waits, in words, where it waits in Slurm for the training run it depends on (Slurm's reason
    "Dependency"; none yet, just submitted); None otherwise."""
    if after_run is None or state not in (RunState.submitted, RunState.pending):
        return None
    if scheduler_reason not in (None, "None", "Dependency"):
        return None
    return f"waiting for training run {after_run} to end"


class RunPublic(RunBase):
    id: str
    spec: dict[str, Any]
    origin: Origin = Field(default="submitted", description=ORIGIN_DESCRIPTION)
    parse_errors: int
    first_parse_error: str | None = Field(
        default=None, description="the first unreadable metric line: where it is in the output and what is wrong"
    )
    ingest_stopped: str | None = Field(
        default=None, description="why scalelab stopped reading its output before its end, and what to do"
    )
    ingest_done: bool = Field(description="the run has ended and all its output has been read: its metrics are final")

    @computed_field(  # type: ignore[prop-decorator]
        description="why it waits, in words, where it waits for the training run it reads (after_run) to end"
    )
    @property
    def waiting_for(self) -> str | None:
        return waiting_for_training(self.state, self.scheduler_reason, self.after_run)


class RunsPublic(BaseModel):
    data: list[RunPublic]
    count: int


class RunLog(BaseModel):
    run_id: str
    offset: int = Field(description="where this text starts in the output, in bytes")
    next_offset: int = Field(description="the offset to ask for next")
    size: int = Field(description="the output's size in bytes when it was read")
    text: str = Field(description="the output from offset, at most the requested size, cut at a character boundary")
    complete: bool = Field(description="the run has ended and the text reaches the end: nothing more will come")


class RankStacks(BaseModel):
    rank: int
    text: str | None = Field(
        description="its last dump of every thread's Python stack, innermost frame first (at most 64 KiB, plain "
        "text written by the job); null: it wrote none"
    )


class RunStacks(BaseModel):
    run_id: str
    stalled_at: datetime | None = Field(description="when it was found stalled; null: not stalled, or no longer")
    verdict: str | None = Field(description="which rank was not where the others were, once its stacks were read")
    ranks: list[RankStacks] = Field(description="every rank's stacks, read from its run directory now")


class CodeChange(StrEnum):
    """Whether a program's script is, now, the one a run of it started."""

    same = "same"
    changed = "changed"
    unknown = "unknown"


class RunCode(BaseModel):
    """Which code a program's run started, as its batch script's probe noted it, and whether its script is the same
    now (what a "run again" would start)."""

    run_id: str
    noted: bool = Field(description="the probe noted it: false for a run of the built-in worker, or where it could not")
    code: dict[str, Any] | None = Field(
        default=None, description="the probe's code record: the script's and top-level files' sha256, git's revision"
    )
    now: CodeChange = Field(description="whether the script the command names is the same now")
    summary: str = Field(description="which code ran, in a sentence")
    note: str = Field(description="whether running it again would start the same code, in a sentence")
