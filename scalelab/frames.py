"""The Python API's pandas DataFrames: each table's columns and their types, made from the client's views.

pandas is an optional extra (`pip install 'scalelab[notebook]'`): it is imported when a table is asked for, never
when scalelab is, and its absence is said in one sentence that names the extra.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

from client.schemas import CompareRowView, FlagView, RunView, ScalingView
from contract.states import RunState

if TYPE_CHECKING:
    import pandas as pd

MISSING_PANDAS = (
    "scalelab's DataFrames need pandas, which is not installed: pip install 'scalelab[notebook]' "
    "(from a clone of the repository: pip install -e '.[notebook]')"
)

# The types a column can have. Whole numbers that may be missing are pandas' nullable Int64, and so are truth values
# (boolean); a figure is float64, NaN where the server has none; text is pandas' string; a state is a category of
# RunState's values, in their order; a time is a UTC timestamp.
STATE = "state"
TIME = "datetime64[ns, UTC]"

RUNS: dict[str, str] = {
    "run_id": "string",
    "position": "int64",
    "state": STATE,
    "strategy": "string",
    "gpus": "Int64",
    "nodes": "Int64",
    "seed": "Int64",
    "job_id": "string",
    "attempt": "int64",
    "scheduler_state": "string",
    "exit_code": "string",
    "message": "string",
    "rerun_of": "string",
    "created_at": TIME,
    "started_at": TIME,
    "ended_at": TIME,
    "run_dir": "string",
}

COMPARE: dict[str, str] = {
    "run_id": "string",
    "state": STATE,
    "series": "string",
    "scaling": "string",
    "strategy": "string",
    "gpus": "int64",
    "nodes": "Int64",
    "seed": "Int64",
    "global_batch_size": "Int64",
    "epochs_done": "int64",
    "mean_epoch_time_s": "float64",
    "step_time_s": "float64",
    "run_time_s": "float64",
    "speedup": "float64",
    "efficiency": "float64",
    "baseline_gpus": "Int64",
    "final_train_loss": "float64",
    "final_val_loss": "float64",
    "final_val_accuracy": "float64",
    "samples_per_s": "float64",
    "peak_memory_bytes": "Int64",
    "point_mean_s": "float64",
    "point_ci_low_s": "float64",
    "point_ci_high_s": "float64",
    "point_n": "Int64",
    "target_reached": "boolean",
    "epochs_to_target": "Int64",
    "time_to_target_s": "float64",
    "ingest_done": "bool",
    "flags": "string",
}

SCALING: dict[str, str] = {
    "series": "string",
    "scaling": "string",
    "measure": "string",
    "gpus": "int64",
    "mean_s": "float64",
    "ci_low_s": "float64",
    "ci_high_s": "float64",
    "n": "int64",
    "speedup": "float64",
    "efficiency": "float64",
    "flags": "string",
    "advice": "string",
}


def pandas() -> ModuleType:
    """pandas, or an error that says which extra brings it."""
    try:
        return importlib.import_module("pandas")
    except ImportError as exc:
        raise ModuleNotFoundError(MISSING_PANDAS, name="pandas") from exc


def table(rows: Iterable[Mapping[str, Any]], columns: Mapping[str, str]) -> pd.DataFrame:
    """A DataFrame of `rows` with exactly `columns`, in their order, each of its type (an empty table too)."""
    pd = pandas()
    rows = list(rows)
    states = pd.CategoricalDtype([str(state) for state in RunState])

    def column(name: str, kind: str) -> Any:
        values = pd.Series([row.get(name) for row in rows], dtype="object")
        if kind == TIME:  # naive times are the server's UTC
            return pd.to_datetime(values, utc=True).astype(TIME)
        return values.astype(states if kind == STATE else kind)

    return pd.DataFrame({name: column(name, kind) for name, kind in columns.items()})


def flag_codes(flags: Sequence[FlagView]) -> str:
    """A row's flags as their codes, comma-separated ("" where none): the message of each is in the report."""
    return ",".join(flag.code for flag in flags)


def runs_table(runs: Sequence[RunView]) -> pd.DataFrame:
    rows = [
        {
            **run.model_dump(include=set(RUNS)),
            "run_id": run.id,
            "state": str(run.state),
            **{key: run.spec.get(key) for key in ("strategy", "gpus", "nodes", "seed")},
        }
        for run in sorted(runs, key=lambda run: run.position)
    ]
    return table(rows, RUNS)


def compare_table(rows: Sequence[CompareRowView]) -> pd.DataFrame:
    return table(
        (
            {**row.model_dump(include=set(COMPARE)), "state": str(row.state), "flags": flag_codes(row.flags)}
            for row in rows
        ),
        COMPARE,
    )


def scaling_table(analysis: ScalingView) -> pd.DataFrame:
    """One row per point (a series at one GPU count); each series' recommendation in words is in
    `frame.attrs["recommendations"]`, by series, and the experiment's own flags in `frame.attrs["flags"]`."""
    rows = [
        {
            "series": series.series,
            "scaling": series.scaling,
            "measure": series.measure,
            "gpus": point.gpus,
            "mean_s": point.mean,
            "ci_low_s": point.ci_low,
            "ci_high_s": point.ci_high,
            "n": point.n,
            "speedup": point.speedup,
            "efficiency": point.efficiency,
            "flags": flag_codes(point.flags),
            "advice": series.advice,
        }
        for series in analysis.series
        for point in series.points
    ]
    frame = table(rows, SCALING)
    frame.attrs["recommendations"] = {series.series: series.recommendation for series in analysis.series}
    frame.attrs["flags"] = [flag.model_dump() for flag in analysis.flags]
    return frame
