"""Plans: an experiment request's fabric probes and 1-process runs submitted as an experiment of their own, and,
once they have ended, every grid point predicted, a recommendation for a goal, and the GPU-hours (POST/GET
/api/plans). The request is checked as submitting it would be (planning.plan_request); the arithmetic is the step
model's (server.services.prediction), the fits and time breakdowns are found as the comparison's prediction finds
them (server.services.comparison.predicted).

The runs a plan submits, by a stated rule:
- a `probe` run for each distinct (nodes, processes per node) of the grid's multi-process points, of
  `probe_seconds` each;
- one 1-process run per strategy: the grid's first point of that strategy at 1 process and 1 node, at most
  REFERENCE_EPOCHS epochs (the step is timed per step: more epochs time it no better); a strategy that cannot run on
  one process (its settings refused there) is timed as `single` with the same model, data and batch.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pydantic import ValidationError
from sqlmodel import Session, col, select

from contract.fabric import AlphaBeta, Tier
from contract.spec import STRATEGY_FIELDS, RunKind, RunSpec, Strategy
from contract.states import RunState
from server.config import Settings
from server.errors import Conflict, Invalid, NotFound
from server.models import (
    ExperimentCreate,
    ExperimentCreated,
    ExperimentPlan,
    FabricFitPublic,
    Goal,
    ModelPoint,
    PlanPoint,
    PlanPublic,
    PlanRecommendation,
    Run,
    User,
)
from server.profiles import ProfileCatalog
from server.scheduler import Scheduler
from server.services import experiments, planning, rundirs, submission
from server.services.comparison import compare_rows
from server.services.comparison import predicted as predicted_
from server.services.estimate import estimate_memory
from server.services.prediction import NoPrediction, Reference, StepPrediction, predict_step
from server.services.quotas import check_quotas
from server.services.visibility import visible_experiment

REFERENCE_EPOCHS = 2
# The fields a point's repeats differ in: a point is its spec without them.
_REPEAT = ("seed",)
# The fields a series' points differ in: speed-up and efficiency are against the series' smallest point.
_SIZE = ("gpus", "nodes", "seed")


def _probes(specs: list[RunSpec], probe_seconds: int) -> list[RunSpec]:
    shapes = sorted({(spec.nodes, spec.gpus_per_node) for spec in specs if spec.gpus > 1})
    return [
        RunSpec(kind=RunKind.probe, nodes=nodes, gpus=nodes * per_node, probe_seconds=probe_seconds)
        for nodes, per_node in shapes
    ]


def reference_spec(spec: RunSpec) -> RunSpec:
    """The 1-process run a strategy's points scale from (the module's rule)."""
    fields = spec.model_dump(exclude_none=True) | {"gpus": 1, "nodes": 1, "epochs": min(spec.epochs, REFERENCE_EPOCHS)}
    try:
        return RunSpec.model_validate(fields)
    except ValidationError:
        layout = {"strategy", *STRATEGY_FIELDS}
        kept = {name: value for name, value in fields.items() if name not in layout}
        return RunSpec.model_validate(kept | {"strategy": Strategy.single})


def _references(specs: list[RunSpec]) -> dict[str, RunSpec]:
    """Per strategy, in the grid's order, its 1-process run's spec."""
    found: dict[str, RunSpec] = {}
    for spec in specs:
        found.setdefault(spec.strategy.value, reference_spec(spec))
    return found


def create_plan(
    session: Session,
    request: ExperimentCreate,
    goal: Goal,
    efficiency: float,
    probe_seconds: int,
    settings: Settings,
    scheduler: Scheduler,
    catalog: ProfileCatalog,
    user: User,
) -> PlanPublic:
    """Check the request as submitting it would, then submit its probes and 1-process runs as the plan's experiment."""
    kind = getattr(request.base, "kind", None) or RunKind.train
    if kind is not RunKind.train:
        why = f"a plan predicts the built-in worker's training; a {kind.value} experiment's runs have no step model"
        raise Invalid([(("body", "base", "kind"), why)])
    plan = planning.plan_request(
        session, request, catalog, scheduler, user, programs_for_all=settings.programs_for_all_as_service_account
    )
    unique: dict[str, RunSpec] = {}
    for spec in [*_probes(plan.specs, probe_seconds), *_references(plan.specs).values()]:
        unique.setdefault(spec.model_dump_json(), spec)
    runs_plan = dataclasses.replace(plan, specs=list(unique.values()), skipped=[])
    check_quotas(session, user, settings, runs_plan.specs, new=True)
    named = request.model_copy(update={"name": f"plan: {request.name}"[:200]})
    try:
        experiment, _, unreachable = submission.create_experiment(
            session, named, runs_plan, settings, scheduler, user.name
        )
    except OSError as exc:
        raise rundirs.unwritable(settings.runs_dir, exc, "nothing was submitted") from None
    session.add(
        ExperimentPlan(
            experiment_id=experiment.id,
            goal=goal,
            efficiency=efficiency,
            request=request.model_dump(mode="json", exclude_none=True),
            specs=[spec.model_dump(mode="json") for spec in plan.specs],
        )
    )
    session.commit()
    if unreachable is not None:
        raise submission.kept(experiment.id, unreachable, "its runs are")
    return plan_answer(session, experiment.id, user)


