"""Experiments as the API and the pages read them: found by id, listed with their runs' states, planned, previewed."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from sqlmodel import Session, col, func, select

from contract.spec import RunKind, RunSpec
from server.config import Settings
from server.errors import Invalid, NotFound
from server.models import (
    CardOrigin,
    CardOriginPublic,
    Experiment,
    ExperimentCreate,
    ExperimentCreated,
    ExperimentPreview,
    ExperimentPublic,
    ExperimentsPublic,
    Run,
    RunEstimate,
    RunPublic,
    SkippedRun,
    User,
)
from server.profiles import ProfileCatalog
from server.scheduler import Scheduler
from server.services import arrays, runs, secrets, visibility
from server.services.estimate import EstimateError, estimate_memory, fits
from server.services.planning import Plan, plan_request
from server.services.read_cache import Memo
from server.services.scripts import preview_script


def get_experiment(session: Session, experiment_id: str) -> Experiment:
    experiment = session.get(Experiment, experiment_id)
    if experiment is None:
        raise NotFound(f"no experiment {experiment_id!r}")
    return experiment


def _state_counts(session: Session, experiment_ids: list[str]) -> dict[str, dict[str, int]]:
    """Runs per state for each experiment, in one grouped query however many experiments are listed."""
    rows = session.exec(
        select(Run.experiment_id, Run.state, func.count())
        .where(col(Run.experiment_id).in_(experiment_ids))
        .group_by(col(Run.experiment_id), col(Run.state))
    ).all()
    counts: dict[str, dict[str, int]] = defaultdict(dict)
    for experiment_id, state, n in rows:
        counts[experiment_id][str(state)] = n
    return counts


def _with_counts(experiment: Experiment, states: dict[str, int]) -> ExperimentPublic:
    return ExperimentPublic.model_validate(experiment, update={"run_count": sum(states.values()), "states": states})


def experiment_public(session: Session, experiment: Experiment, viewer: User) -> ExperimentPublic:
    """The experiment as the viewer may see it: its program's env values hidden unless the viewer may change it;
    where it came from if it was imported from a scaling card."""
    public = _with_counts(experiment, _state_counts(session, [experiment.id])[experiment.id])
    if (origin := session.get(CardOrigin, experiment.id)) is not None:
        public.card = CardOriginPublic.model_validate(origin, from_attributes=True)
    return _as_seen(public, viewer)


def _as_seen(public: ExperimentPublic, viewer: User) -> ExperimentPublic:
    shown = secrets.request_for(viewer, public.owner, public.request)
    return public if shown is public.request else public.model_copy(update={"request": shown})


# An experiment as listed, but for its runs' counts, kept under its id and sharing as read: the rest of what it shows
# (name, owner, creation, the request) never changes once stored, and rebuilding it from a whole row was most of
# what a list of 50 cost (an ORM object and a validation each, the request's JSON parsed again).
ListedKey = tuple[str, str, str | None]
_LISTED_COLUMNS = (col(Experiment.id), col(Experiment.sharing), col(Experiment.sharing_group))
_listed: Memo[ExperimentPublic] = Memo()


def _listed_experiments(session: Session, keys: Sequence[ListedKey]) -> list[ExperimentPublic]:
    """Each experiment's listing without counts, from those kept; the others read with one more query (one deleted
    meanwhile is left out)."""
    found = {key: _listed.peek(key) for key in keys}
    missing = {key[0]: key for key, listed in found.items() if listed is None}
    if missing:
        for experiment in session.exec(select(Experiment).where(col(Experiment.id).in_(missing))):
            key = missing[experiment.id]
            found[key] = made = _with_counts(experiment, {})
            _listed.put(key, made)
    return [listed for listed in (found[key] for key in keys) if listed is not None]


def list_experiments(
    session: Session, viewer: User, owner: str | None = None, skip: int = 0, limit: int = 100
) -> ExperimentsPublic:
    """Newest first, with each one's runs counted per state: those the viewer may see."""
    query = select(*_LISTED_COLUMNS).where(visibility.visible(viewer))
    if owner is not None:
        query = query.where(Experiment.owner == owner)
    connection = session.connection()  # rows as read, without the ORM's layer
    newest_first = query.order_by(col(Experiment.created_at).desc()).offset(skip).limit(limit)
    keys = [(experiment_id, sharing, group) for experiment_id, sharing, group in connection.execute(newest_first)]
    count = runs.count_of(session, query)
    listed = _listed_experiments(session, keys)
    counts = _state_counts(session, [experiment.id for experiment in listed])
    data = [
        _as_seen(
            experiment.model_copy(
                update={"run_count": sum(counts[experiment.id].values()), "states": counts[experiment.id]}
            ),
            viewer,
        )
        for experiment in listed
    ]
    return ExperimentsPublic(data=data, count=count)


