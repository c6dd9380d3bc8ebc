"""Per-run figures side by side, with speed-up and efficiency against each series' smallest run."""

from __future__ import annotations

import csv
import io
import json
from collections import defaultdict
from collections.abc import Collection

from sqlmodel import Session, col, or_, select

from contract.spec import RunSpec
from server.errors import Invalid
from server.models import CompareRow, EpochPoint, Experiment, Metric, Run, RunSummary

# A scaling series holds every spec field fixed but these.
_SCALED_FIELDS = frozenset({"gpus", "nodes"})


def compare_rows(
    session: Session, *, experiment_ids: Collection[str] = (), run_ids: Collection[str] = ()
) -> list[CompareRow]:
    """The runs of these experiments and these runs, with scaling figures computed within the selection."""
    pairs = session.exec(
        select(Run, RunSummary)
        .join(RunSummary, RunSummary.run_id == Run.id, isouter=True)  # type: ignore[arg-type]
        .where(or_(col(Run.experiment_id).in_(experiment_ids), col(Run.id).in_(run_ids)))
        .order_by(col(Run.created_at), col(Run.position))
    ).all()
    series: dict[str, list[CompareRow]] = defaultdict(list)
    specs: dict[str, RunSpec] = {}
    rows = []
    for run, summary in pairs:
        spec = RunSpec.model_validate(run.spec)
        key = spec.model_dump_json(exclude=set(_SCALED_FIELDS))
        specs.setdefault(key, spec)
        row = _row(run, spec, summary or RunSummary(run_id=run.id))
        series[key].append(row)
        rows.append(row)
    names = _series_names(specs)
    for key, members in series.items():
        for row in members:
            row.series = names[key]
        _add_scaling(members)
    return rows


def _series_names(specs: dict[str, RunSpec]) -> dict[str, str]:
    """Name each series by its strategy and the fields, other than scaled ones, whose values differ between series."""
    dumps = {key: spec.model_dump(mode="json") for key, spec in specs.items()}
    fields = {name for dump in dumps.values() for name in dump} - _SCALED_FIELDS - {"strategy"}
    varying = sorted(name for name in fields if len({json.dumps(d.get(name)) for d in dumps.values()}) > 1)
    return {
        key: ", ".join([dump["strategy"], *(f"{name}={json.dumps(dump.get(name))}" for name in varying)]).replace(
            '"', ""
        )
        for key, dump in dumps.items()
    }


def epoch_histories(session: Session, run_ids: Collection[str]) -> dict[str, list[EpochPoint]]:
    """Each run's epochs that count, in order: ingestion decided which (after starts and resumes) as it stored them."""
    histories: dict[str, list[EpochPoint]] = {run_id: [] for run_id in run_ids}
    records = session.exec(
        select(Metric.run_id, Metric.record)
        .where(col(Metric.run_id).in_(run_ids), Metric.kind == "epoch", col(Metric.counts))
        .order_by(col(Metric.run_id), col(Metric.epoch))
    )
    for run_id, record in records:
        histories[run_id].append(EpochPoint.model_validate(record))
    return histories


def _row(run: Run, spec: RunSpec, summary: RunSummary) -> CompareRow:
    return CompareRow(
        run_id=run.id,
        experiment_id=run.experiment_id,
        series=spec.strategy,
        state=run.state,
        ingest_done=run.ingest_done,
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


# A dashboard of more runs than this is unreadable, and the answer would grow without bound.
MAX_RUNS = 500
MAX_EXPERIMENTS = 50


def selected_rows(session: Session, experiment_ids: Collection[str], run_ids: Collection[str]) -> list[CompareRow]:
    """The comparison rows of a selection that names only existing runs and experiments, at most MAX_RUNS of them."""
    if not experiment_ids and not run_ids:
        raise Invalid([(("query", "run_id"), "name at least one run_id or experiment_id")])
    _require_all(session, Run, run_ids, "run_id")
    _require_all(session, Experiment, experiment_ids, "experiment_id")
    rows = compare_rows(session, experiment_ids=experiment_ids, run_ids=run_ids)
    if len(rows) > MAX_RUNS:
        too_many = f"the selection holds {len(rows)} runs; compare at most {MAX_RUNS}"
        raise Invalid([(("query", "experiment_id"), too_many)])
    return rows


def _require_all(session: Session, table: type[Run] | type[Experiment], ids: Collection[str], field: str) -> None:
    """A selection naming what does not exist is refused, naming the parameter and the first few unknown ids."""
    found = set(session.exec(select(table.id).where(col(table.id).in_(ids))).all())
    missing = sorted(set(ids) - found)
    if missing:
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        what = field.removesuffix("_id")
        raise Invalid([(("query", field), f"no {what} {', '.join(map(repr, missing[:3]))}{more}")])
