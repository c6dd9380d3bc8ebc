"""The flags a comparison raises: for each, when it is raised (its threshold, and its condition as a pure function
over plain values that answers the flag or None) and its sentence (what it means, what to do), written once for the
API, the CSV, the pages and the report. The comparison gathers the values; every decision is made here."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from contract.fabric import BandBasis
from contract.records import StartRecord
from contract.spec import RunSpec
from server.models import Flag, FlagCode
from server.services import statistics

# ---- a point's flags: raised on each run of a series' point ------------------------------------------------------

# The flags a point raises on each of its runs; the scaling analysis shows them beside its point.
POINT_CODES = frozenset({FlagCode.superlinear, FlagCode.noisy})

# Above this efficiency a point is better than ideal: something disturbed the baseline or the work differs.
SUPERLINEAR = 1.05


def superlinear(efficiency: float, gpus: int, baseline_gpus: int) -> Flag:
    return Flag(
        code=FlagCode.superlinear,
        severity="warning",
        message=f"efficiency {efficiency:.2f} at {gpus} GPUs is above 1: better than ideal against {baseline_gpus}. "
        "Usually the baseline was slowed (by runs beside it, too few threads, a cold start) rather than the larger "
        "runs being that fast; check the baseline's flags, run it with isolation exclusive and repeats >= 3.",
    )


def check_superlinear(efficiency: float, gpus: int, baseline_gpus: int) -> Flag | None:
    """Raised on a point whose efficiency against the series' baseline is above SUPERLINEAR."""
    return superlinear(efficiency, gpus, baseline_gpus) if efficiency > SUPERLINEAR else None


def noisy(gpus: int, n: int) -> Flag:
    return Flag(
        code=FlagCode.noisy,
        severity="warning",
        message=f"the point at {gpus} GPUs is noisy: its 95 % interval (n = {n}) reaches a neighbouring point's "
        "mean, so the trend between them cannot be read. Add repeats, or longer epochs, until the intervals part.",
    )


def check_noisy(points: Sequence[statistics.Point]) -> dict[int, Flag]:
    """The flag of each of a series' points whose interval holds a neighbour's mean (statistics.noisy), by its GPU
    count."""
    count = {point.gpus: point.n for point in points}
    return {gpus: noisy(gpus, count[gpus]) for gpus in statistics.noisy(points)}


# ---- the step model's flag: a measured point against its prediction (server/services/prediction.py) ----------------


def off_model(gpus: int, measured_s: float, predicted_s: float, tolerance: float, part: str, excess_s: float) -> Flag:
    """`part`: communication or compute, whichever took more time beyond its predicted share."""
    if part == "communication":
        suggests = (
            "communication took {excess} more per step than the fabric's fits predict for these collectives: a "
            "straggler rank (compare the slowest rank's step with the fastest), contention from other jobs on the "
            "network or the node, or ranks placed farther apart than the probe that fitted the fabric (more nodes or "
            "switches); rerun with isolation exclusive, or probe the fabric at this shape"
        )
    else:
        suggests = (
            "compute took {excess} more per step than the 1-process run's, scaled to this layout: contention for the "
            "node's cores or memory bandwidth (runs beside it, more threads than cores), a different device or clock "
            "than the 1-process run's, or per-step work that does not shrink with the per-rank batch"
        )
    return Flag(
        code=FlagCode.off_model,
        severity="warning",
        message=f"the step at {gpus} GPUs took {measured_s:.4g} s, {measured_s / predicted_s - 1:.0%} more than the "
        f"step model's {predicted_s:.4g} s (tolerance {tolerance:.0%}), and the {part} does not add up: "
        + suggests.format(excess=f"{excess_s:.3g} s"),
    )


def check_off_model(
    gpus: int, measured_s: float, predicted_s: float, compute_excess_s: float, comm_excess_s: float, tolerance: float
) -> Flag | None:
    """Raised on a run whose measured step is slower than its predicted step by more than `tolerance` (the setting
    prediction_tolerance), naming the part (from the measured breakdown against the predicted parts) that exceeds its
    prediction most."""
    if predicted_s <= 0 or measured_s <= predicted_s * (1 + tolerance):
        return None
    if comm_excess_s >= compute_excess_s:
        return off_model(gpus, measured_s, predicted_s, tolerance, "communication", comm_excess_s)
    return off_model(gpus, measured_s, predicted_s, tolerance, "compute", compute_excess_s)


# ---- a run's own flags: raised from the run alone ------------------------------------------------------------------


