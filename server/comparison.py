"""Per-run figures side by side, with speed-up and efficiency against each series' smallest run."""

from __future__ import annotations

import csv
import io
from collections import defaultdict

from sqlmodel import Session, select

from server.models import CompareRow, Run, RunSummary
from worker.spec import RunSpec

# A scaling series holds every spec field fixed but these.
_SCALED_FIELDS = frozenset({"gpus", "nodes"})


def compare_rows(session: Session, experiment_id: str) -> list[CompareRow]:
    pairs = session.exec(
        select(Run, RunSummary)
        .join(RunSummary, RunSummary.run_id == Run.id, isouter=True)  # type: ignore[arg-type]
        .where(Run.experiment_id == experiment_id)
        .order_by(Run.position)  # type: ignore[arg-type]
    ).all()
    series: dict[str, list[CompareRow]] = defaultdict(list)
    rows = []
    for run, summary in pairs:
        spec = RunSpec.model_validate(run.spec)
        row = _row(run, spec, summary or RunSummary(run_id=run.id))
        series[spec.model_dump_json(exclude=set(_SCALED_FIELDS))].append(row)
        rows.append(row)
    for members in series.values():
        _add_scaling(members)
    return rows


def _row(run: Run, spec: RunSpec, summary: RunSummary) -> CompareRow:
    return CompareRow(
        run_id=run.id,
        state=run.state,
        strategy=spec.strategy,
        gpus=spec.gpus,
        nodes=spec.nodes,
        global_batch_size=spec.global_batch_size,
        epochs_done=summary.epochs_done,
        mean_epoch_time_s=summary.mean_epoch_time_s,
        speedup=None,
        efficiency=None,
        final_train_loss=summary.last_train_loss,
        final_val_loss=summary.last_val_loss,
        final_val_accuracy=summary.last_val_accuracy,
        samples_per_s=summary.last_samples_per_s,
        peak_memory_bytes=summary.peak_memory_bytes,
    )


def _add_scaling(series: list[CompareRow]) -> None:
    """Speed-up = the baseline's epoch time / this one's; the baseline is the timed run with the fewest GPUs."""
    timed = [(row, row.mean_epoch_time_s) for row in series if row.mean_epoch_time_s]
    if not timed:
        return
    baseline, baseline_time = min(timed, key=lambda pair: pair[0].gpus)
    for row, time_s in timed:
        row.speedup = baseline_time / time_s
        row.efficiency = row.speedup / (row.gpus / baseline.gpus)


def compare_csv(rows: list[CompareRow]) -> str:
    """The rows as CSV with a header of the field names; a missing figure is an empty cell."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(CompareRow.model_fields), lineterminator="\n")
    writer.writeheader()
    writer.writerows(row.model_dump(mode="json") for row in rows)
    return buffer.getvalue()
