"""The comparison rows as CSV: one line per run, nested figures one column per part, custom metrics last."""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from typing import Any

from server.models import TIME_PARTS, CompareRow, RunResources

# Custom metrics' columns: `metric.grad_norm`.
METRIC_COLUMN = "metric."


def compare_csv(rows: list[CompareRow]) -> str:
    """The rows as CSV with a header of the field names; a missing figure is an empty cell. Flags are one cell
    ("code: message" lines); the time breakdown and the resources one column per part; the custom metrics one
    column `metric.NAME` each, for the names the rows have, after the rest (so that the columns of a selection
    without them stay those that scripts of earlier versions read)."""
    names = sorted({name for row in rows for name in row.metrics})
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=_csv_columns(names), lineterminator="\n")
    writer.writeheader()
    writer.writerows(_flat(row.model_dump(mode="json")) for row in rows)
    return buffer.getvalue()


def _csv_columns(metric_names: list[str]) -> list[str]:
    nested = {
        "time_breakdown": [f"time_breakdown.{part}" for part in TIME_PARTS],
        "resources": [f"resources.{name}" for name in RunResources.model_fields],
        "metrics": [],
    }
    fixed = [column for name in CompareRow.model_fields for column in nested.get(name, [name])]
    return fixed + [f"{METRIC_COLUMN}{name}" for name in metric_names]


def _flat(dump: Mapping[str, Any]) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for name, value in dump.items():
        if name == "flags":
            flat[name] = "\n".join(f"{flag['code']}: {flag['message']}" for flag in value)
        elif name in ("time_breakdown", "resources"):
            flat.update({f"{name}.{part}": _cell(inner) for part, inner in (value or {}).items()})
        elif name == "metrics":
            flat.update({f"{METRIC_COLUMN}{metric}": figure for metric, figure in value.items()})
        else:
            flat[name] = _cell(value)
    return flat


def _cell(value: Any) -> Any:
    return " ".join(map(str, value)) if isinstance(value, list) else value
