"""A series scored by time to its target: each point's MLPerf score over its runs (server.services.targets), the
effective speed-up beside the throughput speed-up, the statistical efficiency, the convergence flags, and the answer
in words, hedged or withheld where its points are flagged (server.services.advice's rule)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from contract.target import Target
from server.models import CompareRow, FlagCode, TargetPoint, TimeToTarget
from server.services import advice, flags, statistics, targets


def measured_from(target: Target) -> str:
    """What a time to target counts, exactly, and from when."""
    return (
        f"Training time to the end of the epoch that first reached {target.describe()}: the sum of the epoch times "
        "(epoch_time_s, the training steps as the run timed them) of each run's epochs that count, from its first "
        "epoch, a resumed run's epochs from before its resume included; start-up, data loading before the first "
        "epoch, evaluation and checkpoints are not counted. Each run's run_time_s beside it is its job's wall time, "
        "start-up included."
    )


def target_points(rows: Sequence[CompareRow]) -> tuple[int | None, list[TargetPoint]]:
    """A series' rows (with their target figures) as its points scored by time to target, by GPU count, and the
    baseline: the smallest GPU count whose point has a score. The points' flags here are their own (convergence)."""
    by_gpus: dict[int, list[CompareRow]] = defaultdict(list)
    for row in rows:
        by_gpus[row.gpus].append(row)
    points = [_scored(gpus, by_gpus[gpus]) for gpus in sorted(by_gpus)]
    baseline = next((point for point in points if point.time_to_target_s is not None), None)
    if baseline is None:
        return None, points
    base_rows = by_gpus[baseline.gpus]
    for point in points:
        _against(point, baseline, by_gpus[point.gpus], base_rows)
    return baseline.gpus, points


def _scored(gpus: int, rows: Sequence[CompareRow]) -> TargetPoint:
    reached = [row for row in rows if row.target_reached and row.time_to_target_s is not None]
    # A run that has ended and whose output is all read has its last word; a live one may yet reach the target.
    ended = [row for row in rows if not row.target_reached and row.state.is_final and row.ingest_done]
    score = targets.score([row.time_to_target_s for row in reached if row.time_to_target_s is not None], len(ended))
    epochs = [float(row.epochs_to_target) for row in reached if row.epochs_to_target is not None]
    epochs_point = statistics.point(gpus, epochs) if epochs else None
    return TargetPoint(
        gpus=gpus,
        global_batch_size=rows[0].global_batch_size,
        runs=len(rows),
        reached=len(reached),
        not_reached=len(ended),
        unfinished=len(rows) - len(reached) - len(ended),
        scoring=score.scoring,
        time_to_target_s=score.time_s,
        ci_low_s=score.ci_low_s,
        ci_high_s=score.ci_high_s,
        n=score.n,
        epochs_to_target=epochs_point.mean if epochs_point else None,
        epochs_ci_low=epochs_point.ci_low if epochs_point else None,
        epochs_ci_high=epochs_point.ci_high if epochs_point else None,
        effective_speedup=None,
        throughput_speedup=None,
        statistical_efficiency=None,
        run_ids=[row.run_id for row in rows],
    )


def _times(point: TargetPoint) -> statistics.Point | None:
    return targets.as_point(point.gpus, point.time_to_target_s, point.ci_low_s, point.ci_high_s, point.n)


def _epochs(point: TargetPoint) -> statistics.Point | None:
    return targets.as_point(
        point.gpus, point.epochs_to_target, point.epochs_ci_low, point.epochs_ci_high, point.reached
    )


def _against(
    point: TargetPoint, baseline: TargetPoint, rows: Sequence[CompareRow], base_rows: Sequence[CompareRow]
) -> None:
    """The point's figures against the baseline's: effective speed-up with its interval, throughput speed-up from
    the same baseline, statistical efficiency and the convergence flag."""
    here, base = _times(point), _times(baseline)
    if here is not None and base is not None and here.mean > 0:
        point.effective_speedup = base.mean / here.mean
        point.effective_speedup_ci_low, point.effective_speedup_ci_high = statistics.ratio_bounds(base, here)
    speedup = next((row.speedup for row in rows if row.speedup is not None), None)
    base_speedup = next((row.speedup for row in base_rows if row.speedup is not None), None)
    if speedup is not None and base_speedup:
        point.throughput_speedup = speedup / base_speedup
    epochs, base_epochs = _epochs(point), _epochs(baseline)
    if epochs is not None and base_epochs is not None:
        point.statistical_efficiency = base_epochs.mean / epochs.mean if epochs.mean > 0 else None
        if (flag := flags.check_convergence(epochs, base_epochs)) is not None:
            point.flags = [flag]


def score_rows(rows: Sequence[CompareRow]) -> None:
    """Write on each row of a series with a target its point's effective speed-up and statistical efficiency, and
    its point's convergence flag."""
    if not rows or rows[0].target is None:
        return
    _, points = target_points(rows)
    by_gpus = {point.gpus: point for point in points}
    for row in rows:
        point = by_gpus[row.gpus]
        row.effective_speedup, row.statistical_efficiency = point.effective_speedup, point.statistical_efficiency
        row.flags = [*row.flags, *point.flags]


