"""The client's own views of the JSON the REST API answers with: only the fields the commands read.

Each view ignores fields it does not know, so a newer server that adds fields does not break an older client;
and the client needs none of the server's code (its tables, profiles or services) to read an answer.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from contract.program import PARAM_PREFIX
from contract.records import EpochRecord
from contract.spec import settings_of
from contract.states import RunState
from contract.target import Target


class View(BaseModel):
    """Part of an answer, as read: unknown fields are left out, never refused."""

    model_config = ConfigDict(extra="ignore")


# ---- runs --------------------------------------------------------------------------------------------------------


class RunView(View):
    id: str
    experiment_id: str
    position: int
    state: RunState
    job_id: str | None = None
    scheduler: str
    profile: str | None = None
    attempt: int = 0
    waiting: bool = False
    scheduler_state: str | None = None
    scheduler_reason: str | None = None
    exit_code: str | None = None
    message: str | None = None
    run_dir: str
    created_at: datetime
    started_at: datetime | None = None
    ended_at: datetime | None = None
    spec: dict[str, Any]
    parse_errors: int = 0
    first_parse_error: str | None = None
    ingest_stopped: str | None = None
    ingest_done: bool = False
    rerun_of: str | None = None

    @property
    def settled(self) -> bool:
        """Final, and every metric is in (the monitor reads a run once more after it ends; a run with no job has
        none to read)."""
        return self.state.is_final and (self.ingest_done or self.job_id is None)


class RunsView(View):
    data: list[RunView]
    count: int


class EpochsView(View):
    """A run's epoch records (contract/records.py keeps the fields a newer worker adds)."""

    data: list[EpochRecord]
    count: int


class LogView(View):
    text: str
    next_offset: int
    size: int
    complete: bool


class EventView(View):
    at: datetime
    kind: str
    job_id: str | None = None
    state: RunState | None = None
    scheduler_state: str | None = None
    detail: str | None = None


class EventsView(View):
    data: list[EventView]
    count: int


# ---- experiments -------------------------------------------------------------------------------------------------


class SkippedView(View):
    """A grid combination left out because it cannot run."""

    combination: dict[str, Any]
    reason: str

    def __str__(self) -> str:
        described = ", ".join(f"{key}={value}" for key, value in self.combination.items())
        return f"{described or 'the base spec'}: {self.reason}"


class CardOriginView(View):
    """Where an experiment imported from a scaling card came from."""

    url: str | None = None
    instance: str | None = None
    original_id: str
    content_hash: str
    imported_at: datetime
    imported_by: str


class CardProblemView(View):
    field: str
    message: str


class CardVerdictView(View):
    verified: bool
    content_hash: str
    runs: int
    records: int
    problems: list[CardProblemView]


class ExperimentView(View):
    id: str
    name: str
    created_at: datetime
    request: dict[str, Any]
    run_count: int
    states: dict[str, int]
    sharing: str = "private"  # (servers before sharing send none: everything was visible to everyone there)
    sharing_group: str | None = None
    card: CardOriginView | None = None  # imported from a scaling card (servers before cards send none)


class ExperimentsView(View):
    data: list[ExperimentView]
    count: int


class CreatedView(ExperimentView):
    """A submitted experiment, its runs, and the combinations it left out."""

    runs: list[RunView]
    skipped: list[SkippedView] = []


class RerunPreviewedView(View):
    """A failed run that would run again, and what its rerun changes."""

    rerun_of: str
    state: RunState
    failure_kind: str | None = None  # a kind this client may not know yet is shown as it comes
    spec: dict[str, Any]
    changed: dict[str, Any]


class RerunPreviewView(View):
    data: list[RerunPreviewedView]
    count: int


class PreviewView(View):
    """What a request expands into, submitting nothing."""

    name: str
    runs: list[dict[str, Any]]
    count: int
    skipped: list[SkippedView] = []
    index: int
    script: str
    array_script: str | None = None
    array_note: str | None = None

    def settings(self) -> list[dict[str, Any]]:
        """Each run's settings (spec_settings): only the fields its kind reads."""
        return [spec_settings(spec) for spec in self.runs]


