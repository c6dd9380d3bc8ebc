"""The pages people use: server-rendered templates over the same data the REST API serves.

Every page route lives in this one router, so that authentication (a CurrentUser dependency) and a CSRF token
for the forms can be added in one place. Pages only read: what a page changes goes through the JSON API
(fetch from the page's scripts), where the API's own checks apply.
"""

from __future__ import annotations

import functools
import gzip
import html
import importlib.util
import json
import shlex
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, NamedTuple, TypeVar
from urllib.parse import urlencode

from fastapi import APIRouter, HTTPException, Query, Request, status
from fastapi.responses import FileResponse, HTMLResponse, Response
from markupsafe import Markup
from pydantic import StringConstraints
from sqlmodel import Session, col, func, select
from sqlmodel.sql.expression import SelectOfScalar

from contract.metrics import CUSTOM_NAME
from contract.program import ParamsStyle, ProgramSpec
from contract.spec import PROBE_SECONDS_DEFAULT, Model, RunKind, Strategy, settings_of
from contract.states import RunState
from contract.target import WORKER_METRICS
from server.api.deps import MAX_SKIP, CurrentUser, ProfilesDep, SchedulerDep, SessionDep, SettingsDep
from server.images import why_no_digest
from server.models import (
    MAX_PROMPTS,
    MAX_PROMPTS_CHARS,
    MAX_RUNS_PER_EXPERIMENT,
    Experiment,
    ExperimentCreate,
    Run,
    RunSummary,
    User,
)
from server.profiles import ClusterProfile
from server.runstate import (
    failed_not_rerun,
    may_change,
    why_no_programs,
    why_not_cancel,
    why_not_rerun,
    why_not_resubmit,
)
from server.services import code, experiments, fabric, notifications, rundirs, runs, secrets, visibility
from server.services.failure_summary import failure_summary
from server.services.inference import checkpoint_choices
from server.services.read_cache import Memo
from server.web.forms import TARGET_GROUP, choices_of, program_inputs, resource_fields, spec_fields
from server.web.templating import fragment, planned_epochs, render, root_of

RUNS_PER_PAGE = 100
EXPERIMENT_CHOICES = 200  # the newest, in the runs page's experiment filter
E = TypeVar("E", bound=StrEnum)

router = APIRouter(include_in_schema=False)


def _not_found(request: Request, what: str) -> HTMLResponse:
    return render(request, "error.html", {"title": "Not found", "message": what}, status.HTTP_404_NOT_FOUND)


# ---- pages -------------------------------------------------------------------------------------------------------


@router.get("/", response_class=HTMLResponse)
def index(request: Request, session: SessionDep, scheduler: SchedulerDep, user: CurrentUser) -> HTMLResponse:
    latest = experiments.list_experiments(session, user, limit=20)
    return render(request, "index.html", {"experiments": latest.data, "scheduler": scheduler.name})


# The default sweep a new form starts from: a scaling study over GPU counts.
_STARTING_REQUEST: dict[str, Any] = {"name": "", "grid": {"gpus": [1, 2, 4]}}


@router.get("/account", response_class=HTMLResponse)
def account_page(request: Request, session: SessionDep, settings: SettingsDep, user: CurrentUser) -> HTMLResponse:
    """The user's notification settings and latest deliveries (account.js reads and changes them)."""
    return render(request, "account.html", {"notify": notifications.settings_of(session, user, settings)})


@router.get("/experiments/new", response_class=HTMLResponse)
def new_experiment(
    request: Request,
    session: SessionDep,
    catalog: ProfilesDep,
    scheduler: SchedulerDep,
    settings: SettingsDep,
    user: CurrentUser,
    from_: Annotated[str | None, Query(alias="from", max_length=16, description="an experiment to start from")] = None,
) -> HTMLResponse:
    start = _STARTING_REQUEST
    source = session.get(Experiment, from_) if from_ else None
    if source is not None and not visibility.may_see(user, source):
        source = None
    if source is not None:
        start = {**secrets.request_for(user, source.owner, source.request), "name": f"{source.name} (again)"[:200]}
    return render(
        request,
        "experiment_new.html",
        {
            "groups": spec_fields(),
            "program_inputs": program_inputs(),
            "resources": resource_fields(),
            "on_invalid": choices_of(ExperimentCreate, "on_invalid"),
            "on_failure": choices_of(ExperimentCreate, "on_failure"),
            "on_hang": choices_of(ExperimentCreate, "on_hang"),
            "default_profile": catalog.default,
            "start": start,
            "source": source,
            "max_runs": MAX_RUNS_PER_EXPERIMENT,
            "checkpoint_runs": checkpoint_choices(session, user, still_training=scheduler.uses_slurm),
            # The form disables kind program, saying why, where the API would refuse it (plan_request).
            "programs_refused": why_no_programs(
                user, scheduler.runs_as_user, settings.programs_for_all_as_service_account
            ),
            # The target's inputs, in the group TARGET_GROUP: the worker's metrics to choose from, and the name a
            # program's metric must have (contract.metrics.CUSTOM_NAME), so that the page's check and the API's agree.
            "target_group": TARGET_GROUP,
            "target_metrics": WORKER_METRICS,
            "metric_name_pattern": CUSTOM_NAME.pattern,
            "max_prompts": MAX_PROMPTS,
            "max_prompts_kib": MAX_PROMPTS_CHARS // 1024,
        },
    )