def _plan(session: Session, plan_id: str, user: User) -> tuple[str, ExperimentPlan]:
    experiment = visible_experiment(session, user, plan_id)
    stored = session.get(ExperimentPlan, plan_id)
    if stored is None:
        raise NotFound(f"experiment {plan_id} is not a plan")
    return experiment.name, stored


def _key(spec: dict[str, Any], leave_out: tuple[str, ...]) -> str:
    return repr(sorted((name, repr(value)) for name, value in spec.items() if name not in leave_out))


def _fits_used(fits: dict[Tier, AlphaBeta]) -> list[FabricFitPublic]:
    return [
        FabricFitPublic(tier=tier.value, alpha_s=fit.alpha_s, beta_bytes_per_s=fit.beta_bytes_per_s)
        for tier, fit in sorted(fits.items())
    ]


@dataclasses.dataclass
class _Grid:
    points: list[PlanPoint]
    fits: dict[Tier, AlphaBeta]


def _predict(session: Session, stored: ExperimentPlan, runs: list[Run], weak: bool) -> _Grid:
    rows = {row.run_id: row for row in compare_rows(session, experiment_ids=[stored.experiment_id])}
    by_spec = {_key(run.spec, ()): run for run in runs if run.state is RunState.completed}
    specs = [RunSpec.model_validate(spec) for spec in stored.specs]
    references: dict[str, tuple[Reference, str] | str] = {}
    for strategy, spec in _references(specs).items():
        run = by_spec.get(_key(spec.model_dump(mode="json"), ()))
        step = predicted_.breakdown(rows[run.id]) if run is not None and run.id in rows else None
        references[strategy] = (
            (Reference(spec, step), run.id)
            if run is not None and step is not None
            else f"its 1-process run ({strategy}) did not complete with a time breakdown: no compute to scale from"
        )
    grouped: dict[str, list[RunSpec]] = {}
    for spec in specs:
        grouped.setdefault(_key(spec.model_dump(mode="json"), _REPEAT), []).append(spec)
    used: dict[Tier, AlphaBeta] = {}
    series: dict[str, list[tuple[ModelPoint, PlanPoint]]] = {}
    for repeats in grouped.values():
        spec = repeats[0]
        reference = references[spec.strategy.value]
        if isinstance(reference, str):
            answer: StepPrediction | NoPrediction = NoPrediction(reference)
        else:
            backend = predicted_.backend_of(session, reference[1])
            fits = dict(predicted_.fits_lookup(session, reference[1], spec, backend)) if spec.gpus > 1 else {}
            answer = predict_step(reference[0], spec, fits)
            if isinstance(answer, StepPrediction):
                used.update(fits)
        model = ModelPoint(
            gpus=spec.gpus, nodes=spec.nodes, step_time_s=None, epoch_time_s=None, speedup=None, efficiency=None,
            compute_s=None, comm_s=None, bubble_s=None,
        )  # fmt: skip
        point = PlanPoint(
            strategy=spec.strategy.value, gpus=spec.gpus, nodes=spec.nodes, spec=spec.model_dump(mode="json"),
            repeats=len(repeats), step_time_s=None, epoch_time_s=None, speedup=None, efficiency=None,
            memory_per_gpu_bytes=estimate_memory(spec).total_bytes, gpu_hours=None,
        )  # fmt: skip
        if isinstance(answer, NoPrediction):
            point.unavailable = answer.reason
        else:
            model.step_time_s = point.step_time_s = answer.step_s
            model.epoch_time_s = point.epoch_time_s = answer.epoch_s
            point.compute_s, point.comm_s, point.bubble_s = answer.compute_s, answer.comm_s, answer.bubble_s
            point.gpu_hours = answer.epoch_s * spec.epochs * spec.gpus * len(repeats) / 3600
        series.setdefault(_key(point.spec, _SIZE), []).append((model, point))
    for members in series.values():
        members.sort(key=lambda pair: pair[0].gpus)
        predicted_.speedups([model for model, _ in members], weak)
        for model, point in members:
            point.speedup, point.efficiency = model.speedup, model.efficiency
    return _Grid([point for members in series.values() for _, point in members], used)


