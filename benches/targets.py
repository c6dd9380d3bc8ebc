"""Issue 19's targets for a centre-scale instance: each measured figure printed beside the baseline that was
measured on the old main (the issue's own figures, on this 2-core machine) and the target, with whether it is met.

Every centre benchmark (ingestion, reads, monitor cycle, load, live lag) returns its figures as `Target` rows;
`table_of` prints them in one table so one run shows them all side by side.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from benches.common import table


@dataclass(frozen=True)
class Target:
    """One figure: what it measures, its unit, the baseline, what was measured now, and the bound it must meet.

    `higher_is_better` says which side of the bound is met (records/s: at least; ms of CPU: at most). `note`
    explains a figure that misses its target or was measured differently from the baseline.
    """

    what: str
    unit: str
    baseline: float | None
    measured: float
    target: float
    higher_is_better: bool
    note: str = ""

    @property
    def met(self) -> bool:
        return self.measured >= self.target if self.higher_is_better else self.measured <= self.target


def server_processes(count: int) -> str:
    """How many server processes a figure was measured with, for its note."""
    return f"{count} server process{'es' if count > 1 else ''}"


def _figure(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def table_of(targets: Sequence[Target]) -> str:
    header = ["figure", "unit", "baseline (old main)", "now", "target", "met", "note"]
    rows = [
        [
            t.what,
            t.unit,
            _figure(t.baseline),
            _figure(t.measured),
            (">= " if t.higher_is_better else "<= ") + _figure(t.target),
            "yes" if t.met else "NO",
            t.note,
        ]
        for t in targets
    ]
    return table(header, rows)
