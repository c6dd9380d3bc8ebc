"""The comparison of runs: one row of figures per run (speed-up, efficiency, losses, memory, the flags that say
which figures cannot be trusted and why), each run's epochs for the curves, and per series the scaling analysis
(points with confidence intervals, fitted laws, a recommendation). No table of its own: server.services.comparison
computes it from runs, metrics and Slurm's accounting."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, Field, computed_field

from contract.spec import Strategy
from contract.states import RunState
from contract.target import Target

ScalingMode = Literal["strong", "weak"]
# The time a series' points compare: its runs' epoch time (strong) or step time (weak) where every run timed its
# epochs, else their run time (the wall time of their launches, start-up included: a program that prints no epoch).
Measure = Literal["epoch_time_s", "step_time_s", "run_time_s"]
# The parts of a step's time, as the worker reports them.
TIME_PARTS = ("data", "compute", "optimizer", "comm")


class FlagCode(StrEnum):
    superlinear = "superlinear"
    oversubscribed = "oversubscribed"
    shared_node = "shared_node"
    noisy = "noisy"
    too_short = "too_short"
    warmup_dominated = "warmup_dominated"
    loss_mismatch = "loss_mismatch"
    incomplete = "incomplete"
    straggler = "straggler"
    no_metrics = "no_metrics"
    ingest_stopped = "ingest_stopped"
    unequal_work = "unequal_work"
    shared_workdir = "shared_workdir"
    cpus_beyond_allocation = "cpus_beyond_allocation"
    target_not_reached = "target_not_reached"
    slower_convergence = "slower_convergence"
    converged_suspiciously_fast = "converged_suspiciously_fast"
    fabric_degraded = "fabric_degraded"
    regressed = "regressed"
    improved = "improved"
    mfu_impossible = "mfu_impossible"
    off_model = "off_model"


class Flag(BaseModel):
    """A reason not to take a figure at face value: what it means and what to do."""

    code: FlagCode
    severity: Literal["warning", "info"] = Field(
        description="warning: the scaling figures may be wrong; info: worth knowing, the figures stand"
    )
    message: str


class RunResources(BaseModel):
    """What Slurm's accounting says the run used; a figure the cluster does not gather is None and named in
    `not_gathered`."""

    elapsed_s: float | None = None
    cpu_efficiency: float | None = Field(default=None, description="TotalCPU / (Elapsed x AllocCPUS)")
    max_rss_bytes: int | None = None
    gpu_utilization: float | None = Field(default=None, description="percent, where the cluster gathers it")
    energy_j: float | None = None
    device_hours_per_epoch: float | None = Field(
        default=None, description="GPU-hours (CPU-hours without GPUs) of the allocation per epoch done"
    )
    device_kind: Literal["gpu", "cpu"] = "cpu"
    energy_per_sample_j: float | None = None
    shared_with: list[str] = Field(default=[], description="other jobs that ran on the run's nodes during it")
    not_gathered: list[str] = Field(default=[], description="figures this cluster does not gather")
    nothing_to_divide: list[str] = Field(
        default=[],
        description="figures per epoch or per sample that the cluster gathers but this run gave nothing to divide by "
        "(it printed no epoch or no samples/s)",
    )


class CompareRow(BaseModel):
    run_id: str
    state: RunState
    strategy: Strategy
    gpus: int
    nodes: int
    global_batch_size: int | None = Field(
        description="none: a program run that does not declare its batch (program.batch), whose batch is its own"
    )
    epochs_done: int
    mean_epoch_time_s: float | None = Field(description="the median of the timed epochs (the first is warm-up)")
    speedup: float | None = Field(
        description="the baseline point's time over this point's (means over repeats); weak scaling: scaled speed-up"
    )
    efficiency: float | None = Field(
        description="strong: speed-up over the ratio of GPUs; weak: time per step at the baseline over time per step"
    )
    final_train_loss: float | None
    final_val_loss: float | None
    final_val_accuracy: float | None
    samples_per_s: float | None
    peak_memory_bytes: int | None
    # Last, so that the CSV's first columns stay those that scripts of earlier versions read.
    experiment_id: str
    series: str = Field(
        description="the run's scaling series: its strategy and whatever else tells it apart from the other series"
    )
    ingest_done: bool = Field(description="the run has ended and all its output has been read: its figures are final")
    flags: list[Flag] = Field(default=[], description="why a figure of this row may be wrong, and what to do")
    scaling: ScalingMode = "strong"
    seed: int = 0
    timed_epochs: int = Field(default=0, description="epochs after the first (warm-up) that were timed")
    epoch_time_min_s: float | None = Field(default=None, description="the fastest timed epoch")
    epoch_time_max_s: float | None = Field(default=None, description="the slowest timed epoch")
    step_time_s: float | None = Field(default=None, description="median over timed epochs of the time per step")
    point_mean_s: float | None = Field(
        default=None,
        description="the point this run belongs to (its series at its GPU count): mean over repeats of the time "
        "that scaling compares (strong: epoch time; weak: step time)",
    )
    point_ci_low_s: float | None = Field(default=None, description="95 % confidence interval (Student's t)")
    point_ci_high_s: float | None = None
    point_n: int = Field(default=0, description="repeats in the point")
    speedup_ci_low: float | None = None
    speedup_ci_high: float | None = None
    baseline_gpus: int | None = Field(default=None, description="the GPU count speed-up is measured against")
    time_breakdown: dict[str, float] | None = Field(
        default=None, description="seconds per step by part (data, compute, optimizer, comm), median epoch"
    )
    step_time_fastest_s: float | None = Field(default=None, description="the fastest rank's time per step")
    step_time_slowest_s: float | None = Field(default=None, description="the slowest rank's time per step")
    resources: RunResources | None = Field(default=None, description="from Slurm's accounting, once the run ended")
    metrics: dict[str, float] = Field(
        default={}, description="the run's own metrics (a program's custom epoch fields), of its last epoch"
    )
    memory_kind: str | None = Field(
        default=None, description="what peak_memory_bytes measures: cuda_allocated, cpu_tensors or cpu_max_rss"
    )
    memory_measure: str | None = Field(default=None, description="memory_kind in words, for a chart's label")
    peak_rss_bytes: int | None = Field(default=None, description="the largest peak resident set of the run's processes")
    run_time_s: float | None = Field(
        default=None,
        description="the wall time of the run's launches together (a requeued job's summed), start-up included, as "
        "its batch script timed them; none while a launch is under way, or when one was killed with its job",
    )
    measure: Measure | None = Field(
        default=None, description="the time its point compares (point_mean_s); none while the run is in no point"
    )
    # The step model (GET /api/experiments/{id}/prediction); none where nothing predicts it (no 1-process run or
    # no fabric fit).
    predicted_step_time_s: float | None = Field(
        default=None,
        description="the step model's time per step for this run's layout, from a 1-process run and the fabric's fits",
    )
    # Time to accuracy, where the run has a target (contract.target); none without one.
    target_reached: bool | None = Field(
        default=None,
        description="whether an epoch reached the experiment's target (false also while a live run has not yet); "
        "none: no target",
    )
    epochs_to_target: int | None = Field(default=None, description="the epoch that first reached the target")
    time_to_target_s: float | None = Field(
        default=None,
        description="training time to the end of the epoch that first reached the target: the sum of the epochs' "
        "times (epoch_time_s, training steps only) from the first epoch, a resumed run's earlier attempts "
        "included; start-up, evaluation and checkpoints not included (run_time_s beside it is the job's wall time)",
    )
    stopped_at_target: bool = Field(
        default=False, description="the run ended at the target (stop_at_target), before its planned epochs"
    )
    effective_speedup: float | None = Field(
        default=None,
        description="time to target at the series' baseline over this point's (each its point's score)",
    )
    statistical_efficiency: float | None = Field(
        default=None,
        description="epochs to target at the baseline over this point's (means over the runs that reached)",
    )
    target: Target | None = Field(default=None, description="the experiment's target the run is scored against")
    # Utilisation (server/services/utilization.py): samples/s of the median timed epoch x FLOPs per sample over
    # peak x devices.
    model_flops_per_sample: float | None = Field(
        default=None,
        description="FLOPs per training sample (forward x 3, recomputation left out): the server's count from the "
        "spec for the built-in worker, the program's own report (model_flops_per_sample) for a program",
    )
    hardware_flops_per_sample: float | None = Field(
        default=None, description="the same with the forward activation checkpointing recomputes (HFU's numerator)"
    )
    peak_tflops_measured: float | None = Field(
        default=None, description="one device's peak as the run's compute probe measured it (dense matmul, TFLOP/s)"
    )
    peak_tflops_datasheet: float | None = Field(
        default=None, description="one device's dense datasheet peak at the run's precision; none on CPU"
    )
    peak_datasheet_source: str | None = Field(default=None, description="which datasheet that peak comes from")
    mfu: float | None = Field(default=None, description="model FLOPs utilisation against the measured peak")
    mfu_datasheet: float | None = Field(default=None, description="model FLOPs utilisation against the datasheet peak")
    hfu: float | None = Field(
        default=None, description="hardware FLOPs utilisation against the measured peak (activation checkpointing)"
    )
    hfu_datasheet: float | None = Field(default=None, description="hardware FLOPs utilisation, datasheet peak")


class EpochPoint(BaseModel):
    """One epoch of a run's history, as its last print of that epoch gave it."""

    epoch: int
    train_loss: float
    val_loss: float | None = None  # course logs may print none
    val_accuracy: float | None = None
    epoch_time_s: float
    samples_per_s: float | None = None
    step_time_s: float | None = None
    step_time_fastest_s: float | None = None
    step_time_slowest_s: float | None = None
    time_breakdown: dict[str, float] | None = None
    model_flops_per_sample: float | None = Field(default=None, description="as the run reported it")
    hardware_flops_per_sample: float | None = None
    metrics: dict[str, float] = Field(default={}, description="the epoch's custom metrics, by name")


