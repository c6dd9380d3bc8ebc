"""An experiment: the request that describes it (fixed spec fields, a grid to sweep, resources, and for inference
its checkpoint and prompts), the table that keeps that request, and what the API answers about it.

The request's `base` and `grid` sections are built here from RunSpec, with the limits on how large a grid may be:
they are what the API accepts, so they sit beside the request; server.services.sweep expands them into runs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any, Literal, cast

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints, create_model, field_validator
from sqlalchemy import JSON, Column
from sqlmodel import Field as SQLField
from sqlmodel import SQLModel

from contract.changes import apply_changes
from contract.program import PARAM_NAME, PARAM_PREFIX, ParamValue
from contract.spec import SERVER_FIELDS, RunSpec
from contract.target import Target
from server.models.card import CardOriginPublic
from server.models.common import new_id, showable, utcnow
from server.models.inference import InferenceInput
from server.models.run import RunPublic
from server.timelimit import TimeLimit

MAX_RUNS_PER_EXPERIMENT = 256
MAX_VALUES = 64
MAX_REPEATS = 20
Isolation = Literal["exclusive", "shared"]


def isolation_of(request: Mapping[str, Any]) -> Isolation:
    """The isolation a request asks for (one as submitted, or as an experiment stores it): its own, else exclusive
    for training and shared for inference."""
    isolation = request.get("isolation")
    if isolation in ("exclusive", "shared"):
        return cast(Isolation, isolation)
    return "shared" if (request.get("base") or {}).get("kind") == "inference" else "exclusive"


# What a sweep does after a run fails in a way that repeats at any size (server/services/failed_runs.py).
OnFailure = Literal["continue", "stop_series", "stop_all"]
ON_FAILURE_DEFAULT: OnFailure = "stop_series"


def on_failure_of(request: Mapping[str, Any]) -> OnFailure:
    """An experiment's on_failure, as its stored request says it (the default for one stored before it existed)."""
    value = request.get("on_failure")
    return cast(OnFailure, value) if value in ("continue", "stop_series", "stop_all") else ON_FAILURE_DEFAULT


OnHang = Literal["cancel", "keep"]
ON_HANG_DESCRIPTION = (
    "a run found stalled (no new record for longer than its bound, which follows its own pace): cancel its job "
    "once every rank's stacks are read, so that it stops costing its allocation (it ends failed, hung); keep: "
    "flag it stalled, with the verdict, and let it run"
)


def on_hang_of(request: Mapping[str, Any]) -> OnHang:
    """What to do with a stalled run, as a request asks (one as an experiment stores it): cancel unless it says keep."""
    return "keep" if request.get("on_hang") == "keep" else "cancel"


# Who besides its owner and the admins sees an experiment (read-only): nobody, a Unix group's members, everyone.
Sharing = Literal["private", "group", "everyone"]
# `nodes` is set by the experiment's resources (or swept in the grid), not in `base`; the server's fields from the
# experiment as a whole (an inference run's checkpoint, the target, a learning-rate rule's reference).
_NOT_IN_BASE = frozenset({"nodes"}) | SERVER_FIELDS
# One experiment is of one kind, reads one checkpoint and has one target; a program is one program, whose
# parameters are swept one by one as `params.NAME`.
_NOT_IN_GRID = frozenset({"kind", "program"}) | SERVER_FIELDS
# A grid's key that sweeps a program's parameter: "params.lr".
_PARAM_AXIS = "^" + PARAM_PREFIX.replace(".", r"\.") + PARAM_NAME.removeprefix("^")


def _field_type(name: str) -> Any:
    info = RunSpec.model_fields[name]
    return Annotated[info.annotation, *info.metadata] if info.metadata else info.annotation


def _base_fields() -> dict[str, Any]:
    return {
        name: (_field_type(name) | None, Field(default=None, description=info.description))
        for name, info in RunSpec.model_fields.items()
        if name not in _NOT_IN_BASE
    }


def _grid_fields() -> dict[str, Any]:
    return {
        name: (
            list[_field_type(name)] | None,  # type: ignore[misc]
            Field(default=None, min_length=1, max_length=MAX_VALUES, description=info.description),
        )
        for name, info in RunSpec.model_fields.items()
        if name not in _NOT_IN_GRID
    }


