"""The pages people use: server-rendered templates over the same data the REST API serves.

Every page route lives in this one router, so that authentication (a CurrentUser dependency) and a CSRF token
for the forms can be added in one place. Pages only read: what a page changes goes through the JSON API
(fetch from the page's scripts), where the API's own checks apply.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal, NamedTuple, TypeVar
from urllib.parse import urlencode

from fastapi import APIRouter, HTTPException, Query, Request, status
from fastapi.responses import FileResponse, HTMLResponse
from fastapi.templating import Jinja2Templates
from pydantic import StringConstraints
from sqlmodel import col, select

from contract.rundir import CHECKPOINTS_DIR, SCRIPT_FILE, checkpoint_epoch
from contract.spec import Model, RunKind, RunSpec, Strategy
from contract.states import FINAL_STATES, RunState
from server import __version__
from server.api import experiments as experiments_api
from server.api import runs as runs_api
from server.api.deps import MAX_SKIP, CurrentUser, ProfilesDep, SchedulerDep, SessionDep
from server.api.errors import may_change
from server.models import (
    MAX_PROMPTS,
    MAX_PROMPTS_CHARS,
    RESUBMITTABLE_STATES,
    Experiment,
    ExperimentCreate,
    Metric,
    Resources,
    Run,
    RunEvent,
    RunSummary,
    User,
)
from server.services.inference import has_checkpoint
from server.services.submission import PINNABLE_RUNTIMES
from server.services.sweep import MAX_RUNS, SpecBase, SpecGrid

FRONTEND = Path(__file__).resolve().parents[2] / "frontend"
STATIC_DIR = FRONTEND / "static"
MAX_SCRIPT_BYTES = 256 * 1024
RUNS_PER_PAGE = 100
EXPERIMENT_CHOICES = 200  # the newest, in the runs page's experiment filter
E = TypeVar("E", bound=StrEnum)

router = APIRouter(include_in_schema=False)
templates = Jinja2Templates(directory=FRONTEND / "templates")


def render(request: Request, name: str, context: dict[str, Any], status_code: int = 200) -> HTMLResponse:
    root = request.scope.get("root_path", "")
    base = {
        "root": root,
        "version": __version__,
        "static": lambda path: f"{root}/static/{path}?v={__version__}",
        "final_states": sorted(FINAL_STATES),
        "progress": progress_text,
        "reason": reason_text,
    }
    base["user"] = getattr(request.state, "user", None)
    base["csrf_token"] = getattr(request.state, "csrf_token", None)
    return templates.TemplateResponse(request, name, {**base, **context}, status_code=status_code)


def duration_text(seconds: float) -> str:
    """Like format.js's duration(): the words the pages' scripts use when they update the same text."""
    if seconds < 60:
        return f"{max(0, round(seconds))} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"


def progress_text(state: RunState, epochs_done: int, epochs: int | None, mean_epoch_time_s: float | None) -> str:
    """Like format.js's progress(): "epoch 2 of 5, about 3 min left" while running, "5 of 5 epochs" after."""
    if not epochs:
        return ""
    if state is not RunState.running:
        return f"{epochs_done} of {epochs} epochs" if epochs_done else ""
    text = f"epoch {min(epochs_done + 1, epochs)} of {epochs}"
    if not epochs_done or not mean_epoch_time_s:
        return text
    return f"{text}, about {duration_text((epochs - epochs_done) * mean_epoch_time_s)} left"


def reason_text(run: Run) -> str:
    """Like runs.js's reason(): why a run waits, or what went wrong with it."""
    if run.waiting:
        return "waits for a free slot (the experiment's max_concurrent)"
    if run.state in (RunState.submitted, RunState.pending) and run.scheduler_reason not in (None, "None"):
        return f"Slurm: {run.scheduler_reason}"
    if run.state.is_final and run.state is not RunState.completed:
        return run.message or (f"Slurm: {run.scheduler_reason}" if run.scheduler_reason not in (None, "None") else "")
    return ""


def _not_found(request: Request, what: str) -> HTMLResponse:
    return render(request, "error.html", {"title": "Not found", "message": what}, status.HTTP_404_NOT_FOUND)


# ---- the form's fields, from the models -------------------------------------------------------------------------

