"""The flags a comparison raises: each one's sentence (what it means, what to do), written once for the API, the
CSV, the pages and the report."""

from __future__ import annotations

from collections.abc import Iterable

from server.models import Flag, FlagCode

# Above this efficiency a point is better than ideal: something disturbed the baseline or the work differs.
SUPERLINEAR = 1.05
# The slowest rank's time per step over the fastest's above which the others wait for one.
STRAGGLER = 1.2


def superlinear(efficiency: float, gpus: int, baseline_gpus: int) -> Flag:
    return Flag(
        code=FlagCode.superlinear,
        severity="warning",
        message=f"efficiency {efficiency:.2f} at {gpus} GPUs is above 1: better than ideal against {baseline_gpus}. "
        "Usually the baseline was slowed (by runs beside it, too few threads, a cold start) rather than the larger "
        "runs being that fast; check the baseline's flags, run it with isolation exclusive and repeats >= 3.",
    )


def oversubscribed(hosts: Iterable[str], processes: int, threads: int, cpus: int) -> Flag:
    return Flag(
        code=FlagCode.oversubscribed,
        severity="warning",
        message=f"oversubscribed on {', '.join(hosts)}: {processes} processes x {threads} threads on {cpus} CPUs "
        "given: the time measures contention, not scaling. Give each process its own cores (fewer processes per "
        "node, or a partition with more cores per GPU slot).",
    )


def shared_node(job_ids: Iterable[str]) -> Flag:
    jobs = ", ".join(job_ids)
    return Flag(
        code=FlagCode.shared_node,
        severity="warning",
        message=f"other jobs ran on the run's nodes while it ran ({jobs}): its times include their load. Run the "
        "experiment with isolation exclusive, or run it again when the nodes are quiet.",
    )


def noisy(gpus: int, n: int) -> Flag:
    return Flag(
        code=FlagCode.noisy,
        severity="warning",
        message=f"the point at {gpus} GPUs is noisy: its 95 % interval (n = {n}) reaches a neighbouring point's "
        "mean, so the trend between them cannot be read. Add repeats, or longer epochs, until the intervals part.",
    )


def too_short(reason: str) -> Flag:
    """`reason` (from statistics.too_short) says what was short and what to do."""
    return Flag(code=FlagCode.too_short, severity="warning", message=f"too short to time: {reason}.")


def warmup_dominated(first_s: float, timed_s: float) -> Flag:
    return Flag(
        code=FlagCode.warmup_dominated,
        severity="info",
        message=f"the first epoch (warm-up: start-up, allocation, compilation) took {first_s:.2f} s against "
        f"{timed_s:.2f} s for all the timed epochs together. The figures leave it out, but most of the run was "
        "warm-up: run more epochs so that what you time is training.",
    )


def loss_mismatch(loss: float, other: float, other_run: str, tolerance: float) -> Flag:
    return Flag(
        code=FlagCode.loss_mismatch,
        severity="warning",
        message=f"the first epoch's training loss {loss:.7g} differs from {other:.7g} of run {other_run}, which has "
        f"the same seed, data and global batch, by more than the relative {tolerance:g} the equivalence tests allow: "
        "the two did not train the same model. Check the strategy's settings (precision, microbatches, degrees) "
        "before comparing their times.",
    )


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


def straggler(slowest_s: float, fastest_s: float) -> Flag:
    return Flag(
        code=FlagCode.straggler,
        severity="warning",
        message=f"a straggler: the slowest rank took {slowest_s * 1000:.1f} ms per step against the fastest's "
        f"{fastest_s * 1000:.1f} ms ({slowest_s / fastest_s:.2f}x); the others wait for it at every collective. "
        "Look for a slower or busier node, or uneven work between ranks.",
    )


def no_metrics() -> Flag:
    return Flag(
        code=FlagCode.no_metrics,
        severity="warning",
        message="the program completed but printed no [METRIC] epoch line, so scalelab has no figure of it to "
        "chart or compare. Print one per epoch from rank 0: in Python with contract/metrics.py "
        "(metrics.epoch(epoch, train_loss, epoch_time_s, ...); see the README's section on your own program), or "
        'as a line `[METRIC] {"v": 1, "kind": "epoch", "epoch": 1, "train_loss": 0.5, "epoch_time_s": 2.0}`, '
        "or a course script's `[METRIC] epoch=1 loss=0.5 time=2.0`.",
    )


def worst_first(flags: Iterable[Flag]) -> list[Flag]:
    """Distinct flags, warnings before notes, each code's flags together."""
    unique = {(flag.code, flag.message): flag for flag in flags}
    return sorted(unique.values(), key=lambda flag: (flag.severity != "warning", flag.code, flag.message))