def _param_axis(key: object) -> object:
    # Said in words: the pattern alone would tell a mistyped field name only what a parameter's key looks like.
    if isinstance(key, str) and not re.match(_PARAM_AXIS, key):
        raise ValueError(
            f"{key[:64]!r} cannot be swept: a grid sweeps the run spec's fields (but {', '.join(sorted(_NOT_IN_GRID))})"
            f" and a program's parameters as {PARAM_PREFIX}NAME (NAME: a lowercase letter, then lowercase letters, "
            "digits or _)"
        )
    return key


class _ParamAxes(BaseModel):
    """The keys besides the spec's fields that a grid takes: a program's parameters, `params.NAME`."""

    model_config = ConfigDict(extra="allow")

    __pydantic_extra__: dict[
        Annotated[str, StringConstraints(pattern=_PARAM_AXIS), BeforeValidator(_param_axis)],
        Annotated[list[ParamValue], Field(min_length=1, max_length=MAX_VALUES)],
    ] = Field(init=False)


_forbid_extra = ConfigDict(extra="forbid")
# Built from RunSpec so that every spec field can be fixed or swept, with the same types and bounds.
SpecBase: type[BaseModel] = create_model("SpecBase", __config__=_forbid_extra, **_base_fields())
SpecGrid: type[BaseModel] = create_model("SpecGrid", __base__=_ParamAxes, **_grid_fields())

OptionValue = Annotated[str, StringConstraints(max_length=64)] | Annotated[int, Field(ge=-(10**9), le=10**9)]


class Resources(BaseModel):
    model_config = ConfigDict(extra="forbid")

    profile: str | None = Field(
        default=None, max_length=64, description="cluster profile (GET /api/profiles); default: the server's"
    )
    partition: str | None = Field(
        default=None, max_length=64, description="a partition of the profile; default: the profile's"
    )
    nodes: Annotated[int, Field(ge=1, le=1024)] = 1
    time_limit: TimeLimit = Field(default="00:10:00", description="Slurm wall-time limit, [D-]HH:MM:SS")
    sbatch_options: dict[Annotated[str, StringConstraints(max_length=40)], OptionValue] = Field(
        default={}, max_length=32, description="more sbatch options, among those the profile allows"
    )
    max_concurrent: int | None = Field(
        default=None,
        ge=1,
        le=MAX_RUNS_PER_EXPERIMENT,
        description="at most this many runs of the experiment in Slurm at once: an experiment submitted as one "
        "Slurm job array is throttled by Slurm (`--array=...%K`); otherwise the rest wait in scalelab",
    )


class ExperimentBase(SQLModel):
    name: str = SQLField(min_length=1, max_length=200, description="free text, shown on the dashboard")

    @field_validator("name")
    @classmethod
    def _showable(cls, name: str) -> str:
        return showable(name)


class ExperimentCreate(ExperimentBase):
    """An experiment: fixed spec fields in `base`, and lists of values to sweep in `grid`."""

    model_config = ConfigDict(extra="forbid")  # type: ignore[assignment]

    base: SpecBase = Field(
        default_factory=SpecBase, description="run spec fields shared by every run; unset ones take their defaults"
    )
    grid: SpecGrid = Field(
        default_factory=SpecGrid,
        description="run spec field -> values to sweep; one run per combination",
        examples=[{"strategy": ["ddp"], "gpus": [1, 2, 4]}],
    )
    resources: Resources = Field(default_factory=Resources)
    on_invalid: Literal["refuse", "skip"] = Field(
        default="refuse",
        description="grid combinations that cannot run: refuse the experiment (422 naming each), "
        "or skip them and submit the rest (the response lists what was skipped and why)",
    )
    on_failure: OnFailure = Field(
        default=ON_FAILURE_DEFAULT,
        description="after a run fails in a way that fails again at any size (import_error, program_error): "
        "continue with the rest; stop_series: do not start the runs of its series (same spec but for gpus, nodes "
        "and seed) that have not started; stop_all: do not start any of the experiment's runs that have not started",
    )
    on_hang: OnHang = Field(default="cancel", description=ON_HANG_DESCRIPTION)
    inference: InferenceInput | None = Field(
        default=None, description="kind inference: the checkpoint to load and the prompts to generate for"
    )
    isolation: Isolation | None = Field(
        default=None,
        description="exclusive: whole nodes per run on clusters, one run at a time on nodes every run shares "
        "(the local profile); shared: runs may share nodes. Default: exclusive for training, shared for inference",
    )
    repeats: int = Field(
        default=1,
        ge=1,
        le=MAX_REPEATS,
        description="runs per grid point, for means with confidence intervals; each takes the next seed "
        "unless the seed is fixed in base or grid",
    )
    scaling: Literal["strong", "weak"] = Field(
        default="strong",
        description="strong: every run takes the same global batch; weak: the batch per GPU stays that of the "
        "grid's smallest GPU count, and the global batch grows with the GPUs",
    )
    target: Target | None = Field(
        default=None,
        description="a quality target for time to accuracy: each run's epochs and training time to the first epoch "
        "that reaches it, scored per point and against the baseline",
        examples=[{"metric": "val_accuracy", "at_least": 0.95}],
    )

    @property
    def effective_isolation(self) -> Isolation:
        return isolation_of({"isolation": self.isolation, "base": self.base.model_dump()})