class ComparePublic(BaseModel):
    experiment_id: str | None = Field(default=None, description="the experiment compared, if one was asked for alone")
    data: list[CompareRow]
    count: int
    histories: dict[str, list[EpochPoint]] | None = Field(
        default=None, description="run id -> its epochs in order, when asked for with history=true"
    )

    @computed_field(description="the custom metrics of the rows, each name once, sorted")  # type: ignore[prop-decorator]
    @property
    def metric_names(self) -> list[str]:
        return sorted({name for row in self.data for name in row.metrics})


class PointMedians(BaseModel):
    """A point's medians over its runs (every run of its series at its GPU count, timed or not) of the figures the
    comparison gives per run, each over the runs that have it; none where no run has it."""

    time_breakdown: dict[str, float] = Field(
        default={}, description="seconds per step by part (data, compute, optimizer, comm), over the runs with the part"
    )
    time_breakdown_n: int = Field(default=0, description="runs with a time breakdown")
    device_hours_per_epoch: float | None = Field(default=None, description="over the runs whose cluster gathers it")
    energy_per_sample_j: float | None = Field(default=None, description="over the runs whose cluster gathers it")
    final_train_loss: float | None = None
    final_val_loss: float | None = None
    final_val_accuracy: float | None = None
    mean_epoch_time_s: float | None = Field(default=None, description="of the runs' own medians of their timed epochs")
    samples_per_s: float | None = None
    metrics: dict[str, float] = Field(default={}, description="each of the runs' own metrics, of their last epoch")