def spec_settings(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A run spec's fields that its kind reads (a training run's inference fields, or a program run's worker
    fields, hold only their defaults), each a plain value to print: a program's parts flattened, its command as
    one could type it again, its parameters as params.NAME (as the grid names them), its variables by name only;
    a target in words (val_accuracy >= 0.95), and none where the run has none."""
    settings = settings_of(spec)
    target = settings.pop("target", None)
    if isinstance(target, Mapping):
        settings["target"] = Target.model_validate(target).describe()
    program = settings.pop("program", None)
    if not isinstance(program, Mapping):
        return settings
    settings["command"] = shlex.join(program.get("command") or [])
    settings |= {key: program.get(key) for key in ("workdir", "launcher", "image")}
    if program.get("env"):
        settings["env"] = ",".join(program["env"])
    settings |= {PARAM_PREFIX + name: value for name, value in (program.get("params") or {}).items()}
    if program.get("params_style", "flags") != "flags":  # said only where it is not today's default
        settings["params_style"] = program["params_style"]
    return settings


class FlagView(View):
    code: str
    severity: str
    message: str


class CompareRowView(View):
    """A run's row of a comparison. Past epochs_done and mean_epoch_time_s, what the Python API's DataFrames show;
    each has a default, as a server of an earlier version may send none."""

    run_id: str
    state: RunState
    strategy: str
    gpus: int
    epochs_done: int
    mean_epoch_time_s: float | None = None
    final_val_loss: float | None = None
    series: str = ""
    scaling: str = "strong"
    nodes: int | None = None
    seed: int | None = None
    global_batch_size: int | None = None
    step_time_s: float | None = None
    run_time_s: float | None = None
    speedup: float | None = None
    efficiency: float | None = None
    baseline_gpus: int | None = None
    final_train_loss: float | None = None
    final_val_accuracy: float | None = None
    samples_per_s: float | None = None
    peak_memory_bytes: int | None = None
    point_mean_s: float | None = None
    point_ci_low_s: float | None = None
    point_ci_high_s: float | None = None
    point_n: int | None = None
    target_reached: bool | None = None
    epochs_to_target: int | None = None
    time_to_target_s: float | None = None
    ingest_done: bool = False
    flags: list[FlagView] = []


class CompareView(View):
    data: list[CompareRowView]
    count: int


class ScalingPointView(View):
    gpus: int
    mean: float
    ci_low: float | None = None
    ci_high: float | None = None
    n: int
    speedup: float | None = None
    efficiency: float | None = None
    flags: list[FlagView] = []


class ScalingFitsView(View):
    summary: str = ""  # a server before fits were said in words gives none


class TargetView(View):
    metric: str
    at_least: float | None = None
    at_most: float | None = None

    def describe(self) -> str:
        """The target in words, as the server says it: `val_accuracy >= 0.95`."""
        bound = self.at_least if self.at_least is not None else self.at_most
        return f"{self.metric} {'>=' if self.at_least is not None else '<='} {bound:g}"


class TargetPointView(View):
    gpus: int
    global_batch_size: int | None = None
    runs: int
    reached: int
    not_reached: int
    unfinished: int = 0
    scoring: str | None = None
    time_to_target_s: float | None = None
    ci_low_s: float | None = None
    ci_high_s: float | None = None
    n: int
    epochs_to_target: float | None = None
    effective_speedup: float | None = None
    throughput_speedup: float | None = None
    statistical_efficiency: float | None = None
    flags: list[FlagView] = []


class TimeToTargetView(View):
    target: TargetView
    measured_from: str = ""
    points: list[TargetPointView]
    summary: str = ""


class ScalingSeriesView(View):
    series: str
    scaling: str
    measure: str
    points: list[ScalingPointView]
    recommendation: str
    fits: ScalingFitsView = ScalingFitsView()
    advice: str = "given"
    batch: str = ""
    time_to_target: TimeToTargetView | None = None  # a server before time to accuracy gives none


class ScalingView(View):
    series: list[ScalingSeriesView]
    flags: list[FlagView] = []


class FailureGroupView(View):
    kind: str
    count: int
    advice: str
    summary: str


class FailuresView(View):
    failed: int
    unclassified: int = 0
    kinds: list[FailureGroupView] = []


# ---- cluster profiles --------------------------------------------------------------------------------------------


class PartitionView(View):
    max_nodes: int
    gpus_per_node: int
    max_time: str
    gres: str | None = None
    gpu_memory_gib: float | None = None
    cpus_per_task: int | None = None


class ContainerView(View):
    runtime: str = "none"
    image: str | None = None
    edf: str | None = None
    python: str | None = None
    mounts: list[str] = []


class SbatchOptionView(View):
    """An sbatch option users may set; `kind` is int, time, choice, word or memory."""

    kind: str
    description: str = ""
    choices: list[str] = []
    min: int | None = None
    max: int | None = None


class ProfileView(View):
    name: str
    description: str = ""
    account: str | None = None
    qos: str | None = None
    partitions: dict[str, PartitionView]
    default_partition: str
    container: ContainerView = ContainerView()
    modules: list[str] = []
    env: dict[str, str] = {}
    worker_python: str | None = None
    signal_before_end_s: int
    max_requeues: int
    sbatch_options: dict[str, SbatchOptionView] = {}


class ProfilesView(View):
    data: list[ProfileView]
    count: int
    default: str


# ---- the fabric ----------------------------------------------------------------------------------------------------


class FabricShapeView(View):
    profile: str
    partition: str
    nodes: int
    processes_per_node: int
    backend: str
    tier: str


class FabricPointView(View):
    collective: str
    nbytes: int
    busbw_bytes_per_s: float


class FabricEntryView(View):
    shape: FabricShapeView
    preflight: bool = False
    points: list[FabricPointView] = []
    alpha_s: float
    beta_bytes_per_s: float
    fit_error: float
    run_id: str
    measured_at: datetime
    degraded: str | None = None


class FabricView(View):
    data: list[FabricEntryView]
    count: int


# ---- plans -------------------------------------------------------------------------------------------------------


class PlanPointView(View):
    strategy: str
    gpus: int
    nodes: int
    repeats: int
    step_time_s: float | None = None
    epoch_time_s: float | None = None
    speedup: float | None = None
    efficiency: float | None = None
    memory_per_gpu_bytes: int
    gpu_hours: float | None = None
    unavailable: str | None = None


class PlanRecommendationView(View):
    strategy: str
    gpus: int
    nodes: int
    why: str


class PlanView(View):
    id: str
    name: str
    goal: str
    efficiency: float
    state: str
    waiting_for: list[str] = []
    failed: list[str] = []
    points: list[PlanPointView] = []
    recommendation: PlanRecommendationView | None = None
    recommended_gpu_hours: float | None = None
    grid_gpu_hours: float | None = None
    gpu_hours_complete: bool = True


# ---- tokens ------------------------------------------------------------------------------------------------------


class TokenView(View):
    id: str
    token: str
    created_at: datetime
    expires_at: datetime | None = None


# ---- pinned references and regressions ---------------------------------------------------------------------------


class ReferenceView(View):
    experiment_id: str
    role: str
    spec_key: str
    profile: str
    pair_of: str | None = None


class FloorView(View):
    profile: str
    floor: float
    source: str
    points: int


class RegressionPointView(View):
    series: str
    gpus: int
    reference_mean_s: float | None
    reference_n: int
    later_mean_s: float | None
    later_n: int
    ratio: float | None
    ci_low: float | None = None
    ci_high: float | None = None
    verdict: str
    hedge: str | None = None


class RegressionView(View):
    experiment_id: str
    reference_id: str
    against: str
    verdict: str
    hedged: bool
    summary: str
    floor: FloorView
    points: list[RegressionPointView]
    unmatched: list[str] = []


class HistoryEntryView(View):
    experiment_id: str
    name: str
    created_at: datetime
    role: str
    verdict: str
    points: list[RegressionPointView]
    image_digest: str | None = None
    image: str | None = None
    torch_version: str | None = None


class HistoryView(View):
    reference: ReferenceView
    floor: FloorView
    entries: list[HistoryEntryView]


class NotifySettingsView(View):
    events: list[str]
    email: str | None = None
    webhook_url: str | None = None
    email_available: bool = False
    webhooks_available: bool = False


class DeliveryView(View):
    id: int
    event: str
    channel: str
    target: str
    subject: str
    state: str
    attempts: int
    created_at: datetime
    next_attempt_at: datetime | None = None
    last_error: str | None = None


class DeliveriesView(View):
    data: list[DeliveryView]
    count: int