# Groups only order the form; a spec field named in none of them still appears, under "Other settings".
_GROUPS: dict[str, tuple[str, ...]] = {
    "Model and data": ("kind", "model", "dataset", "depth", "width", "heads", "context"),
    "Parallelism": ("strategy", "nodes", "gpus", "tp_degree", "fsdp_sharding", "pp_schedule", "microbatches"),
    "Training": (
        "epochs",
        "steps_per_epoch",
        "global_batch_size",
        "grad_accum_steps",
        "lr",
        "precision",
        "compile",
        "activation_checkpointing",
        "seed",
    ),
    "Checkpoints and logging": ("checkpoint_every", "step_log_every"),
    "Inference": ("max_new_tokens", "temperature", "top_k"),
}
_OTHER_GROUP = "Other settings"
_LABELS = {
    "gpus": "GPUs",
    "lr": "Learning rate",
    "dataset": "Data set",
    "tp_degree": "Tensor-parallel degree",
    "pp_schedule": "Pipeline schedule",
    "fsdp_sharding": "FSDP sharding",
    "grad_accum_steps": "Gradient accumulation steps",
    "time_limit": "Time limit",
    "max_concurrent": "Runs in Slurm at once, at most",
}
# Resources with widgets of their own (they depend on the chosen profile), or shown among the spec fields.
_RESOURCES_BY_HAND = frozenset({"profile", "partition", "sbatch_options"})


@dataclass(frozen=True)
class FormField:
    """One input of the form, described from a pydantic model's JSON schema."""

    name: str
    label: str
    kind: Literal["choice", "int", "float", "bool", "text"]
    default: Any
    optional: bool
    description: str
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: float | None = None
    fixed_in: str | None = None  # where one value goes: "base" or "resources"; None: it can only be swept
    sweepable: bool = False

    @property
    def bounds(self) -> str:
        """The allowed range, in words."""
        if self.minimum is not None and self.maximum is not None:
            return f"{_number(self.minimum)} to {_number(self.maximum)}"
        parts = []
        if self.minimum is not None:
            parts.append(f"at least {_number(self.minimum)}")
        if self.exclusive_minimum is not None:
            parts.append(f"more than {_number(self.exclusive_minimum)}")
        if self.maximum is not None:
            parts.append(f"at most {_number(self.maximum)}")
        return ", ".join(parts)


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _label(name: str) -> str:
    return _LABELS.get(name) or name.replace("_", " ").capitalize()


def _form_field(name: str, schema: dict[str, Any], defs: dict[str, Any], **where: Any) -> FormField:
    options = [option for option in schema.get("anyOf", [schema]) if option.get("type") != "null"]
    optional = len(options) < len(schema.get("anyOf", [schema]))
    shape = options[0] if options else {}
    if "$ref" in schema or "$ref" in shape:
        shape = defs[(schema.get("$ref") or shape["$ref"]).rsplit("/", 1)[1]]
    kinds: dict[str, Literal["int", "float", "bool", "text"]] = {
        "integer": "int",
        "number": "float",
        "boolean": "bool",
        "string": "text",
    }
    kind: Literal["choice", "int", "float", "bool", "text"] = (
        "choice" if "enum" in shape else kinds.get(shape.get("type", "string"), "text")
    )
    return FormField(
        name=name,
        label=_label(name),
        kind=kind,
        default=schema.get("default"),
        optional=optional,
        description=schema.get("description") or shape.get("description") or "",
        choices=tuple(str(choice) for choice in shape.get("enum", ())),
        minimum=shape.get("minimum"),
        maximum=shape.get("maximum"),
        exclusive_minimum=shape.get("exclusiveMinimum"),
        **where,
    )


def spec_fields() -> list[tuple[str, list[FormField]]]:
    """Every run spec field, grouped: a new field of RunSpec appears in the form by itself."""
    schema = RunSpec.model_json_schema()
    fields = {}
    for name, prop in schema["properties"].items():
        if name not in SpecBase.model_fields and name not in SpecGrid.model_fields:
            continue  # set by the server (an inference run's checkpoint), not in the form
        fixed_in = "base" if name in SpecBase.model_fields else "resources" if name in Resources.model_fields else None
        fields[name] = _form_field(
            name, prop, schema.get("$defs", {}), fixed_in=fixed_in, sweepable=name in SpecGrid.model_fields
        )
    groups = [(title, [fields.pop(name) for name in names if name in fields]) for title, names in _GROUPS.items()]
    groups.append((_OTHER_GROUP, list(fields.values())))
    return [(title, members) for title, members in groups if members]


def resource_fields() -> list[FormField]:
    """The experiment's resources that take one plain value (the profile's own widgets aside)."""
    schema = Resources.model_json_schema()
    in_spec = set(RunSpec.model_fields)
    return [
        _form_field(name, prop, schema.get("$defs", {}), fixed_in="resources")
        for name, prop in schema["properties"].items()
        if name not in _RESOURCES_BY_HAND and name not in in_spec
    ]


def _choices_of(model: type[ExperimentCreate], name: str) -> list[str]:
    prop = model.model_json_schema()["properties"][name]
    return [str(choice) for choice in prop.get("enum", ())]


# ---- pages -------------------------------------------------------------------------------------------------------


