"""The comparison rows as CSV: one line per run, nested figures one column per part, custom metrics last."""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from typing import Any

from contract.target import Target
from server.models import TIME_PARTS, CompareRow, RunResources

# Custom metrics' columns: `metric.grad_norm`.
METRIC_COLUMN = "metric."
BREAKDOWN_COLUMN = "time_breakdown."

# What a spreadsheet reads as the start of a formula (OWASP, "CSV Injection"): a cell of text that starts with one
# of these gets a leading quote, so that `=HYPERLINK(...)` written by a job is shown, never run.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def compare_csv(rows: list[CompareRow]) -> str:
    """The rows as CSV with a header of the field names; a missing figure is an empty cell. Flags are one cell
    ("code: message" lines), the target one in words (`val_accuracy >= 0.95`); the time breakdown and the resources
    one column per part; the custom metrics one column `metric.NAME` each, for the names the rows have, after the
    rest (so that the columns of a selection without them stay those that scripts of earlier versions read). A
    program may time parts of its own (`forward`): they follow the known parts, in the order of their names."""
    names = sorted({name for row in rows for name in row.metrics})
    own_parts = sorted({part for row in rows for part in row.time_breakdown or {}} - set(TIME_PARTS))
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=_csv_columns(own_parts, names), lineterminator="\n")
    writer.writeheader()
    writer.writerows(_flat(row.model_dump(mode="json")) for row in rows)
    return buffer.getvalue()


def _csv_columns(own_parts: list[str], metric_names: list[str]) -> list[str]:
    nested = {
        "time_breakdown": [f"{BREAKDOWN_COLUMN}{part}" for part in (*TIME_PARTS, *own_parts)],
        "resources": [f"resources.{name}" for name in RunResources.model_fields],
        "metrics": [],
    }
    fixed = [column for name in CompareRow.model_fields for column in nested.get(name, [name])]
    return fixed + [f"{METRIC_COLUMN}{name}" for name in metric_names]


def _flat(dump: Mapping[str, Any]) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for name, value in dump.items():
        if name == "flags":
            flat[name] = _cell("\n".join(f"{flag['code']}: {flag['message']}" for flag in value))
        elif name in ("time_breakdown", "resources"):
            flat.update({f"{name}.{part}": _cell(inner) for part, inner in (value or {}).items()})
        elif name == "target":
            flat[name] = _cell(Target.model_validate(value).describe() if value else None)
        elif name == "metrics":
            flat.update({f"{METRIC_COLUMN}{metric}": _cell(figure) for metric, figure in value.items()})
        else:
            flat[name] = _cell(value)
    return flat


def _cell(value: Any) -> Any:
    text = " ".join(map(str, value)) if isinstance(value, list) else value
    # A lone CR is a line break to a spreadsheet, and the csv module leaves a cell holding one unquoted when lines
    # end in LF alone: as LF, it is quoted and stays inside its cell.
    return inert(text).replace("\r\n", "\n").replace("\r", "\n") if isinstance(text, str) else text


def inert(text: str) -> str:
    """Text a spreadsheet shows as it is. Only text: a number (a negative figure included) stays a number."""
    return f"'{text}" if text.startswith(FORMULA_STARTS) else text