class ScalingPoint(BaseModel):
    gpus: int
    mean: float = Field(description="seconds: mean over repeats of the compared time")
    ci_low: float | None = Field(description="95 % confidence interval (Student's t); none with one repeat")
    ci_high: float | None
    n: int
    speedup: float | None
    speedup_ci_low: float | None = None
    speedup_ci_high: float | None = None
    efficiency: float | None
    flags: list[Flag] = []
    run_ids: list[str] = Field(
        default=[], description="every run of the series at this GPU count, timed or not, in the comparison's order"
    )
    medians: PointMedians = Field(
        default_factory=PointMedians, description="the per-run figures the point's runs have, each their median"
    )


class AmdahlFitPublic(BaseModel):
    serial_fraction: float
    r2: float
    describes_points: bool = Field(description="r2 reaches the fits' r2_bound: false, the law is not drawn")


class UslFitPublic(BaseModel):
    sigma: float = Field(description="contention")
    kappa: float = Field(description="coherency")
    r2: float
    peak_gpus: float | None = Field(description="where adding GPUs starts making it slower; none: no peak")
    describes_points: bool = Field(description="r2 reaches the fits' r2_bound: false, the law is not drawn")


class ScalingFits(BaseModel):
    amdahl: AmdahlFitPublic | None = None
    usl: UslFitPublic | None = None
    refused: str | None = Field(default=None, description="why no law was fitted")
    r2_bound: float = Field(
        description="below this r2 a law does not describe the points, advises nothing and is not drawn"
    )
    summary: str = Field(
        description="each law's parameters in words, rounded to what they can mean, marked where it does not "
        "describe the points; or why none was fitted"
    )