def experiment_created(
    session: Session, experiment: Experiment, runs: list[Run], skipped: list[SkippedRun] | None = None
) -> ExperimentCreated:
    # Its creator's, whose own values it shows.
    public = _with_counts(experiment, _state_counts(session, [experiment.id])[experiment.id])
    return ExperimentCreated(
        **public.model_dump(), runs=[RunPublic.model_validate(run) for run in runs], skipped=skipped or []
    )


PROGRAM_NOT_ESTIMATED = "no estimate: scalelab cannot estimate a program's memory"
PROBE_NOT_ESTIMATED = "no estimate: a fabric probe trains no model; its buffers are at most 256 MiB per process"


def _estimate(index: int, spec: RunSpec, plan: Plan) -> RunEstimate:
    if spec.kind is RunKind.inference:
        return RunEstimate(index=index, estimate=None, warning="no estimate: the estimate is of training's memory")
    if spec.kind is RunKind.program:
        # The estimate models the built-in worker's models and strategies; of a program it knows only the launch.
        return RunEstimate(index=index, estimate=None, warning=PROGRAM_NOT_ESTIMATED)
    if spec.kind is RunKind.probe:
        return RunEstimate(index=index, estimate=None, warning=PROBE_NOT_ESTIMATED)
    try:
        estimate = estimate_memory(spec)
    except EstimateError as exc:
        return RunEstimate(index=index, estimate=None, warning=f"no estimate: {exc}")
    gpu_memory = plan.profile.partitions[plan.partition].gpu_memory_gib
    return RunEstimate(index=index, estimate=estimate, warning=fits(estimate, gpu_memory))


def preview(
    session: Session,
    request: ExperimentCreate,
    index: int,
    settings: Settings,
    scheduler: Scheduler,
    catalog: ProfileCatalog,
    user: User,
) -> ExperimentPreview:
    """The request validated and expanded exactly as submitting it would, writing and submitting nothing."""
    plan = plan_request(
        session, request, catalog, scheduler, user, programs_for_all=settings.programs_for_all_as_service_account
    )
    if index >= len(plan.specs):
        raise Invalid([(("query", "index"), f"the experiment has {len(plan.specs)} runs; index is from 0")])
    array_script, array_note = arrays.preview_array(plan, index, settings, scheduler)
    return ExperimentPreview(
        name=request.name,
        runs=plan.specs,
        count=len(plan.specs),
        skipped=plan.skipped_runs(),
        estimates=[_estimate(index, spec, plan) for index, spec in enumerate(plan.specs)],
        index=index,
        script=preview_script(
            plan, index, settings, scheduler, request.inference.prompt_lines() if request.inference else None
        ),
        array_script=array_script,
        array_note=array_note,
    )


def kind_of(session: Session, experiment: Experiment) -> RunKind:
    """What its runs do, which its page shows the figures of: the kind its request's base names (training unless it
    says otherwise); for an experiment whose request has no base (imported logs), the kind all its runs share."""
    base = experiment.request.get("base")
    if isinstance(base, dict):
        kinds = {base.get("kind") or RunKind.train.value}
    else:
        kinds = {run.spec.get("kind") or RunKind.train.value for run in runs.runs_of_experiment(session, experiment.id)}
    kind = kinds.pop() if len(kinds) == 1 else RunKind.train.value
    return next((known for known in RunKind if known.value == kind), RunKind.train)