class ListedRun(NamedTuple):
    """What a row of the runs page shows of a run."""

    id: str
    experiment_id: str
    state: RunState
    spec: dict[str, Any]
    ingest_done: bool
    owner: str | None
    waiting: bool
    scheduler_reason: str | None
    message: str | None
    job_id: str | None
    submitted_at: datetime | None
    after_run: str | None
    epochs_done: int
    first_epoch_time_s: float | None
    epoch_time_sum_s: float | None
    experiment_name: str = ""

    @property
    def mean_epoch_time_s(self) -> float | None:
        summary = RunSummary(run_id=self.id, epochs_done=self.epochs_done, first_epoch_time_s=self.first_epoch_time_s,
                             epoch_time_sum_s=self.epoch_time_sum_s or 0.0)  # fmt: skip
        return summary.mean_epoch_time_s


_RUN_COLUMNS = ListedRun._fields.index("epochs_done")  # the fields read from the run's own row
_LISTED_COLUMNS = [
    *(getattr(Run, name) for name in ListedRun._fields[:_RUN_COLUMNS]),
    func.coalesce(RunSummary.epochs_done, 0),  # a run without a summary has printed no epoch yet
    RunSummary.first_epoch_time_s,
    RunSummary.epoch_time_sum_s,
]
# A row's HTML is kept under the run's (id, row_version), which the database bumps on every change of the run's
# row, its summary's figures and the experiment's name: rendering 100 rows was most of this page's cost (12 of
# 17 ms), and reading every column of them to look the rows up most of what was left.
_KEY_COLUMNS = [col(Run.id), col(Run.experiment_id), col(Run.row_version), *_LISTED_COLUMNS[_RUN_COLUMNS:]]
_row_html: Memo[Markup] = Memo()


def listed_rows(session: Session, shown: SelectOfScalar[Run], root: str) -> list[Markup]:
    """The rows of the runs page for the runs this query shows, each rendered once for as long as it is the same."""
    with_summaries = shown.join_from(Run, RunSummary, RunSummary.run_id == Run.id, isouter=True)  # type: ignore[arg-type]
    heads = session.connection().execute(with_summaries.with_only_columns(*_KEY_COLUMNS)).all()
    names = dict(
        session.exec(
            select(Experiment.id, Experiment.name).where(col(Experiment.id).in_({head[1] for head in heads}))
        ).all()
    )
    keys = {head[0]: (root, *head, names.get(head[1], "")) for head in heads}
    found = {run_id: _row_html.peek(key) for run_id, key in keys.items()}
    missing = [run_id for run_id, html in found.items() if html is None]
    if missing:
        typed = select(*_LISTED_COLUMNS).join_from(Run, RunSummary, RunSummary.run_id == Run.id, isouter=True)
        for values in session.execute(typed.where(col(Run.id).in_(missing))).all():
            run = ListedRun._make([*values, names.get(values[1], "")])
            found[run.id] = made = fragment("run_row.html", root, {"run": run})
            _row_html.put(keys[run.id], made)
    return [html for html in found.values() if html is not None]


@dataclass
class RunFilters:
    experiment: str | None = None
    state: list[RunState] = field(default_factory=list)
    model: Model | None = None
    strategy: Strategy | None = None
    owner: str | None = None

    def query_string(self, skip: int) -> str:
        """The page's own address for these filters."""
        return urlencode(self._pairs("experiment") + ([("skip", skip)] if skip else []))

    def api_query(self, skip: int, limit: int) -> str:
        """The same runs from /api/runs, which the page polls."""
        return urlencode([*self._pairs("experiment_id"), ("skip", skip), ("limit", limit)])

    def _pairs(self, experiment_key: str) -> list[tuple[str, str | int]]:
        pairs: list[tuple[str, str | int]] = [(experiment_key, self.experiment or "")]
        pairs += [("model", self.model or ""), ("strategy", self.strategy or ""), ("owner", self.owner or "")]
        return [(key, value) for key, value in pairs if value] + [("state", state.value) for state in self.state]