def oversubscribed(hosts: Iterable[str], processes: int, threads: int, cpus: int) -> Flag:
    return Flag(
        code=FlagCode.oversubscribed,
        severity="warning",
        message=f"oversubscribed on {', '.join(hosts)}: {processes} processes x {threads} threads on {cpus} CPUs "
        "given: the time measures contention, not scaling. Give each process its own cores (fewer processes per "
        "node, or a partition with more cores per GPU slot).",
    )


def check_oversubscribed(start: StartRecord | None) -> Flag | None:
    """Raised when, on some node, the run's processes x their threads exceed the CPUs they were given; the sentence
    quotes the most crowded node."""
    if start is None or not start.nodes_hardware:
        return None
    crowded = [node for node in start.nodes_hardware if node.oversubscribed]
    if not crowded:
        return None
    worst = max(crowded, key=lambda node: len(node.ranks) * node.intra_op_threads / node.cpus_given)
    return oversubscribed([node.host for node in crowded], len(worst.ranks), worst.intra_op_threads, worst.cpus_given)


def shared_node(job_ids: Iterable[str], exclusive: bool = False) -> Flag:
    """`exclusive`: the run's experiment asked for isolation exclusive already, so advising it would be no help."""
    jobs = ", ".join(job_ids)
    if exclusive:
        advice = (
            "Its experiment asked for isolation exclusive, and other jobs still shared the nodes (on the local "
            "profile, exclusive only makes the experiment's own runs take turns; elsewhere the partition may not "
            "grant whole nodes): run it again when the nodes are quiet (squeue shows what runs there), or on a "
            "partition whose nodes are not shared."
        )
    else:
        advice = "Run the experiment with isolation exclusive, or run it again when the nodes are quiet."
    return Flag(
        code=FlagCode.shared_node,
        severity="warning",
        message=f"other jobs ran on the run's nodes while it ran ({jobs}): its times include their load. {advice}",
    )


def check_shared_node(shared_with: Sequence[str] | None, exclusive: bool = False) -> Flag | None:
    """Raised when Slurm's accounting names other jobs that ran on the run's nodes while it ran; `exclusive`: its
    experiment asked for isolation exclusive."""
    return shared_node(shared_with, exclusive) if shared_with else None


# Slurm's CPU efficiency (TotalCPU over Elapsed x AllocCPUS) above which a run used more CPUs than it was given.
# Not 1: Elapsed is in whole seconds, so a run of 10 s that kept its CPUs busy may read 1.05 by rounding alone.
CPUS_BEYOND = 1.1


def cpus_beyond_allocation(efficiency: float, cpus: int) -> Flag:
    return Flag(
        code=FlagCode.cpus_beyond_allocation,
        severity="warning",
        message=f"the run used {efficiency:.2f}x the CPU time of the {cpus} CPU{'' if cpus == 1 else 's'} Slurm "
        "allocated it (its CPU efficiency): its processes ran more threads than their CPUs, on cores Slurm did not "
        "bind them away from, so it ran faster than its allocation allows. As a baseline it makes every speed-up "
        "against it too low; beside other jobs it takes their cores. Give each process as many threads as CPUs "
        "(OMP_NUM_THREADS, torch.set_num_threads), or ask for more CPUs per task (cpus_per_task).",
    )


def check_cpus_beyond_allocation(efficiency: float | None, cpus: int | None) -> Flag | None:
    """Raised when Slurm's accounting says the run used more CPU time than its allocated CPUs could give
    (efficiency above CPUS_BEYOND)."""
    if efficiency is not None and cpus and efficiency > CPUS_BEYOND:
        return cpus_beyond_allocation(efficiency, cpus)
    return None


def too_short(reason: str) -> Flag:
    """`reason` (from statistics.too_short) says what was short and what to do."""
    return Flag(code=FlagCode.too_short, severity="warning", message=f"too short to time: {reason}.")


def check_too_short(epoch_times: Sequence[float], final: bool) -> Flag | None:
    """Raised when the timed epochs (all but the first) are too few or too short (statistics.too_short); on a live
    run only once it has timed enough epochs to say so for sure."""
    judged = final or len(epoch_times) > statistics.MIN_TIMED_EPOCHS
    if epoch_times and judged and (reason := statistics.too_short(epoch_times[1:])):
        return too_short(reason)
    return None


def warmup_dominated(first_s: float, median_s: float, timed: int) -> Flag:
    """Says what the rule (statistics.warmup_dominated) weighs: the first epoch's excess over the timed median against
    half of the median x the timed epochs, never the sum of the timed epochs, which one slow epoch can swell."""
    return Flag(
        code=FlagCode.warmup_dominated,
        severity="info",
        message=f"the first epoch (warm-up: start-up, allocation, compilation) took {first_s:.2f} s, "
        f"{first_s - median_s:.2f} s more than a timed epoch's median ({median_s:.2f} s): more than half of "
        f"{timed} timed epochs at that median ({timed * median_s:.2f} s). The figures leave it out, but the run's "
        "length says more about its start-up than about training: run more epochs so that what you time is training.",
    )


