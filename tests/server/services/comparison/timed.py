"""Runs made for the comparison's tests: completed, ingested, with the epoch times a test needs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlmodel import Session

from contract.records import WorkerRecord
from server.models import CompareRow, Experiment, Run
from tests.factories import epoch, printed_run, start


def timed_run(
    session: Session,
    experiment: Experiment,
    run_dir: Path,
    gpus: int,
    times: list[float],
    loss: float = 1.0,
    epoch_fields: dict[str, Any] | None = None,
    **spec_fields: Any,
) -> Run:
    """A completed run whose epochs took these times (the first is warm-up) and ended on `loss`."""
    records: list[WorkerRecord] = [
        start(),
        *(epoch(n, t, loss, **(epoch_fields or {})) for n, t in enumerate(times, 1)),
    ]
    fields = {"gpus": gpus, "epochs": len(times), "strategy": "ddp", **spec_fields}
    return printed_run(session, experiment, run_dir, records, **fields)


def codes(row: CompareRow) -> set[str]:
    return {flag.code for flag in row.flags}
