"""How the commands print what the API answers: tables, `key  value` lines, times, states and counts."""

from __future__ import annotations

import datetime as dt
import json
import textwrap
from collections.abc import Mapping
from typing import Any

from client import terminal
from client.schemas import RunView
from contract.states import RunState

WAITING = "waiting for a slot"


def print_table(headers: list[str], rows: list[list[Any]], flexible: int = -1) -> None:
    print("\n".join(terminal.table(headers, rows, terminal.columns(), flexible=flexible)))


def print_json(document: Any) -> None:
    """An answer of the API as it came, indented for reading: fields this client does not know included."""
    print(json.dumps(document, indent=2, ensure_ascii=False))


def when(moment: dt.datetime, *, seconds: bool = False) -> str:
    return moment.astimezone().strftime("%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M")


def state_text(run: RunView) -> str:
    if run.waiting:
        return f"{run.state} ({WAITING})"
    if run.state in (RunState.pending, RunState.submitted) and run.scheduler_reason:
        return f"{run.state} ({run.scheduler_reason})"
    return str(run.state)


def runs_table(runs: list[RunView]) -> None:
    headers = ["RUN", "EXPERIMENT", "STATE", "STRATEGY", "GPUS", "NODES", "JOB", "MESSAGE"]
    rows = [
        [
            run.id,
            run.experiment_id,
            state_text(run),
            run.spec.get("strategy"),
            run.spec.get("gpus"),
            run.spec.get("nodes"),
            run.job_id,
            run.message,
        ]
        for run in runs
    ]
    print_table(headers, rows, flexible=len(headers) - 1)


def counts(states: Mapping[str, int]) -> str:
    return ", ".join(f"{count} {state}" for state, count in sorted(states.items())) or "no runs"


def settings_text(fields: Mapping[str, Any]) -> str:
    """Spec fields as key=value, leaving out the unset ones."""
    return " ".join(f"{key}={value}" for key, value in fields.items() if value is not None)


def wrapped(text: str, indent: str) -> str:
    return textwrap.fill(text, terminal.columns(), subsequent_indent=indent, break_on_hyphens=False)


def print_fields(fields: list[tuple[str, object]]) -> None:
    """One `key  value` line each, values aligned and wrapped under themselves."""
    width = max(len(key) for key, _ in fields)
    for key, value in fields:
        print(wrapped(f"{key.ljust(width)}  {terminal.cell(value)}", " " * (width + 2)))