def check_warmup_dominated(epoch_times: Sequence[float], median_s: float | None) -> Flag | None:
    """Raised when the first epoch's excess over the timed median (`median_s`) outweighs half of all the timed work
    (statistics.warmup_dominated)."""
    timed = len(epoch_times) - 1
    if timed > 0 and median_s is not None and statistics.warmup_dominated(epoch_times[0], median_s, timed):
        return warmup_dominated(epoch_times[0], median_s, timed)
    return None


def incomplete(done: int, planned: int, final: bool) -> Flag:
    if not final:
        return Flag(
            code=FlagCode.incomplete,
            severity="info",
            message=f"still running: {done} of {planned} epochs so far; its figures will change.",
        )
    return Flag(
        code=FlagCode.incomplete,
        severity="warning",
        message=f"ran {done} of {planned} epochs: its figures come from part of the run. Resubmit it (it resumes "
        "from its last checkpoint) or leave it out of the comparison.",
    )


def check_incomplete(done: int, planned: int | None, final: bool, stopped_at_target: bool = False) -> Flag | None:
    """Raised on a run that did fewer epochs than planned (None: a program, whose count is its own): once it has
    ended, or while it runs once it has done one; never on a run that stopped at its target (stop_at_target), which
    is complete where it stopped."""
    if planned is not None and done < planned and (final or done) and not stopped_at_target:
        return incomplete(done, planned, final)
    return None


# The slowest rank's time per step over the fastest's above which the others wait for one.
STRAGGLER = 1.2


def straggler(slowest_s: float, fastest_s: float) -> Flag:
    return Flag(
        code=FlagCode.straggler,
        severity="warning",
        message=f"a straggler: the slowest rank took {slowest_s * 1000:.1f} ms per step against the fastest's "
        f"{fastest_s * 1000:.1f} ms ({slowest_s / fastest_s:.2f}x); the others wait for it at every collective. "
        "Look for a slower or busier node, or uneven work between ranks.",
    )


def check_straggler(slowest_s: float | None, fastest_s: float | None) -> Flag | None:
    """Raised when the slowest rank's time per step is more than STRAGGLER times the fastest's."""
    if slowest_s and fastest_s and slowest_s / fastest_s > STRAGGLER:
        return straggler(slowest_s, fastest_s)
    return None


def no_metrics(run_timed: bool = False) -> Flag:
    """`run_timed`: the run's launches were timed, so it is compared by its run time (start-up included)."""
    how = (
        "Print one per epoch from rank 0: in Python with contract/metrics.py "
        "(metrics.epoch(epoch, train_loss, epoch_time_s, ...); see the README's section on your own program), or "
        'as a line `[METRIC] {"v": 1, "kind": "epoch", "epoch": 1, "train_loss": 0.5, "epoch_time_s": 2.0}`, '
        "or a course script's `[METRIC] epoch=1 loss=0.5 time=2.0`."
    )
    if run_timed:
        return Flag(
            code=FlagCode.no_metrics,
            severity="info",
            message="the program completed but printed no [METRIC] epoch line: scalelab compares its run time "
            "(the wall time of its launches, start-up and data loading included) instead of its epoch time. For "
            f"the time of training alone, and its losses, print epoch lines. {how}",
        )
    return Flag(
        code=FlagCode.no_metrics,
        severity="warning",
        message="the program completed but printed no [METRIC] epoch line, and its run time is not known, so "
        f"scalelab has no figure of it to chart or compare. {how}",
    )


def check_no_metrics(silent: bool, ingest_done: bool, run_timed: bool = False) -> Flag | None:
    """Raised on a program run that completed without an epoch line (`silent`: programs.silent), once all its
    output has been read; as information only where its run time stands in for its epochs (`run_timed`)."""
    return no_metrics(run_timed) if silent and ingest_done else None


# MFU against the measured peak above which the figures cannot all be true: no device computes faster than the
# dense matrix multiply its own compute probe timed. Not a margin above 1: the probe reports its best size, and a run
# that matches it is already at the device's limit.
MFU_IMPOSSIBLE = 1.0