class PredictedPoint(BaseModel):
    gpus: int
    law: Literal["amdahl", "usl"]
    speedup: float


class TargetPoint(BaseModel):
    """A series' point scored by time to target, as MLPerf Training scores its results."""

    gpus: int
    global_batch_size: int | None = Field(description="the point's global batch (weak scaling: it grows with GPUs)")
    runs: int = Field(description="the point's runs, whether they reached the target or not")
    reached: int = Field(description="runs that reached the target")
    not_reached: int = Field(description="runs that ended without reaching it: counted, never dropped")
    unfinished: int = Field(default=0, description="live runs that have not reached it yet")
    scoring: Literal["olympic", "mean"] | None = Field(
        description="olympic: 5 runs or more, the mean without the fastest and the slowest (a run that did not "
        "reach counts as the slowest), with the interval of the runs it keeps; mean: fewer, the mean of the runs "
        "that reached with its 95 % interval; none: no score (no run reached, or an olympic score would keep a run "
        "that did not)"
    )
    time_to_target_s: float | None = Field(description="the score: seconds of training to the target")
    ci_low_s: float | None = Field(
        default=None, description="95 % interval (Student's t) over the runs the score keeps (n >= 2)"
    )
    ci_high_s: float | None = None
    n: int = Field(description="runs the score is over")
    epochs_to_target: float | None = Field(description="mean over the runs that reached of their epochs to target")
    epochs_ci_low: float | None = None
    epochs_ci_high: float | None = None
    effective_speedup: float | None = Field(description="the baseline's score over this point's")
    effective_speedup_ci_low: float | None = None
    effective_speedup_ci_high: float | None = None
    throughput_speedup: float | None = Field(description="the same point's speed-up in time per epoch (or step)")
    statistical_efficiency: float | None = Field(
        description="epochs to target at the baseline over this point's: below 1, the larger batch needs more epochs"
    )
    flags: list[Flag] = []
    run_ids: list[str] = []


class TimeToTarget(BaseModel):
    """A series scored by time to its target: does adding GPUs give a trained model sooner, and by how much."""

    target: Target
    measured_from: str = Field(description="what the time to target counts, exactly")
    baseline_gpus: int | None = Field(description="the point effective speed-up is measured against")
    points: list[TargetPoint]
    summary: str = Field(description="the answer in words, hedged where its points are flagged")


class ScalingSeries(BaseModel):
    series: str
    strategy: Strategy
    scaling: ScalingMode
    measure: Measure = Field(
        description="the time the points compare: epoch time (strong) or step time (weak) where every run timed its "
        "epochs, else run time (a program that prints no epoch: its launches' wall time, start-up included)"
    )
    baseline_gpus: int | None
    points: list[ScalingPoint]
    fits: ScalingFits
    predicted: list[PredictedPoint] = Field(description="the fitted curves, to 4x the largest GPU count measured")
    recommendation: str
    advice: Literal["given", "hedged", "withheld"] = Field(
        description="given: the recommendation stands on clean points; hedged: it names the flagged points it rests "
        "on; withheld: no law describes the points, the baseline carries a warning or a point is superlinear, and "
        "the recommendation says that instead"
    )
    batch: str = Field(
        description="what the series' runs train per step, in words, as far as it is known (a program's batch only "
        "where it declares it)"
    )
    time_to_target: TimeToTarget | None = Field(
        default=None, description="the series scored by time to the experiment's target; none without a target"
    )


class ScalingPublic(BaseModel):
    experiment_id: str | None = None
    series: list[ScalingSeries]
    flags: list[Flag] = Field(default=[], description="every distinct flag of the selection's rows, worst first")
