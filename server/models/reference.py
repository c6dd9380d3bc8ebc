"""Pinned references and A/A pairs (table `reference`), and what the API answers about a regression test: per point
the ratio of times later over reference with its interval and verdict, the noise floor and where it came from, and
a reference's history. The statistics are server.services.regression; the comparison is server.services.references.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field
from sqlmodel import Field as SQLField
from sqlmodel import SQLModel

from server.models.common import utcnow
from server.models.compare import Flag, Measure

Verdict = Literal["regressed", "improved", "indistinguishable", "no_verdict"]
VERDICT_DESCRIPTION = (
    "regressed: the ratio's whole 95 % interval lies above 1 + floor; improved: below 1 / (1 + floor); "
    "indistinguishable: otherwise; no_verdict: a side has fewer than 2 finished runs at the point (no interval)"
)
Role = Literal["reference", "aa"]


class Reference(SQLModel, table=True):
    """An experiment marked for the regression test: the pinned reference of its spec (one per spec), or an A/A
    run (the same spec as `pair_of`, run again to measure the noise floor of its profile)."""

    experiment_id: str = SQLField(primary_key=True, foreign_key="experiment.id", max_length=16)
    role: str = SQLField(max_length=16, description="reference or aa")
    spec_key: str = SQLField(max_length=64, index=True, description="sha256 of the spec fields that affect timing")
    profile: str = SQLField(max_length=64, index=True, description="the cluster profile its runs ran on")
    pair_of: str | None = SQLField(default=None, max_length=16, description="an A/A run's reference experiment")
    pinned_at: datetime = SQLField(default_factory=utcnow)
    pinned_by: str | None = SQLField(default=None, max_length=64)


class ReferencePublic(BaseModel):
    experiment_id: str
    role: Role
    spec_key: str = Field(description="sha256 of the spec fields that affect timing (README: Pinned references)")
    profile: str
    pair_of: str | None = Field(default=None, description="an A/A run: the reference experiment it repeats")
    pinned_at: datetime
    pinned_by: str | None = None


class NoiseFloor(BaseModel):
    """The relative difference below which two measurements of one spec on a profile are not told apart."""

    profile: str
    floor: float = Field(description="a ratio within [1 / (1 + floor), 1 + floor] is not called a change")
    source: Literal["default", "aa_pairs"] = Field(
        description="aa_pairs: the 95th percentile (nearest rank) of |ratio - 1| over the profile's A/A points; "
        "default: the profile has no A/A pair yet, and 0.22 (the upper end of paired differences reported between "
        "identical configurations on shared clusters) stands in"
    )
    points: int = Field(description="A/A points the floor is learned from")
    ratios: list[float] = Field(default=[], description="each A/A point's ratio, later over reference")


class NoiseFloorsPublic(BaseModel):
    data: list[NoiseFloor]


class RegressionPoint(BaseModel):
    """One series at one process count, later against reference."""

    series: str
    gpus: int
    measure: Measure | None = Field(description="the time both sides compare (their series' measure)")
    reference_mean_s: float | None
    reference_n: int
    later_mean_s: float | None
    later_n: int
    ratio: float | None = Field(description="later mean over reference mean: above 1, later is slower")
    ci_low: float | None = Field(default=None, description="95 % bootstrap interval of the ratio (2000 resamples)")
    ci_high: float | None = None
    verdict: Verdict = Field(description=VERDICT_DESCRIPTION)
    reference_flags: list[Flag] = Field(
        default=[], description="warnings on the reference's runs at this point: the verdict leans on them"
    )
    hedge: str | None = Field(default=None, description="why the verdict is not confident, where it is not")
    flags: list[Flag] = Field(default=[], description="the verdict as a flag: regressed or improved")
    reference_run_ids: list[str] = []
    later_run_ids: list[str] = []


class RegressionPublic(BaseModel):
    experiment_id: str
    reference_id: str
    against: Literal["pinned", "chosen"] = Field(
        description="pinned: the reference pinned for this experiment's spec; chosen: another experiment asked for"
    )
    same_spec: bool = Field(description="both have the same spec key; false: the figures compare unlike work")
    floor: NoiseFloor
    verdict: Verdict = Field(description="over every point: regressed if any point is, else improved if any is")
    hedged: bool = Field(description="some point's reference carries a warning, or the specs differ")
    summary: str
    points: list[RegressionPoint]
    unmatched: list[str] = Field(default=[], description="points on one side only, as 'series at N GPUs'")
    resamples: int
    seed: int


class HistoryEntry(BaseModel):
    """One experiment of the reference's spec, as its figure stood against the reference."""

    experiment_id: str
    name: str
    created_at: datetime
    role: Literal["reference", "aa", "later"]
    verdict: Verdict
    points: list[RegressionPoint]
    image: str | None = Field(default=None, description="its runs' image, where they name one (one of them if many)")
    image_digest: str | None = None
    torch_version: str | None = None
    worker_version: str | None = None
    source_revision: str | None = None
    nodes: list[str] = Field(default=[], description="the nodes its runs ran on")


class ReferenceHistory(BaseModel):
    reference: ReferencePublic
    floor: NoiseFloor
    entries: list[HistoryEntry] = Field(description="the reference first, then each later experiment, oldest first")
    truncated: bool = Field(default=False, description="more experiments of the spec than an answer holds")