def mfu_impossible(
    mfu: float, samples_per_s: float, flops_per_sample: float, reported: bool, peak_tflops: float, devices: int,
    measured: bool,
) -> Flag:  # fmt: skip
    """`reported`: the FLOPs per sample are the program's own (else the server's count); `measured`: the peak is the
    compute probe's (else the datasheet's, where the run measured none)."""
    whose = "the program reported (model_flops_per_sample)" if reported else "scalelab counted from the model"
    peak = "the peak its compute probe measured" if measured else "its device's datasheet peak (no probe measured one)"
    return Flag(
        code=FlagCode.mfu_impossible,
        severity="warning",
        message=f"MFU {mfu:.2f} is above 1: {samples_per_s:.4g} samples/s x {flops_per_sample:.4g} FLOPs per sample "
        f"({whose}) = {samples_per_s * flops_per_sample / 1e12:.4g} TFLOP/s, over {devices} device"
        f"{'' if devices == 1 else 's'} x {peak_tflops:.4g} TFLOP/s, {peak}. No device computes faster than that, "
        "so a figure is wrong: check the FLOPs per sample (a training sample's forward x 3, a multiply-add counted "
        "as 2 FLOPs, recomputation and sparsity left out), the samples per second the run printed (all ranks "
        "together, over the epoch's time), and the peak (the run's compute record; SCALELAB_PEAK_TFLOPS).",
    )


def check_mfu_impossible(
    mfu: float | None,
    samples_per_s: float | None,
    flops_per_sample: float | None,
    reported: bool,
    peak_tflops: float | None,
    devices: int,
    measured: bool = True,
) -> Flag | None:
    """Raised when the run's MFU is above MFU_IMPOSSIBLE against the measured peak (or, where the run measured
    none, the datasheet's, which is higher still)."""
    if mfu is None or samples_per_s is None or flops_per_sample is None or peak_tflops is None:
        return None
    if mfu <= MFU_IMPOSSIBLE:
        return None
    return mfu_impossible(mfu, samples_per_s, flops_per_sample, reported, peak_tflops, devices, measured)


def records_limit(limit: int) -> str:
    """Why a run's reading stopped at the per-run limit of records, and what to do: kept on the run."""
    return (
        f"it printed more than {limit} metric records, the most a run may have stored "
        "(SCALELAB_MAX_RECORDS_PER_RUN): later records were not read. Print fewer (a step record every more "
        "steps: step_log_every), or ask the operator to raise the limit."
    )


def output_bytes_limit(limit: int) -> str:
    """Why a run's reading stopped at the per-run limit of output bytes, and what to do: kept on the run."""
    return (
        f"its output passed {limit} bytes, the most read of a run (SCALELAB_MAX_OUTPUT_BYTES_PER_RUN): later "
        "records were not read. Print less (progress bars and debug lines count too), or ask the operator to raise "
        "the limit."
    )


def ingest_stopped(reason: str) -> Flag:
    return Flag(
        code=FlagCode.ingest_stopped,
        severity="warning",
        message=f"scalelab stopped reading this run's output: {reason} Its figures come from the records read "
        "before that.",
    )


def check_ingest_stopped(stopped: str | None) -> Flag | None:
    """Raised on a run whose reading stopped before the end of its output (Run.ingest_stopped says why)."""
    return ingest_stopped(stopped) if stopped else None


# ---- time to accuracy: the figures scored by time to a target (contract.target) --------------------------------
#
# These speak of the time-to-target figures only: a run that does not reach the target, or a point that needs more
# epochs to it, leaves its throughput (time per epoch, speed-up, efficiency) standing, so the throughput advice
# reads none of them (TARGET_CODES); the time-to-target summary hedges on them.

TARGET_CODES = frozenset(
    {FlagCode.target_not_reached, FlagCode.slower_convergence, FlagCode.converged_suspiciously_fast}
)


@dataclass(frozen=True)
class TargetOutcome:
    """A run against its experiment's target, as plain values."""

    target: str  # the target in words (Target.describe)
    reached: bool
    best: float | None  # its best figure of the target's metric, and the epoch it came in
    best_epoch: int | None
    stopped_at_target: bool  # it ended at the target (stop_at_target), before its planned epochs


def target_not_reached(target: str, epochs: int, best: float | None, best_epoch: int | None) -> Flag:
    got = f"its best was {best:.4g} at epoch {best_epoch}" if best is not None else "it never reported the metric"
    return Flag(
        code=FlagCode.target_not_reached,
        severity="warning",
        message=f"the run ended after {epochs} epoch{'' if epochs == 1 else 's'} without reaching {target} ({got}): "
        "its point's time to target counts it as not reached (MLPerf's rule: never dropped), and a point scored "
        "over the runs that reached says less than it seems. Run more epochs, set a target the model can reach, or "
        "check the learning rate its batch trained with (lr_scaling, warmup_epochs: a larger batch usually needs a "
        "scaled rate and a warm-up).",
    )