@router.get("/", response_class=HTMLResponse)
def index(request: Request, session: SessionDep, scheduler: SchedulerDep) -> HTMLResponse:
    latest = experiments_api.list_experiments(session, skip=0, limit=20)
    return render(request, "index.html", {"experiments": latest.data, "scheduler": scheduler.name})


# The default sweep a new form starts from: a scaling study over GPU counts.
_STARTING_REQUEST: dict[str, Any] = {"name": "", "grid": {"gpus": [1, 2, 4]}}


@router.get("/experiments/new", response_class=HTMLResponse)
def new_experiment(
    request: Request,
    session: SessionDep,
    catalog: ProfilesDep,
    from_: Annotated[str | None, Query(alias="from", max_length=16, description="an experiment to start from")] = None,
) -> HTMLResponse:
    start = _STARTING_REQUEST
    source = session.get(Experiment, from_) if from_ else None
    if source is not None:
        start = {**source.request, "name": f"{source.name} (again)"[:200]}
    return render(
        request,
        "experiment_new.html",
        {
            "groups": spec_fields(),
            "resources": resource_fields(),
            "on_invalid": _choices_of(ExperimentCreate, "on_invalid"),
            "default_profile": catalog.default,
            "start": start,
            "source": source,
            "max_runs": MAX_RUNS,
            "checkpoint_runs": _checkpoint_runs(session),
            "max_prompts": MAX_PROMPTS,
            "max_prompts_kib": MAX_PROMPTS_CHARS // 1024,
        },
    )


# The form offers the newest finished gpt runs to generate from; an older one can still be named by id in the API.
MAX_CHECKPOINT_CHOICES = 100


def _checkpoint_runs(session: SessionDep) -> list[dict[str, str]]:
    """Completed gpt training runs on text that saved a checkpoint: what an inference experiment can load."""
    query = runs_api.runs_query(states=[RunState.completed], model=Model.gpt).limit(4 * MAX_CHECKPOINT_CHOICES)
    choices = []
    for run in session.exec(query).all():
        spec = run.spec
        trained_on_text = spec.get("kind", "train") == "train" and spec.get("dataset") == "text"
        if not trained_on_text or not has_checkpoint(Path(run.run_dir)):
            continue
        shape = ", ".join(f"{name} {spec[name]}" for name in ("width", "depth", "heads", "context") if spec.get(name))
        layout = f"{spec['strategy']} on {spec['gpus']} GPUs"
        choices.append({"id": run.id, "label": f"{run.id}: gpt {shape or 'of the default size'}, {layout}"})
        if len(choices) == MAX_CHECKPOINT_CHOICES:
            break
    return choices


@dataclass
class RunRow:
    run: Run
    experiment_name: str
    summary: RunSummary | None

    @property
    def spec(self) -> dict[str, Any]:
        return self.run.spec

    @property
    def epochs_done(self) -> int:
        return self.summary.epochs_done if self.summary else 0

    @property
    def mean_epoch_time_s(self) -> float | None:
        return self.summary.mean_epoch_time_s if self.summary else None


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