def _choice(kind: type[E], value: str, name: str) -> E | None:
    """A filter's value; the empty choice of the filter form means any."""
    if not value:
        return None
    try:
        return kind(value)
    except ValueError:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, f"{name} is one of: {', '.join(kind)}") from None


class ExperimentChoice(NamedTuple):
    id: str
    name: str


# The filter's 200 newest experiments change only when one is made, renamed or deleted.
_options_html: Memo[Markup] = Memo(1_000)


def experiment_options(choices: list[ExperimentChoice], chosen: str | None) -> Markup:
    """The experiment filter's options, made once for as long as the choices are the same.

    Written here rather than by a template: on a busy instance a new experiment every few seconds changes them, and
    Jinja's escaping (a Markup object per value, 600 for 200 options) made them a third of the runs page's time."""

    def option(choice: ExperimentChoice) -> str:
        selected = " selected" if choice.id == chosen else ""
        value, name = html.escape(choice.id), html.escape(choice.name)
        return f'<option value="{value}"{selected}>{name} ({value})</option>'

    return _options_html.get((tuple(choices), chosen), lambda: Markup("".join(map(option, choices))))  # noqa: S704


@router.get("/runs", response_class=HTMLResponse)
def runs_page(
    request: Request,
    session: SessionDep,
    user: CurrentUser,
    experiment: Annotated[str, Query(max_length=16)] = "",
    state: Annotated[list[str] | None, Query(max_length=len(RunState))] = None,
    model: Annotated[str, Query(max_length=32)] = "",
    strategy: Annotated[str, Query(max_length=32)] = "",
    owner: Annotated[str, Query(max_length=32)] = "",
    skip: Annotated[int, Query(ge=0, le=MAX_SKIP)] = 0,
) -> HTMLResponse:
    states = [_choice(RunState, value, "state") for value in state or []]
    filters = RunFilters(
        experiment or None,
        [value for value in states if value is not None],
        _choice(Model, model, "model"),
        _choice(Strategy, strategy, "strategy"),
        owner or None,
    )
    query = runs.runs_query(
        filters.experiment, filters.state, filters.model, filters.strategy, filters.owner, viewer=user
    )
    count = runs.count_of(session, query)
    rows = listed_rows(session, query.offset(skip).limit(RUNS_PER_PAGE), root_of(request))
    # The filter's choices need only ids and names: the experiments' requests and state counts, which the API's
    # list carries, were half of this page's time under 10,000 runs.
    choices = [
        ExperimentChoice(*row)
        for row in session.exec(
            select(Experiment.id, Experiment.name)
            .where(visibility.visible(user))
            .order_by(col(Experiment.created_at).desc())
            .limit(EXPERIMENT_CHOICES)
        ).all()
    ]
    chosen = session.get(Experiment, filters.experiment) if filters.experiment else None
    if chosen is not None and not visibility.may_see(user, chosen):
        chosen = None
    if chosen is not None and all(e.id != chosen.id for e in choices):
        choices.insert(0, ExperimentChoice(chosen.id, chosen.name))
    return render(
        request,
        "runs.html",
        {
            "rows": rows,
            "count": count,
            "skip": skip,
            "per_page": RUNS_PER_PAGE,
            "page_data": {
                "runs_query": filters.api_query(skip, RUNS_PER_PAGE),
                "first_page": skip == 0,
                "count": count,
            },
            "filters": filters,
            "experiment": chosen,
            "experiment_options": experiment_options(choices, filters.experiment),
            "states": list(RunState),
            "models": list(Model),
            "strategies": list(Strategy),
            # The owners of what the user may see: the filter names no one else (a list of every Unix user who
            # ever signed in is not everyone's to read).
            "owners": session.exec(
                select(Experiment.owner)
                .where(visibility.visible(user), col(Experiment.owner).is_not(None))
                .distinct()
                .order_by(col(Experiment.owner))
            ).all(),
        },
    )


@dataclass(frozen=True)
class ProgramView:
    """A program run's program as its page shows it: the command as one could type it again, never run from here."""

    command: str
    workdir: str
    launcher: str
    image: str | None
    params: dict[str, Any]
    env_names: list[str]  # only the names: a value may be a secret the program needs
    by_env: bool = False  # params_style env: the parameters are variables only, no words after the command
    cwd: str = "workdir"  # where it starts: its workdir, or its run's own directory