def check_target_not_reached(outcome: TargetOutcome | None, ended: bool, epochs: int) -> Flag | None:
    """Raised on a run with a target that has ended, all its output read (`ended`), without reaching it."""
    if outcome is None or outcome.reached or not ended:
        return None
    return target_not_reached(outcome.target, epochs, outcome.best, outcome.best_epoch)


def slower_convergence(gpus: int, epochs: float, baseline_gpus: int, baseline_epochs: float, noise: str) -> Flag:
    return Flag(
        code=FlagCode.slower_convergence,
        severity="info",
        message=f"the point at {gpus} GPUs needs {epochs:.3g} epochs to the target against {baseline_epochs:.3g} at "
        f"{baseline_gpus} ({noise}): its larger global batch learns less per epoch, so its time to target gains "
        "less than its throughput (statistical efficiency below 1). Usual at large batches; a learning-rate rule "
        "(lr_scaling linear or sqrt, with warmup_epochs) may win epochs back.",
    )


def converged_suspiciously_fast(
    gpus: int, epochs: float, baseline_gpus: int, baseline_epochs: float, noise: str
) -> Flag:
    return Flag(
        code=FlagCode.converged_suspiciously_fast,
        severity="warning",
        message=f"the point at {gpus} GPUs reaches the target in {epochs:.3g} epochs against {baseline_epochs:.3g} "
        f"at {baseline_gpus} ({noise}): fewer epochs on more GPUs is rarely real. Usually the runs did not train "
        "or evaluate the same thing: a changed data split or evaluation set, a validation set sharded per rank, or "
        "seeds handled per process. Check that before trusting its effective speed-up.",
    )


def check_convergence(point: statistics.Point, baseline: statistics.Point) -> Flag | None:
    """Raised on a point whose mean epochs to target differ from the baseline's beyond the noise of the repeats:
    where both have repeats (an interval each), when the intervals part; otherwise when they differ by a whole epoch
    or more, the noise being unknown. More epochs: slower_convergence; fewer: converged_suspiciously_fast."""
    if point.gpus == baseline.gpus:
        return None
    low, high, base_low, base_high = point.ci_low, point.ci_high, baseline.ci_low, baseline.ci_high
    if low is not None and high is not None and base_low is not None and base_high is not None:
        noise = f"95 % intervals apart, n {point.n} and {baseline.n}"
        slower, faster = low > base_high, high < base_low
    else:
        noise = "single runs, so the noise of repeats is unknown: run repeats >= 2 to know it"
        slower = point.mean - baseline.mean >= 1
        faster = baseline.mean - point.mean >= 1
    raise_ = slower_convergence if slower else converged_suspiciously_fast if faster else None
    return None if raise_ is None else raise_(point.gpus, point.mean, baseline.gpus, baseline.mean, noise)


@dataclass(frozen=True)
class RunFacts:
    """What a run's own flags are raised from, as plain values."""

    final: bool  # the run has ended
    ingest_done: bool  # all its output has been read
    silent: bool  # a program that completed without printing an epoch line
    epochs_done: int
    planned_epochs: int | None  # None for a program: how many it runs is its own
    epoch_times: Sequence[float]  # its epochs that count, in order (the first is warm-up)
    median_epoch_s: float | None  # the median of its timed epochs
    step_time_slowest_s: float | None  # the slowest and fastest rank's time per step, in its median epoch
    step_time_fastest_s: float | None
    start: StartRecord | None  # its last start record
    ingest_stopped: str | None = None  # why its reading stopped before the end of its output
    run_timed: bool = False  # its launches were timed (launches.run_time): its run time is known
    target: TargetOutcome | None = None  # how it did against its experiment's target, where it has one


def run_flags(run: RunFacts) -> list[Flag]:
    """The flags a run raises on its own, whatever it is compared with."""
    raised = [
        check_incomplete(
            run.epochs_done, run.planned_epochs, run.final, run.target is not None and run.target.stopped_at_target
        ),
        check_no_metrics(run.silent, run.ingest_done, run.run_timed),
        check_too_short(run.epoch_times, run.final),
        check_warmup_dominated(run.epoch_times, run.median_epoch_s),
        check_straggler(run.step_time_slowest_s, run.step_time_fastest_s),
        check_oversubscribed(run.start),
        check_ingest_stopped(run.ingest_stopped),
        check_target_not_reached(run.target, run.final and run.ingest_done, run.epochs_done),
    ]
    return [flag for flag in raised if flag is not None]


