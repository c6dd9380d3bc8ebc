"""Whether a series' points may carry advice: the rule that gives, hedges or withholds its recommendation, and the
sentence that says why. A recommendation is only as good as the points its law was fitted to: a warning on the
baseline (which every speed-up is measured against) or a superlinear point (which says the baseline was slowed)
leaves it nothing to stand on; a warning on another point leaves it standing, with a caution."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from server.models import Flag, FlagCode

Advice = Literal["given", "hedged", "withheld"]


@dataclass(frozen=True)
class PointWarnings:
    """A point's GPU count and the distinct codes of the warnings on it or on its runs, in order of first sight."""

    gpus: int
    codes: tuple[str, ...]


def warnings_of(gpus: int, flags: Iterable[Flag]) -> PointWarnings:
    """The warnings among a point's flags (its own and its runs'): info flags leave the figures standing."""
    codes = dict.fromkeys(flag.code.value for flag in flags if flag.severity == "warning")
    return PointWarnings(gpus, tuple(codes))


def _at(points: Sequence[PointWarnings]) -> str:
    """`the point at 4 GPUs (shared_node)`, `the points at 4 GPUs (shared_node) and 8 GPUs (noisy, too_short)`."""
    words = [f"{point.gpus} {'GPU' if point.gpus == 1 else 'GPUs'} ({', '.join(point.codes)})" for point in points]
    if len(words) == 1:
        return f"the point at {words[0]}"
    return f"the points at {', '.join(words[:-1])} and {words[-1]}"


def advise(
    recommendation: str,
    law_advises: bool,
    baseline_gpus: int,
    points: Sequence[PointWarnings],
    what: str = "recommendation",
) -> tuple[Advice, str]:
    """The advice the series may give and its sentence: withheld where the baseline carries a warning, where a point
    is superlinear (those first: they say what to do), or where no law describes the points (the recommendation
    already says why); hedged, naming the points and their flags, where another point carries a warning; else given
    as it is. `what` the sentence withholds: a recommendation, or an answer (time to target)."""
    baseline = next((point for point in points if point.gpus == baseline_gpus and point.codes), None)
    if baseline is not None:
        return "withheld", (
            f"No {what}: the baseline, {_at([baseline])}, carries warnings, and every speed-up and "
            "efficiency is measured against it, so no trend can be read from them. Do what its flags say and run "
            "it again."
        )
    superlinear = [point for point in points if FlagCode.superlinear.value in point.codes]
    if superlinear:
        return "withheld", (
            f"No {what}: {_at(superlinear)} {'is' if len(superlinear) == 1 else 'are'} better than ideal, "
            "which usually means the baseline was slowed, so every speed-up may be overstated. Check the baseline's "
            "runs and run it again with isolation exclusive and repeats >= 3."
        )
    if not law_advises:
        return "withheld", recommendation
    flagged = [point for point in points if point.codes]
    if flagged:
        return "hedged", (
            f"With caution, as {_at(flagged)} {'carries' if len(flagged) == 1 else 'carry'} warnings and this rests "
            f"on them: {recommendation}"
        )
    return "given", recommendation