@router.get("/runs", response_class=HTMLResponse)
def runs_page(
    request: Request,
    session: SessionDep,
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
    query = runs_api.runs_query(filters.experiment, filters.state, filters.model, filters.strategy, filters.owner)
    count = runs_api.count_of(session, query)
    runs = session.exec(query.offset(skip).limit(RUNS_PER_PAGE)).all()
    ids = [run.id for run in runs]
    summaries = {s.run_id: s for s in session.exec(select(RunSummary).where(col(RunSummary.run_id).in_(ids))).all()}
    names = dict(
        session.exec(
            select(Experiment.id, Experiment.name).where(col(Experiment.id).in_({run.experiment_id for run in runs}))
        ).all()
    )
    # The filter's choices need only ids and names: the experiments' requests and state counts, which the API's
    # list carries, were half of this page's time under 10,000 runs.
    choices = [
        ExperimentChoice(*row)
        for row in session.exec(
            select(Experiment.id, Experiment.name).order_by(col(Experiment.created_at).desc()).limit(EXPERIMENT_CHOICES)
        ).all()
    ]
    chosen = session.get(Experiment, filters.experiment) if filters.experiment else None
    if chosen is not None and all(e.id != chosen.id for e in choices):
        choices.insert(0, ExperimentChoice(chosen.id, chosen.name))
    return render(
        request,
        "runs.html",
        {
            "rows": [RunRow(run, names.get(run.experiment_id, ""), summaries.get(run.id)) for run in runs],
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
            "experiments": choices,
            "states": list(RunState),
            "models": list(Model),
            "strategies": list(Strategy),
            "owners": session.exec(select(User.name).order_by(col(User.name))).all(),
        },
    )


def _read_script(run: Run) -> str | None:
    """The run's batch script as written at submission; None if it cannot be read as a file of its directory."""
    run_dir = Path(run.run_dir)
    script = run_dir / SCRIPT_FILE
    if script.is_symlink() or not script.resolve().is_relative_to(run_dir.resolve()):
        return None
    try:
        with script.open("rb") as handle:
            return handle.read(MAX_SCRIPT_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return None


def _checkpoints(run: Run) -> list[int]:
    """Epochs of the complete checkpoints in the run's directory (the worker renames one into place when done)."""
    directory = Path(run.run_dir) / CHECKPOINTS_DIR
    try:
        names = [entry.name for entry in directory.iterdir() if entry.is_dir() and not entry.is_symlink()]
    except OSError:
        return []
    return sorted(epoch for name in names if (epoch := checkpoint_epoch(name)) is not None)


@router.get("/runs/{run_id}", response_class=HTMLResponse)
def run_page(
    request: Request, run_id: str, session: SessionDep, catalog: ProfilesDep, user: CurrentUser
) -> HTMLResponse:
    run = session.get(Run, run_id)
    if run is None:
        return _not_found(request, f"There is no run {run_id!r}.")
    experiment = session.get(Experiment, run.experiment_id)
    records = session.exec(
        select(Metric)
        .where(Metric.run_id == run.id, col(Metric.kind).in_(["start", "resume"]))
        .order_by(col(Metric.offset))
    ).all()
    starts = [metric.record for metric in records if metric.kind == "start"]
    events = session.exec(select(RunEvent).where(RunEvent.run_id == run.id).order_by(col(RunEvent.id))).all()
    profile = catalog.profiles.get(run.profile) if run.profile else None
    return render(
        request,
        "run.html",
        {
            "run": run,
            "experiment": experiment,
            "summary": session.get(RunSummary, run.id),
            "start": starts[-1] if starts else None,
            "starts": len(starts),
            "resumes": [metric.record for metric in records if metric.kind == "resume"],
            "events": events,
            "script": _read_script(run),
            "checkpoints": _checkpoints(run),
            "container": profile.container if profile else None,
            "cancellable": not run.state.is_final and may_change(user, run.owner),
            "resubmittable": run.state in RESUBMITTABLE_STATES
            and run.scheduler != "import"
            and may_change(user, run.owner),
            # A new run of the same spec on the digest this one ran on (POST /api/runs/{id}/rerun).
            "repeatable": run.image_digest is not None
            and run.scheduler != "import"
            and profile is not None
            and profile.container.runtime in PINNABLE_RUNTIMES
            and may_change(user, run.owner),
            "page_data": {"run_id": run.id, "epochs": run.spec.get("epochs"), "state": run.state},
        },
    )


@router.get("/experiments/{experiment_id}", response_class=HTMLResponse)
def experiment_dashboard(request: Request, experiment_id: str, session: SessionDep) -> HTMLResponse:
    experiment = session.get(Experiment, experiment_id)
    if experiment is None:
        return _not_found(request, f"There is no experiment {experiment_id!r}.")
    public = experiments_api.experiment_public(session, experiment)
    inference = (experiment.request.get("base") or {}).get("kind") == RunKind.inference.value
    return render(
        request,
        "inference.html" if inference else "dashboard.html",
        {
            "title": experiment.name,
            "experiment": public,
            "request_json": json.dumps(experiment.request, indent=2),
            "page_data": {"mode": "experiment", "experiments": [experiment.id], "runs": None, "name": experiment.name},
        },
    )


@router.get("/compare", response_class=HTMLResponse)
def compare_selection(
    request: Request,
    session: SessionDep,
    run: Annotated[list[Annotated[str, StringConstraints(max_length=16)]] | None, Query(max_length=MAX_RUNS)] = None,
) -> HTMLResponse:
    wanted = list(dict.fromkeys(run or []))
    found = session.exec(select(Run.id, Run.experiment_id).where(col(Run.id).in_(wanted))).all()
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


@router.get("/vendor/plotly.min.js")
def plotly_js() -> FileResponse:
    """plotly.js from the installed plotly package: no CDN, since login nodes are often offline."""
    spec = importlib.util.find_spec("plotly")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        raise HTTPException(status.HTTP_404_NOT_FOUND, "plotly is not installed on the server: pip install plotly")
    path = Path(next(iter(spec.submodule_search_locations))) / "package_data" / "plotly.min.js"
    if not path.is_file():
        raise HTTPException(status.HTTP_404_NOT_FOUND, "the installed plotly package has no plotly.min.js")
    return FileResponse(path, media_type="text/javascript", headers={"Cache-Control": "public, max-age=86400"})