# ---- the fabric: a training run's pre-flight against what its cluster's fabric gives (server/services/fabric.py) --


@dataclass(frozen=True)
class FabricExpected:
    """The bus bandwidth a pre-flight's largest all-reduce is expected to reach, and where that comes from."""

    low_bytes_per_s: float
    high_bytes_per_s: float
    source: str
    basis: BandBasis  # the profile's fabric_reference, or the spread of earlier probes of the shape


def fabric_degraded(tier: str, nbytes: int, measured_bytes_per_s: float, expected: FabricExpected) -> Flag:
    return Flag(
        code=FlagCode.fabric_degraded,
        severity="warning",
        message=f"the fabric pre-flight measured {measured_bytes_per_s / 1e9:.3g} GB/s bus bandwidth ({tier}, "
        f"all-reduce of {_size(nbytes)}), below the {expected.low_bytes_per_s / 1e9:.3g}-"
        f"{expected.high_bytes_per_s / 1e9:.3g} GB/s expected ({expected.source}): this run communicated over a "
        "slower fabric than its cluster's, and its scaling figures measure that, not the code. Check the nodes it "
        "ran on (a degraded link, a busy switch, the wrong network interface) and run it again.",
    )


def check_fabric_degraded(
    tier: str, nbytes: int, measured_bytes_per_s: float, expected: FabricExpected | None
) -> Flag | None:
    """Raised on a run whose pre-flight bus bandwidth is below the low end of what is expected of its fabric; never
    where nothing is expected (no reference in the profile and no earlier probe of the shape)."""
    if expected is None or measured_bytes_per_s >= expected.low_bytes_per_s:
        return None
    return fabric_degraded(tier, nbytes, measured_bytes_per_s, expected)


def _size(nbytes: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:g} {unit}"
    return f"{nbytes} B"


# ---- runs that should agree: raised on a run against another ------------------------------------------------------

# Strategies train the same model when these alone differ (the worker's equivalence tests compare them).
LAYOUT_FIELDS = frozenset(
    {"strategy", "gpus", "nodes", "tp_degree", "pp_schedule", "microbatches", "fsdp_sharding", "compile",
     "activation_checkpointing", "step_log_every", "checkpoint_every"}
)  # fmt: skip
# The relative difference of losses the worker's equivalence tests allow (tests/worker/parallel/test_strategies.py), per
# precision: half precision rounds differently with every layout.
LOSS_TOLERANCE = {"fp32": 1e-5, "bf16": 2e-2, "fp16": 2e-2}


def loss_mismatch(loss: float, other: float, other_run: str, tolerance: float) -> Flag:
    return Flag(
        code=FlagCode.loss_mismatch,
        severity="warning",
        message=f"the first epoch's training loss {loss:.7g} differs from {other:.7g} of run {other_run}, which has "
        f"the same seed, data and global batch, by more than the relative {tolerance:g} the equivalence tests allow: "
        "the two did not train the same model. Check the strategy's settings (precision, microbatches, degrees) "
        "before comparing their times.",
    )


def same_model(experiment_id: str, spec: RunSpec) -> str | None:
    """What the runs that should have trained the same model share: the experiment and every field of the spec but
    the layout's (same seed, data, global batch, precision...). None for a program's run: its runs need not train the
    same model on every layout (its batch may grow with the GPUs), and the equivalence this flag stands on is the
    worker's."""
    if spec.program is not None:
        return None
    return experiment_id + spec.model_dump_json(exclude=set(LAYOUT_FIELDS))


@dataclass(frozen=True)
class FirstLoss:
    """A run's first epoch's training loss (None: it has none), and what tells which runs it should agree with."""

    run_id: str
    same_model: str | None  # same_model(): None where it need agree with none
    gpus: int
    precision: str
    loss: float | None


def check_loss_mismatches(runs: Iterable[FirstLoss]) -> dict[str, Flag]:
    """By run id, the flag of each run whose first epoch's training loss lies further from the reference's (the run
    with the fewest GPUs among those that should agree, the first of them in the given order on a tie) than the
    equivalence tests allow (LOSS_TOLERANCE, relative).

    The first epoch, not the last: the equivalence tests compare 20 steps, and over a whole run rounding alone
    compounds (the README's example: first epochs equal to 1e-7 on 1, 2 and 4 processes, last epochs 7e-5 and 6e-3
    apart), while a layout that trains another model shows at once."""
    groups: dict[str, list[tuple[float, FirstLoss]]] = {}
    for run in runs:
        if run.loss is not None and run.same_model is not None:
            groups.setdefault(run.same_model, []).append((run.loss, run))
    raised: dict[str, Flag] = {}
    for members in groups.values():
        expected, reference = min(members, key=lambda pair: pair[1].gpus)
        tolerance = LOSS_TOLERANCE[reference.precision]
        for loss, run in members:
            if abs(loss - expected) > tolerance * max(abs(expected), 1e-12):
                raised[run.run_id] = loss_mismatch(loss, expected, reference.run_id, tolerance)
    return raised


