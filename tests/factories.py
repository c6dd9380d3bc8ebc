"""Builders of requests, specs and rows for tests, with defaults a test overrides by keyword."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from sqlmodel import Session

from contract.records import EpochRecord, StartRecord, WorkerRecord, format_record
from contract.rundir import OUTPUT_FILE
from contract.spec import RunSpec
from contract.states import RunState
from server.models import Experiment, Run
from server.scheduler import Job, JobStatus, Scheduler
from server.services.ingestion.parsing import ingest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE_REQUEST = ROOT / "examples" / "experiment.json"


def experiment_request(**overrides: Any) -> dict[str, Any]:
    """The README's example request made quick (the MLP's own width and a batch of 64: the README's is sized for
    epochs long enough to time) and on 1, 2 and 4 processes, with top-level keys replaced. Its runs share the node,
    so that all are submitted at once: exclusive runs (the default) take turns on the local profile, which tests of
    isolation ask for."""
    request: dict[str, Any] = json.loads(EXAMPLE_REQUEST.read_text())
    del request["base"]["width"]
    request["base"]["global_batch_size"] = 64
    request["grid"]["gpus"] = [1, 2, 4]
    request["isolation"] = "shared"
    request.update(overrides)
    return request


def tiny_gpt_request() -> dict[str, Any]:
    """A gpt small enough to train in seconds on a CPU, that saves a checkpoint to generate from."""
    return {
        "name": "tiny gpt to generate from",
        "base": {
            "model": "gpt", "dataset": "text", "strategy": "single", "gpus": 1, "width": 32, "depth": 2,
            "heads": 2, "context": 32, "global_batch_size": 32, "steps_per_epoch": 40, "epochs": 1, "lr": 0.3,
            "checkpoint_every": 1,
        },
        "resources": {"time_limit": "00:10:00"},
    }  # fmt: skip


def spec(**overrides: Any) -> RunSpec:
    return RunSpec.model_validate({"epochs": 1, "gpus": 1, **overrides})


def experiment_row(session: Session, name: str = "exp", **overrides: Any) -> Experiment:
    experiment = Experiment(name=name, **{"request": {"name": name}, **overrides})
    session.add(experiment)
    session.commit()
    session.refresh(experiment)
    return experiment


def run_row(
    session: Session,
    experiment: Experiment,
    run_dir: Path,
    *,
    run_spec: RunSpec | None = None,
    state: RunState = RunState.submitted,
    position: int = 0,
    scheduler: str = "slurm",
    **overrides: Any,
) -> Run:
    run = Run(
        experiment_id=experiment.id,
        position=position,
        scheduler=scheduler,
        state=state,
        spec=(run_spec or spec()).model_dump(mode="json"),
        run_dir=str(run_dir),
        **overrides,
    )
    session.add(run)
    session.commit()
    session.refresh(run)
    return run


def batch_script(tmp_path: Path, body: str, tasks: int = 1, name: str | None = None) -> Path:
    """A small batch script for the scheduler tests: `body` under a five-minute limit, output in out.log; `name`:
    the job's name (a run's job is named after the run: the monitor tells its job apart by that name)."""
    path = tmp_path / "job.sbatch"
    named = f"#SBATCH --job-name={name}\n" if name else ""
    path.write_text(
        f"#!/bin/bash\n{named}#SBATCH --ntasks={tasks}\n#SBATCH --time=00:05:00\n#SBATCH --output=out.log\n{body}\n"
    )
    return path


def wait_final(scheduler: Scheduler, job_ids: list[str], timeout_s: float = 90) -> dict[str, JobStatus]:
    """Poll the real scheduler until every job has ended; their final statuses."""
    deadline = time.monotonic() + timeout_s
    statuses: dict[str, JobStatus] = {}
    while time.monotonic() < deadline:
        statuses = {job.job_id: status for job, status in scheduler.poll([Job(job_id) for job_id in job_ids]).items()}
        if len(statuses) == len(job_ids) and all(status.state.is_final for status in statuses.values()):
            return statuses
        time.sleep(0.5)
    raise AssertionError(f"jobs {job_ids} did not end within {timeout_s} s: {statuses}")


def course_log(gpus: int, *, epochs: int = 2, epoch_time_s: float = 4.0, strategy: str = "ddp") -> str:
    """The output of a course's training script: prose, and `[METRIC] key=value` lines."""
    lines = [
        f"Training MLP with {gpus} processes",
        f"[METRIC] gpus={gpus} world_size={gpus} strategy={strategy}",
    ]
    for epoch in range(1, epochs + 1):
        loss = 1.0 / (epoch + 1)
        lines.append(f"Epoch {epoch}/{epochs}: loss {loss:.3f}")
        lines.append(
            f"[METRIC] epoch={epoch} loss={loss:.4f} val_loss={loss * 1.1:.4f} val_acc={0.5 + epoch / 10:.3f} "
            f"time={epoch_time_s / gpus:.3f} throughput={1000 * gpus}"
        )
    lines.append("Done.")
    return "\n".join(lines) + "\n"


def start() -> StartRecord:
    return StartRecord(
        world_size=1, nodes=1, device="cpu", backend="gloo", strategy="ddp", torch_version="2", hostname="n1"
    )


def epoch(number: int, seconds: float, loss: float = 1.0, **fields: Any) -> EpochRecord:
    figures = {"val_loss": loss + 0.1, "val_accuracy": 0.5, **fields}
    return EpochRecord(epoch=number, train_loss=loss, epoch_time_s=seconds, **figures)


def printed_run(
    session: Session, experiment: Experiment, run_dir: Path, records: list[WorkerRecord], **spec_fields: Any
) -> Run:
    """A completed run whose output holds these records, ingested as the monitor would."""
    run_dir.mkdir(parents=True)
    (run_dir / OUTPUT_FILE).write_text("".join(format_record(record) + "\n" for record in records))
    run = run_row(session, experiment, run_dir, run_spec=spec(**spec_fields), state=RunState.completed)
    ingest(session, run)
    run.ingest_done = True
    session.add(run)
    session.commit()
    return run