def time_to_target(rows: Sequence[CompareRow]) -> TimeToTarget | None:
    """The series scored by time to its target (None without one): its points, each with its own flags and its runs'
    target_not_reached, and the answer in words."""
    target = rows[0].target if rows else None
    if target is None:
        return None
    baseline_gpus, points = target_points(rows)
    at_gpus: dict[int, list[CompareRow]] = defaultdict(list)
    for row in rows:
        at_gpus[row.gpus].append(row)
    for point in points:
        missed = [flag for row in at_gpus[point.gpus] for flag in row.flags if flag.code == FlagCode.target_not_reached]
        point.flags = flags.worst_first([*point.flags, *missed])
    return TimeToTarget(
        target=target,
        measured_from=measured_from(target),
        baseline_gpus=baseline_gpus,
        points=points,
        summary=_summary(target, baseline_gpus, points, at_gpus),
    )


def _gpus(count: int) -> str:
    return f"{count} GPU" if count == 1 else f"{count} GPUs"


def _interval(low: float | None, high: float | None, n: int, scoring: str | None) -> str:
    kept = f"olympic mean of {n} runs" if scoring == "olympic" else f"n {n}"
    if low is None or high is None:
        return f"{kept}, no interval"
    return f"{kept}, 95 % CI {low:.3g}-{high:.3g}" if scoring == "olympic" else f"95 % CI {low:.3g}-{high:.3g}, {kept}"


def _convergence_words(point: TargetPoint, baseline: TargetPoint) -> str:
    """What the point's epochs to target say against the baseline's, as its convergence flag decided."""
    codes = {flag.code for flag in point.flags}
    bigger = (
        point.global_batch_size is not None
        and baseline.global_batch_size is not None
        and point.global_batch_size > baseline.global_batch_size
    )
    if FlagCode.slower_convergence in codes:
        return "the larger batch needs more epochs" if bigger else "it needs more epochs"
    if FlagCode.converged_suspiciously_fast in codes:
        return "fewer epochs than the baseline, which is suspicious (see its flag)"
    return "as many epochs as the baseline within the noise"


def _sentence(point: TargetPoint, baseline: TargetPoint, target: Target) -> str:
    time = point.time_to_target_s or 0.0
    reach = "reaches" if point.gpus == 1 else "reach"
    words = (
        f"{_gpus(point.gpus)} {reach} {target.describe()} in {time:.3g} s "
        f"({_interval(point.ci_low_s, point.ci_high_s, point.n, point.scoring)})"
    )
    if point is baseline:
        return words + "."
    if point.effective_speedup is not None:
        sooner = "sooner" if point.effective_speedup >= 1 else "later"
        factor = point.effective_speedup if point.effective_speedup >= 1 else 1 / point.effective_speedup
        words += f", {factor:.2g}x {sooner} than {_gpus(baseline.gpus)}"
    if point.throughput_speedup is not None:
        words += f"; throughput speed-up {point.throughput_speedup:.2g}x"
    if point.statistical_efficiency is not None:
        words += f"; statistical efficiency {point.statistical_efficiency:.2g}: {_convergence_words(point, baseline)}"
    return words + "."


def _summary(
    target: Target, baseline_gpus: int | None, points: Sequence[TargetPoint], at_gpus: dict[int, list[CompareRow]]
) -> str:
    """The answer in words: each scored point against the baseline, why the others have no score, and how many runs
    did not reach or are still going; hedged or withheld (advice.advise) where its points or their runs carry
    warnings. A not-reached run does not hedge an olympic score: MLPerf's rule has already counted it."""
    unscored = [
        f"{_gpus(point.gpus)}: no score ({_why_unscored(point)})" for point in points if point.time_to_target_s is None
    ]
    missed = sum(point.not_reached for point in points)
    going = sum(point.unfinished for point in points)
    tail = []
    if unscored:
        tail.append("; ".join(unscored) + ".")
    if missed:
        tail.append(f"{missed} of {sum(point.runs for point in points)} runs ended without reaching it.")
    if going:
        tail.append(f"{going} {'run is' if going == 1 else 'runs are'} still going: the figures will change.")
    baseline = next((point for point in points if point.gpus == baseline_gpus), None)
    if baseline is None:
        return " ".join([f"No point reaches {target.describe()} yet.", *tail])
    scored = [point for point in points if point.time_to_target_s is not None]
    answer = " ".join([*(_sentence(point, baseline, target) for point in scored), *tail])
    warned = [_warnings(point, at_gpus[point.gpus]) for point in scored]
    return advice.advise(answer, True, baseline.gpus, warned, what="answer")[1]


def _warnings(point: TargetPoint, rows: Sequence[CompareRow]) -> advice.PointWarnings:
    """The warnings on a scored point and its runs; not a run's target_not_reached under olympic scoring, whose
    rule has already counted it as the slowest."""
    every = [*point.flags, *(flag for row in rows for flag in row.flags)]
    if point.scoring == "olympic":
        every = [flag for flag in every if flag.code != FlagCode.target_not_reached]
    return advice.warnings_of(point.gpus, every)


def _why_unscored(point: TargetPoint) -> str:
    ended = point.reached + point.not_reached
    if ended >= targets.OLYMPIC_RUNS and point.not_reached > 1:
        return f"{point.not_reached} of its {ended} runs did not reach the target, and the olympic mean drops one"
    if point.reached == 0 and point.not_reached:
        return "no run reached the target"
    return "no run has reached it yet"
