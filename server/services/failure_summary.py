"""An experiment's failures by kind and by grid coordinate ("2 of 24 out of memory: fsdp, 8 GPUs"), each kind with
its sentence of what to do: for the experiment's page, GET /api/experiments/{id}/failures and the command line."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlmodel import Session, col, select

from contract.program import PARAM_PREFIX
from contract.states import FailureKind, RunState
from server.models import Experiment, FailureGroup, FailurePoint, FailureSummary, Run
from server.runstate import FAILED_STATES
from server.services.failure_kinds import ADVICE


@dataclass(frozen=True)
class Failed:
    """A run as the summary sees it."""

    id: str
    spec: Mapping[str, Any]
    state: RunState
    kind: FailureKind | None


def swept_fields(request: Mapping[str, Any]) -> list[str]:
    """The grid's fields that take more than one value: what tells one grid point from another."""
    grid = request.get("grid") or {}
    return [name for name, values in grid.items() if isinstance(values, list) and len(values) > 1]


def coordinate(spec: Mapping[str, Any], swept: Sequence[str]) -> dict[str, Any]:
    """A run's values of the swept fields (a program's parameter as params.NAME)."""
    params = (spec.get("program") or {}).get("params") or {}
    return {
        name: params.get(name.removeprefix(PARAM_PREFIX)) if name.startswith(PARAM_PREFIX) else spec.get(name)
        for name in swept
    }


def label(point: Mapping[str, Any]) -> str:
    """A coordinate in words: 'fsdp, 8 GPUs, activation_checkpointing on'."""
    words = []
    for name, value in point.items():
        if name == "gpus":
            words.append(f"{value} GPU" + ("" if value == 1 else "s"))
        elif name == "nodes":
            words.append(f"{value} node" + ("" if value == 1 else "s"))
        elif name == "strategy":
            words.append(str(value))
        elif isinstance(value, bool):
            words.append(f"{name} {'on' if value else 'off'}")
        else:
            words.append(f"{name}={json.dumps(value) if not isinstance(value, str) else value}")
    return ", ".join(words)


def summarise(experiment_id: str, swept: Sequence[str], runs: Sequence[Failed]) -> FailureSummary:
    """The summary of an experiment's runs (in grid order) whose grid sweeps `swept`."""
    # A kind set on a run in another state (the watchdog's hung, on a run it cancelled) counts too.
    failed = [run for run in runs if run.state in FAILED_STATES or run.kind is not None]
    by_kind: dict[FailureKind, dict[str, tuple[dict[str, Any], list[str]]]] = defaultdict(dict)
    for run in failed:
        if run.kind is None:
            continue
        point = coordinate(run.spec, swept)
        key = json.dumps(point, sort_keys=True)
        by_kind[run.kind].setdefault(key, (point, []))[1].append(run.id)
    groups = []
    for kind, points in by_kind.items():
        shown = [FailurePoint(coordinate=point, label=label(point), runs=ids) for point, ids in points.values()]
        count = sum(len(point.runs) for point in shown)
        where = "; ".join(point.label for point in shown if point.label)
        said = f"{count} of {len(runs)} {kind.value.replace('_', ' ')}" + (f": {where}" if where else "")
        groups.append(FailureGroup(kind=kind, count=count, advice=ADVICE[kind], points=shown, summary=said))
    groups.sort(key=lambda group: -group.count)  # stable: kinds met first in grid order come first among equals
    return FailureSummary(
        experiment_id=experiment_id,
        run_count=len(runs),
        failed=len(failed),
        unclassified=sum(run.kind is None for run in failed),
        swept=list(swept),
        kinds=groups,
    )


def failure_summary(session: Session, experiment: Experiment) -> FailureSummary:
    rows = session.exec(
        select(Run.id, Run.spec, Run.state, Run.failure_kind)
        .where(Run.experiment_id == experiment.id)
        .order_by(col(Run.position))
    ).all()
    runs = [
        Failed(run_id, spec, RunState(state), FailureKind(kind) if kind else None) for run_id, spec, state, kind in rows
    ]
    return summarise(experiment.id, swept_fields(experiment.request), runs)