def program_view(spec: dict[str, Any]) -> ProgramView | None:
    if spec.get("kind") != RunKind.program or not spec.get("program"):
        return None
    program = ProgramSpec.model_validate(spec["program"])
    return ProgramView(
        command=shlex.join(program.command),
        workdir=program.workdir,
        launcher=program.launcher,
        image=program.image,
        params=dict(program.params),
        env_names=sorted(program.env),
        by_env=program.params_style is ParamsStyle.env,
        cwd=program.cwd,
    )


def shown_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """The spec fields a run's kind reads, without the program, which has a section of its own."""
    return {key: value for key, value in settings_of(spec).items() if key != "program"}


def resubmit_label(checkpoints: list[int], program: ProgramView | None) -> str:
    """What submitting a run again does: the worker resumes from its last checkpoint; without one it starts over,
    and a program does what its own code does (scalelab keeps no checkpoint of it)."""
    if checkpoints:
        return f"Resubmit (resumes from its checkpoint of epoch {checkpoints[-1]})"
    if program is not None:
        return "Resubmit (runs the program again in the same run directory)"
    return "Resubmit (starts over: it left no checkpoint)"


def _code_context(session: Session, run: Run, profile: ClusterProfile | None, is_program: bool) -> dict[str, Any]:
    if not is_program:
        return {"code": None, "rerun_code": None}
    records = code.code_records(session, [run.id, *([run.rerun_of] if run.rerun_of else [])])
    original = session.get(Run, run.rerun_of) if run.rerun_of else None
    shown = code.run_code(run, records.get(run.id), profile)
    if original is None:
        return {"code": shown, "rerun_code": None}
    then = code.run_code(original, records.get(original.id), profile)
    return {"code": shown, "rerun_code": code.against_original(records.get(run.id), records.get(original.id), then)}


@router.get("/runs/{run_id}", response_class=HTMLResponse)
def run_page(
    request: Request, run_id: str, session: SessionDep, catalog: ProfilesDep, user: CurrentUser
) -> HTMLResponse:
    run = session.get(Run, run_id)
    if run is None or not visibility.may_see_run(session, user, run):
        return _not_found(request, f"There is no run {run_id!r}.")
    records = runs.records_of(session, run.id, ["start", "resume"])
    starts = [metric.record for metric in records if metric.kind == "start"]
    profile = catalog.profiles.get(run.profile) if run.profile else None
    yours = may_change(user, run.owner)
    program = program_view(run.spec)
    checkpoints = rundirs.checkpoint_epochs(Path(run.run_dir), rundirs.file_owner(run))
    kind = str(run.spec.get("kind") or RunKind.train)  # as stored: perhaps by another version of scalelab
    return render(
        request,
        "run.html",
        {
            "run": run,
            # The part that shows what the run measured follows its kind (a probe's busbw curves and fits, an
            # inference run's generation figures, a training run's curves), as its experiment's page does.
            "kind": kind,
            "probe": fabric.probe_run(session, run) if kind == RunKind.probe else None,
            "probe_seconds": run.spec.get("probe_seconds") or PROBE_SECONDS_DEFAULT,
            "program": program,
            # Which code it started, whether its script is the same now (what a run again would start), and, for a
            # run again, against the run it repeats.
            **_code_context(session, run, profile, program is not None),
            "spec": shown_spec(run.spec),
            "experiment": session.get(Experiment, run.experiment_id),
            "summary": session.get(RunSummary, run.id),
            "start": starts[-1] if starts else None,
            "starts": len(starts),
            "resumes": [metric.record for metric in records if metric.kind == "resume"],
            "events": runs.events_of(session, run.id),
            "script": secrets.script_for(
                user, run.owner, rundirs.read_script(Path(run.run_dir), rundirs.file_owner(run)), run.spec
            ),
            "checkpoints": checkpoints,
            "container": profile.container if profile else None,
            "no_digest_because": why_no_digest(run.image, run.image_digest, profile.container if profile else None),
            # The buttons the API would refuse are not shown: the same rules decide both.
            "cancellable": yours and why_not_cancel(run) is None,
            "resubmittable": yours and why_not_resubmit(run) is None,
            "resubmit_label": resubmit_label(checkpoints, program),
            # A new run of the same spec on the digest this one ran on (POST /api/runs/{id}/rerun).
            "repeatable": yours and why_not_rerun(run, profile.container.runtime if profile else None) is None,
            "page_data": {
                "run_id": run.id,
                "experiment_id": run.experiment_id,
                "kind": kind,
                "epochs": planned_epochs(run.spec),
                "state": run.state,
            },
        },
    )