def recommend(points: list[PlanPoint], goal: str, efficiency: float) -> PlanPoint | None:
    """The point the goal chooses among the predicted ones: fastest_epoch, the shortest predicted epoch (fewer GPUs
    among equals); largest_n_at_efficiency, the most GPUs at the bound or above (the faster among equals)."""
    timed = [point for point in points if point.epoch_time_s is not None]
    if goal == "fastest_epoch":
        return min(timed, key=lambda point: (point.epoch_time_s, point.gpus), default=None)
    able = [point for point in timed if point.efficiency is not None and point.efficiency >= efficiency]
    return min(able, key=lambda point: (-point.gpus, point.epoch_time_s), default=None)


def _why(point: PlanPoint, goal: str, efficiency: float) -> str:
    figures = (
        f"{point.strategy} on {point.gpus} GPU(s): predicted epoch {point.epoch_time_s:.3g} s, "
        f"efficiency {point.efficiency:.2f}"
    )
    if goal == "fastest_epoch":
        return f"the shortest predicted epoch of the grid: {figures}"
    return f"the most GPUs whose predicted efficiency is at least {efficiency:g}: {figures}"


def plan_answer(session: Session, plan_id: str, user: User) -> PlanPublic:
    """What the plan knows: which of its runs are still running, or every grid point predicted and the advice."""
    name, stored = _plan(session, plan_id, user)
    runs = list(session.exec(select(Run).where(Run.experiment_id == plan_id).order_by(col(Run.position))).all())
    specs = [RunSpec.model_validate(spec) for spec in stored.specs]
    by_key = {_key(run.spec, ()): run.id for run in runs}
    references = {strategy: _key(spec.model_dump(mode="json"), ()) for strategy, spec in _references(specs).items()}
    answer = PlanPublic(
        id=plan_id,
        name=name,
        goal=stored.goal,
        efficiency=stored.efficiency,
        state="running",
        probe_run_ids=[run.id for run in runs if run.spec.get("kind") == RunKind.probe.value],
        reference_run_ids={strategy: by_key[key] for strategy, key in references.items() if key in by_key},
    )
    answer.waiting_for = [run.id for run in runs if not (run.state.is_final and run.ingest_done)]
    if answer.waiting_for:
        return answer
    answer.failed = [run.id for run in runs if run.state is not RunState.completed]
    answer.state = "failed" if answer.failed else "ready"
    grid = _predict(session, stored, runs, stored.request.get("scaling") == "weak")
    answer.points, answer.fits = grid.points, _fits_used(grid.fits)
    timed = [point.gpu_hours for point in grid.points if point.gpu_hours is not None]
    answer.grid_gpu_hours = sum(timed) if timed else None
    answer.gpu_hours_complete = len(timed) == len(grid.points)
    chosen = recommend(grid.points, stored.goal, stored.efficiency)
    if chosen is not None:
        why = _why(chosen, stored.goal, stored.efficiency)
        answer.recommendation = PlanRecommendation(
            strategy=chosen.strategy, gpus=chosen.gpus, nodes=chosen.nodes, why=why
        )
        answer.recommended_gpu_hours = chosen.gpu_hours
    return answer


def recommended_request(answer: PlanPublic, request: dict[str, Any]) -> ExperimentCreate:
    """The planned request narrowed to the recommended point: each swept field at the point's value."""
    point = next(
        point
        for point in answer.points
        if (point.strategy, point.gpus, point.nodes) == (
            answer.recommendation.strategy, answer.recommendation.gpus, answer.recommendation.nodes
        )
    ) if answer.recommendation else None  # fmt: skip
    if point is None:
        raise Conflict(f"plan {answer.id} recommends nothing yet ({answer.state}): there is no point to run")
    grid = {axis: [point.spec[axis]] for axis in request.get("grid", {}) if axis in point.spec}
    narrowed = {**request, "grid": grid, "name": f"{request.get('name', 'plan')} (planned)"[:200]}
    if "nodes" in point.spec and "nodes" not in grid:
        narrowed["resources"] = {**request.get("resources", {}), "nodes": point.spec["nodes"]}
    return ExperimentCreate.model_validate(narrowed)


def experiment_from_plan(
    session: Session, plan_id: str, settings: Settings, scheduler: Scheduler, catalog: ProfileCatalog, user: User
) -> ExperimentCreated:
    """Submit the experiment of the points the plan recommends, as any experiment is submitted."""
    answer = plan_answer(session, plan_id, user)
    if answer.state == "running":
        raise Conflict(f"plan {plan_id} is still running {len(answer.waiting_for)} run(s): it recommends once they end")
    _, stored = _plan(session, plan_id, user)
    request = recommended_request(answer, stored.request)
    return experiments.experiment_created(
        session, *submission.submit_experiment(session, request, settings, scheduler, catalog, user)
    )