class ExperimentChanges(BaseModel):
    """What to change in a cloned experiment's request; whatever is not given stays as it was."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(default=None, min_length=1, max_length=200)
    base: dict[Annotated[str, StringConstraints(max_length=64)], Any] = Field(
        default={}, max_length=64, description="spec fields to set; null resets one to its default"
    )
    grid: dict[Annotated[str, StringConstraints(max_length=64)], Any] = Field(
        default={}, max_length=64, description="fields to sweep, with their values; null stops sweeping one"
    )
    resources: dict[Annotated[str, StringConstraints(max_length=64)], Any] = Field(
        default={}, max_length=16, description="resources to change; null resets one to its default"
    )
    on_invalid: Literal["refuse", "skip"] | None = None
    on_failure: OnFailure | None = None
    isolation: Isolation | None = None
    repeats: int | None = Field(default=None, ge=1, le=MAX_REPEATS)
    scaling: Literal["strong", "weak"] | None = None
    target: Target | None = Field(default=None, description="a new quality target; leaving it out keeps the old one")
    on_hang: OnHang | None = None
    inference: dict[Annotated[str, StringConstraints(max_length=64)], Any] = Field(
        default={}, max_length=8, description="inference settings to change; null resets one"
    )

    @field_validator("name")
    @classmethod
    def _showable(cls, name: str | None) -> str | None:
        return None if name is None else showable(name)

    def apply(self, request: dict[str, Any]) -> dict[str, Any]:
        """The original request with these changes laid over it (to be validated as a new request)."""
        return apply_changes(request, self.model_dump())


class Experiment(ExperimentBase, table=True):
    id: str = SQLField(default_factory=new_id, primary_key=True, max_length=16)
    owner: str | None = SQLField(default=None, foreign_key="user.name", index=True, description="who submitted it")
    # Indexed: lists are newest first, and without it each page of a list sorted the whole table.
    created_at: datetime = SQLField(default_factory=utcnow, index=True)
    max_concurrent: int | None = SQLField(default=None, description="runs in the scheduler at once, at most")
    request: dict[str, Any] = SQLField(sa_column=Column(JSON, nullable=False), description="the request as submitted")
    sharing: str = SQLField(default="private", max_length=16, description="private, group or everyone")
    sharing_group: str | None = SQLField(default=None, max_length=32, description="the Unix group, if shared with one")


class ExperimentPublic(ExperimentBase):
    id: str
    owner: str | None = Field(description="who submitted it (none: from before there were users)")
    created_at: datetime
    request: dict[str, Any]
    sharing: Sharing = Field(
        default="private",
        description="who besides its owner and the admins may see it, read-only: nobody (private), the members of "
        "`sharing_group` (group), or everyone signed in (everyone)",
    )
    sharing_group: str | None = Field(default=None, description="the Unix group it is shared with")
    run_count: int
    states: dict[str, int] = Field(description="how many runs are in each state")
    card: CardOriginPublic | None = Field(
        default=None,
        description="imported from a scaling card (POST /api/cards): where it came from; it is read-only. "
        "Told of one experiment (GET /api/experiments/{id}), not in lists",
    )


class ExperimentsPublic(BaseModel):
    data: list[ExperimentPublic]
    count: int


class SkippedRun(BaseModel):
    combination: dict[str, Any] = Field(description="the grid values of the combination")
    reason: str


class ExperimentCreated(ExperimentPublic):
    runs: list[RunPublic]
    skipped: list[SkippedRun] = Field(default=[], description="combinations left out (on_invalid: skip)")


class SharingChange(BaseModel):
    """Who may see an experiment besides its owner and the admins."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    with_: Sharing = Field(
        alias="with",
        description="private: its owner and the admins only; group: also a Unix group's members; "
        "everyone: everyone signed in",
    )
    group: str | None = Field(
        default=None,
        pattern=r"^[a-z_][a-z0-9_.-]{0,31}$",
        description="the Unix group, with `with: group` (and only then)",
    )
