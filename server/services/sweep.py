"""An experiment's grid, expanded into run specs."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from contract.spec import RunSpec
from server.models import MAX_RUNS

# The limit and the request's sections are the API's schema, defined in server.models beside the request; they are
# re-exported here for the callers that still import them from this module (the pages, the experiments router).


class SweepError(ValueError):
    """Some combinations of the grid cannot run; each message says which and why."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class Unrunnable:
    """A combination of the grid that cannot run, and why."""

    combination: dict[str, Any]
    reason: str

    def __str__(self) -> str:
        described = ", ".join(f"{key}={value}" for key, value in self.combination.items()) or "the base spec"
        return f"{described}: {self.reason}"


def _no_limits(_spec: RunSpec) -> list[str]:
    return []


def expand(
    base: BaseModel,
    grid: BaseModel,
    nodes: int,
    limits: Callable[[RunSpec], list[str]] = _no_limits,
    server_fields: Mapping[str, Any] | None = None,
) -> tuple[list[RunSpec], list[Unrunnable]]:
    """One spec per combination of the grid's values, in the order the grid lists them, and the combinations
    that cannot run: invalid as specs, or beyond the cluster's `limits`. `server_fields` are spec fields the
    server fills in itself (an inference run's checkpoint)."""
    fixed = {"nodes": nodes, **base.model_dump(exclude_none=True), **(server_fields or {})}
    axes = grid.model_dump(exclude_none=True)
    count = 1
    for values in axes.values():
        count *= len(values)
    if count > MAX_RUNS:
        raise SweepError([f"the grid makes {count} runs; at most {MAX_RUNS} fit one experiment"])
    specs: list[RunSpec] = []
    unrunnable: list[Unrunnable] = []
    for values in itertools.product(*axes.values()):
        combo = dict(zip(axes, values, strict=True))
        try:
            spec = RunSpec.model_validate({**fixed, **combo})
        except ValidationError as exc:
            reasons = "; ".join(error["msg"].removeprefix("Value error, ") for error in exc.errors())
            unrunnable.append(Unrunnable(combo, reasons))
            continue
        beyond = limits(spec)
        if beyond:
            unrunnable.append(Unrunnable(combo, "; ".join(beyond)))
        else:
            specs.append(spec)
    return specs, unrunnable