# ---- runs of a series that should do equal work ------------------------------------------------------------------

# An epoch's own figure a program may print to say how many samples it trained; where every epoch of the runs of a
# series has it, their totals are compared too.
SAMPLES_METRIC = "samples"
# Totals of samples closer than this (relative) are equal: a sampler pads or drops a last partial batch per process.
SAMPLES_TOLERANCE = 0.01
# The runs a sentence names for each amount of work; the rest are counted.
_NAMED_RUNS = 3


@dataclass(frozen=True)
class Work:
    """What a run of a series trained: its epochs that count, and its samples where its epochs say them."""

    run_id: str
    series: str  # the series key: the runs that scaling compares with one another
    epochs: int
    samples: float | None
    judged: bool  # it has ended, all its output is read, and no `incomplete` flag already says why it did less


def unequal_work(amounts: dict[str, list[str]], unit: str) -> Flag:
    def runs(ids: list[str]) -> str:
        named = ", ".join(ids[:_NAMED_RUNS]) + (f" and {len(ids) - _NAMED_RUNS} more" if len(ids) > _NAMED_RUNS else "")
        return f"{'run' if len(ids) == 1 else 'runs'} {named}"

    done = "; ".join(f"{amount} {unit} ({runs(ids)})" for amount, ids in amounts.items())
    return Flag(
        code=FlagCode.unequal_work,
        severity="warning",
        message=f"the runs of this series did unequal work ({done}), yet scaling compares their times as if equal. "
        "A program that resumes from a file a sibling left in a shared working directory (a snapshot, a checkpoint) "
        "trains less: give each run its own directory, or make the program start afresh; then run them again.",
    )


def check_unequal_work(runs: Iterable[Work]) -> dict[str, Flag]:
    """By run id, the flag of each judged run of a series whose judged runs differ in epochs done, or, where all of
    them say their samples, in samples by more than SAMPLES_TOLERANCE."""
    series: dict[str, list[Work]] = {}
    for run in runs:
        if run.judged:
            series.setdefault(run.series, []).append(run)
    raised: dict[str, Flag] = {}
    for members in series.values():
        flag = _unequal(members)
        raised |= dict.fromkeys((run.run_id for run in members), flag) if flag else {}
    return raised


def _unequal(members: Sequence[Work]) -> Flag | None:
    epochs: dict[str, list[str]] = {}
    for run in sorted(members, key=lambda run: -run.epochs):
        epochs.setdefault(str(run.epochs), []).append(run.run_id)
    if len(epochs) > 1:
        return unequal_work(epochs, "epochs")
    samples = [run.samples for run in members]
    known = [count for count in samples if count is not None]
    if len(known) < len(samples) or not known or max(known) - min(known) <= SAMPLES_TOLERANCE * max(known):
        return None
    by_samples: dict[str, list[str]] = {}
    for run in sorted(members, key=lambda run: -(run.samples or 0)):
        by_samples.setdefault(f"{run.samples:.0f}", []).append(run.run_id)
    return unequal_work(by_samples, "samples")


# A file as a shared workdir's probe saw it: its name, modification time and size, which together tell one version
# of it from another (contract/workdir_probe.py).
FileVersion = tuple[str, int, int]


@dataclass(frozen=True)
class WorkdirUse:
    """What a program's run found in the workdir its experiment's runs share, and what it wrote there (its
    batch script's probe: empty where unknown, or where the run started in its own directory)."""

    run_id: str
    experiment_id: str
    found: frozenset[FileVersion]  # the newest files there at its start
    wrote: frozenset[FileVersion]  # the files it created or changed, as it left them


# The files one sentence names; the others are counted.
NAMED_FILES = 3


def _names(names: Sequence[str]) -> str:
    shown = ", ".join(names[:NAMED_FILES])
    return shown if len(names) <= NAMED_FILES else f"{shown} and {len(names) - NAMED_FILES} more"


def _runs(run_ids: Sequence[str]) -> str:
    return f"run {run_ids[0]}" if len(run_ids) == 1 else f"runs {', '.join(run_ids[:-1])} and {run_ids[-1]}"