def _rerun_kinds(session: Session, experiment: Experiment, user: User | None) -> dict[str, int]:
    """What the "Rerun the failed" form offers, to whoever may change the experiment: how many failed runs not
    rerun yet there are of each failure kind ("" for those not classified)."""
    if not may_change(user, experiment.owner):
        return {}
    failed = failed_not_rerun(runs.runs_of_experiment(session, experiment.id))
    return dict(Counter(run.failure_kind or "" for run in failed))


# The page of an experiment whose runs are not training runs (a program's are: the dashboard reads its records).
_EXPERIMENT_PAGES = {RunKind.inference: "inference.html", RunKind.probe: "probe.html"}


@router.get("/experiments/{experiment_id}", response_class=HTMLResponse)
def experiment_dashboard(request: Request, experiment_id: str, session: SessionDep, user: CurrentUser) -> HTMLResponse:
    experiment = session.get(Experiment, experiment_id)
    if experiment is None or not visibility.may_see(user, experiment):
        return _not_found(request, f"There is no experiment {experiment_id!r}.")
    return render(
        request,
        _EXPERIMENT_PAGES.get(experiments.kind_of(session, experiment), "dashboard.html"),
        {
            "title": experiment.name,
            "experiment": experiments.experiment_public(session, experiment, user),
            "request_json": json.dumps(secrets.request_for(user, experiment.owner, experiment.request), indent=2),
            "who_sees": visibility.who_sees(experiment),
            "may_share": may_change(user, experiment.owner),
            "rerun_kinds": _rerun_kinds(session, experiment, user),
            "failures": failure_summary(session, experiment),
            "page_data": {"mode": "experiment", "experiments": [experiment.id], "runs": None, "name": experiment.name},
        },
    )


@router.get("/compare", response_class=HTMLResponse)
def compare_selection(
    request: Request,
    session: SessionDep,
    user: CurrentUser,
    run: Annotated[
        list[Annotated[str, StringConstraints(max_length=16)]] | None, Query(max_length=MAX_RUNS_PER_EXPERIMENT)
    ] = None,
) -> HTMLResponse:
    wanted = list(dict.fromkeys(run or []))
    named = select(Run.id, Run.experiment_id).where(col(Run.id).in_(wanted))
    found = session.exec(visibility.only_visible(named, user, Run.experiment_id)).all()
    experiment_of = dict(found)
    missing = [run_id for run_id in wanted if run_id not in experiment_of]
    selected = [run_id for run_id in wanted if run_id in experiment_of]
    return render(
        request,
        "dashboard.html",
        {
            "title": f"{len(selected)} selected runs",
            "experiment": None,
            "missing": missing,
            "page_data": {
                "mode": "selection",
                "experiments": sorted(set(experiment_of.values())),
                "runs": selected,
                "name": "selection",
            },
        },
    )


@router.get("/fabric", response_class=HTMLResponse)
def fabric_page(request: Request) -> HTMLResponse:
    """The fabric probes' curves and fits, which the page reads from GET /api/fabric: all of them, or those of the
    shape its address names (?nodes=2&processes_per_node=2&...: fabric.js passes them on as the listing's filters)."""
    return render(request, "fabric.html", {})


_PLOTLY_HEADERS = {"Cache-Control": "public, max-age=86400"}


@router.get("/vendor/plotly.min.js")
def plotly_js(request: Request) -> Response:
    """plotly.js from the installed plotly package: no CDN, since login nodes are often offline."""
    spec = importlib.util.find_spec("plotly")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        raise HTTPException(status.HTTP_404_NOT_FOUND, "plotly is not installed on the server: pip install plotly")
    path = Path(next(iter(spec.submodule_search_locations))) / "package_data" / "plotly.min.js"
    if not path.is_file():
        raise HTTPException(status.HTTP_404_NOT_FOUND, "the installed plotly package has no plotly.min.js")
    if "gzip" in request.headers.get("accept-encoding", ""):
        headers = {**_PLOTLY_HEADERS, "Content-Encoding": "gzip", "Vary": "Accept-Encoding"}
        return Response(_gzipped(path), media_type="text/javascript", headers=headers)
    return FileResponse(path, media_type="text/javascript", headers=_PLOTLY_HEADERS)


@functools.cache
def _gzipped(path: Path) -> bytes:
    """The file compressed once, as tightly as gzip can: the server compresses answers quickly instead (level 1),
    which leaves 4.8 MB of plotly.js at 1.7 MB, and took 0.1 s of CPU each time it was sent."""
    return gzip.compress(path.read_bytes(), compresslevel=9, mtime=0)
