"""An experiment's grid, expanded into run specs; and a run's spec with changes, as a rerun of it runs."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from contract.program import PARAM_PREFIX
from contract.spec import RunSpec
from contract.target import LrScaling, scaled_lr
from server.models import MAX_RUNS_PER_EXPERIMENT


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
    *,
    repeats: int = 1,
    weak: bool = False,
) -> tuple[list[RunSpec], list[Unrunnable]]:
    """One spec per combination of the grid's values and repeat, in the order the grid lists them, and the
    combinations that cannot run: invalid as specs, or beyond the cluster's `limits`. `server_fields` are spec
    fields the server fills in itself (an inference run's checkpoint, the experiment's target).

    Repeats come round by round (every combination once, then again), so that a drift of the machine over the
    sweep spreads over all points rather than biasing the last ones; each round takes the next seed unless the
    request fixes the seed. Weak scaling keeps each combination's batch per GPU at that of the grid's smallest
    GPU count: its global batch grows with the GPUs. A learning-rate rule scales each combination's rate from the
    grid's smallest global batch (with_lr_rule)."""
    fixed = {"nodes": nodes, **base.model_dump(exclude_none=True), **(server_fields or {})}
    axes = grid.model_dump(exclude_none=True)
    count = repeats
    for values in axes.values():
        count *= len(values)
    if count > MAX_RUNS_PER_EXPERIMENT:
        times = f" x {repeats} repeats" if repeats > 1 else ""
        raise SweepError([f"the grid{times} makes {count} runs; at most {MAX_RUNS_PER_EXPERIMENT} fit one experiment"])
    seed_fixed = "seed" in fixed or "seed" in axes
    smallest = min(axes.get("gpus") or [fixed.get("gpus", RunSpec.model_fields["gpus"].default)])
    combos = [dict(zip(axes, values, strict=True)) for values in itertools.product(*axes.values())]
    combined = [with_params({**fixed, **combo}) for combo in combos]
    if weak:
        for fields in combined:
            fields["global_batch_size"] = weak_batch(fields, smallest)
    reference_batch = min(_batch(fields) for fields in combined)
    specs: list[RunSpec] = []
    unrunnable: list[Unrunnable] = []
    for round_ in range(repeats):
        for combo, common in zip(combos, combined, strict=True):
            fields = with_lr_rule(common, reference_batch)
            if not seed_fixed:
                fields["seed"] = round_
            try:
                spec = RunSpec.model_validate(fields)
            except ValidationError as exc:
                reasons = "; ".join(map(_reason, exc.errors()))
                if round_ == 0:
                    unrunnable.append(Unrunnable(combo, reasons))
                continue
            beyond = limits(spec)
            if beyond:
                if round_ == 0:
                    unrunnable.append(Unrunnable(combo, "; ".join(beyond)))
            else:
                specs.append(spec)
    return specs, unrunnable


def _reason(error: ErrorDetails) -> str:
    """A spec's refusal in words, naming its field where it is one field's (a bound: "lr: ... less than or equal
    to 10", perhaps of a rate a learning-rate rule scaled)."""
    message = error["msg"].removeprefix("Value error, ")
    field = ".".join(map(str, error["loc"]))
    return f"{field}: {message}" if field else message


def param_axes(grid: BaseModel) -> list[str]:
    """The grid's keys that sweep a program's parameters (`params.NAME`)."""
    return [key for key in grid.model_extra or {} if key.startswith(PARAM_PREFIX)]


def with_params(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The spec's fields with the values of `params.NAME` axes set in the program's params (a params axis without
    a program is left for the spec to refuse, naming it; planning names it first)."""
    swept = {key.removeprefix(PARAM_PREFIX): value for key, value in fields.items() if key.startswith(PARAM_PREFIX)}
    program = fields.get("program")
    if not swept or not isinstance(program, Mapping):
        return dict(fields)
    rest = {key: value for key, value in fields.items() if not key.startswith(PARAM_PREFIX)}
    return {**rest, "program": {**program, "params": {**program.get("params", {}), **swept}}}


def _batch(fields: Mapping[str, Any]) -> int:
    return int(fields.get("global_batch_size", RunSpec.model_fields["global_batch_size"].default))


def weak_batch(fields: Mapping[str, Any], smallest_gpus: int) -> int:
    """The global batch of a weak-scaling run: the request's global batch is that of the smallest GPU count, and
    the batch per GPU stays the same as the GPUs grow (rounded down where it does not divide; validation then says
    why)."""
    gpus = int(fields.get("gpus", RunSpec.model_fields["gpus"].default))
    return _batch(fields) * gpus // smallest_gpus


def changed_spec(spec: Mapping[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    """A run's spec with `changes` laid over it (null resets a field to its default), to be validated as a spec.

    Under a learning-rate rule the rate follows a changed batch as the grid's did: the original's reference_lr (the
    rate the request gave, unless the changes give another) scaled from its reference_batch."""
    fields = {key: value for key, value in spec.items() if key not in changes}
    fields |= {key: value for key, value in changes.items() if value is not None}
    reference_lr, reference_batch = fields.pop("reference_lr", None), fields.pop("reference_batch", None)
    if reference_lr is not None and "lr" not in changes:
        fields["lr"] = reference_lr
    return fields if reference_batch is None else with_lr_rule(fields, reference_batch)


def with_lr_rule(fields: Mapping[str, Any], reference_batch: int) -> dict[str, Any]:
    """The spec's fields with the learning rate its rule gives (contract.target.scaled_lr): the rate the request
    gave is the one for the grid's smallest global batch, kept as reference_lr, and `lr` is the rate the run uses.
    Without a rule (or with a value the spec refuses, which validation names) the fields are left as they are."""
    try:
        rule = LrScaling(fields.get("lr_scaling", LrScaling.none))
    except ValueError:
        return dict(fields)
    if rule is LrScaling.none:
        return dict(fields)
    reference_lr = float(fields.get("lr", RunSpec.model_fields["lr"].default))
    lr = scaled_lr(reference_lr, reference_batch, _batch(fields), rule)
    return {**fields, "lr": lr, "reference_lr": reference_lr, "reference_batch": reference_batch}