def shared_workdir(finders: Sequence[str], names: Sequence[str], writer: str) -> Flag:
    return Flag(
        code=FlagCode.shared_workdir,
        severity="warning",
        message=f"{_runs(finders)} started with {_names(names)} written by run {writer} in the workdir they share: "
        "a program that resumes from what it finds did less work than its siblings, and its times do not compare. "
        "Use cwd run_dir, or write under SCALELAB_RUN_DIR.",
    )


def check_shared_workdir(uses: Iterable[WorkdirUse]) -> dict[str, list[Flag]]:
    """By run id, a flag for each run of an experiment that found, at its start, a file another run of the same
    experiment wrote: the very version that run left (same name, modification time and size), so that it was there
    when this one started and came from that run, whatever the clocks of the nodes say. Both sides are bounded by
    the probe (the newest files found, the files written), so the rule costs a set lookup per file found."""
    by_experiment: dict[str, list[WorkdirUse]] = {}
    for use in uses:
        by_experiment.setdefault(use.experiment_id, []).append(use)
    raised: dict[str, list[Flag]] = {}
    for runs in by_experiment.values():
        writers: dict[FileVersion, str] = {}
        for run in runs:
            writers.update(dict.fromkeys(run.wrote, run.run_id))
        # (writer, the files) -> the runs that found exactly those of the writer's files.
        found: dict[tuple[str, tuple[str, ...]], list[str]] = {}
        for run in runs:
            by_writer: dict[str, set[str]] = {}
            for version in run.found:
                writer = writers.get(version)
                if writer is not None and writer != run.run_id:
                    by_writer.setdefault(writer, set()).add(version[0])
            for writer, seen in by_writer.items():
                found.setdefault((writer, tuple(sorted(seen))), []).append(run.run_id)
        for (writer, names), finders in found.items():
            flag = shared_workdir(finders, names, writer)
            for finder in finders:
                raised.setdefault(finder, []).append(flag)
    return raised


def worst_first(flags: Iterable[Flag]) -> list[Flag]:
    """Distinct flags, warnings before notes, each code's flags together."""
    unique = {(flag.code, flag.message): flag for flag in flags}
    return sorted(unique.values(), key=lambda flag: (flag.severity != "warning", flag.code, flag.message))


def point_flags(flags: Iterable[Flag]) -> list[Flag]:
    """Those of a run's flags that its point raised."""
    return [flag for flag in flags if flag.code in POINT_CODES]


# ---- a regression test's flags: raised on a point of a later experiment against its reference ---------------------


def _floor_words(floor: float, learned: bool) -> str:
    where = "learned from the profile's A/A pairs" if learned else "the default, as the profile has no A/A pair yet"
    return f"the noise floor, {floor:.0%} ({where})"


def regressed(series: str, gpus: int, ratio: float, low: float, floor: float, learned: bool) -> Flag:
    return Flag(
        code=FlagCode.regressed,
        severity="warning",
        message=f"{series} at {gpus} GPUs regressed: {ratio:.2f}x the reference's time (95 % interval "
        f"{low:.2f}x and up), beyond {_floor_words(floor, learned)}. Compare the two experiments' provenance (image "
        "digest, torch and NCCL versions, nodes) in the history; run it again to confirm before blaming the change.",
    )


def improved(series: str, gpus: int, ratio: float, high: float, floor: float, learned: bool) -> Flag:
    return Flag(
        code=FlagCode.improved,
        severity="info",
        message=f"{series} at {gpus} GPUs improved: {ratio:.2f}x the reference's time (95 % interval up to "
        f"{high:.2f}x), beyond {_floor_words(floor, learned)}. If the change is meant to stay, pin this experiment "
        "as the new reference.",
    )


def check_regression(
    verdict: str,
    series: str,
    gpus: int,
    ratio: float,
    interval: tuple[float | None, float | None],
    floor: float,
    learned: bool,
) -> Flag | None:
    """The flag of a point's verdict, as server.services.regression.verdict draws it against the noise floor (the
    rule is there, once): regressed or improved; None for the others. `interval`: the ratio's (low, high)."""
    low, high = interval
    if verdict == "regressed" and low is not None:
        return regressed(series, gpus, ratio, low, floor, learned)
    if verdict == "improved" and high is not None:
        return improved(series, gpus, ratio, high, floor, learned)
    return None


def reference_flagged(codes: Sequence[str]) -> str:
    """Why a verdict against a flagged reference point is not confident: the sentence the answer's summary adds."""
    return (
        f"the reference's runs at this point carry warnings ({', '.join(sorted(set(codes)))}), so its times may not be "
        "what the spec costs, so the verdict leans on doubtful figures; fix what the flags say and pin a new reference"
    )
