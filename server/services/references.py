"""Pinned references and the regression test against them: which spec an experiment measures (its spec key), pinning
a reference and marking A/A runs, a profile's noise floor, a later experiment compared point by point, and a
reference's history. The statistics are server.services.regression; the flags and their sentences
server.services.flags.

"Same spec" (spec_key): what an experiment's timing depends on: its runs' specs as the server stored them (model,
data, strategy, GPUs, nodes, batch, precision, epochs...; without the seed, the target and the learning-rate rule's
reference), the request's scaling, isolation, partition and sbatch options, and the cluster profile its runs ran
on; not its name, repeats, time limit, concurrency, nor what to do on failure or hang.

The seam for a scaling card (issue 35's other half): `Side` is what a comparison reads of either side, the rows of
the comparison and the provenance; a card's loader only has to give one (`side_of_rows`) to be compared with an
experiment by `compare_sides`.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from sqlmodel import Session, col, select

from contract.states import RunState
from server.errors import Conflict, Invalid, NotFound
from server.models import (
    CompareRow,
    Experiment,
    Flag,
    FlagCode,
    HistoryEntry,
    Measure,
    NoiseFloor,
    Reference,
    ReferenceHistory,
    ReferencePublic,
    RegressionPoint,
    RegressionPublic,
    Run,
    User,
    Verdict,
    isolation_of,
)
from server.runstate import require_owner
from server.services import flags, regression
from server.services.comparison import compare_rows
from server.services.visibility import visible, visible_experiment

# Run spec fields left out of the key: a repeat's seed changes the data order, not what a step costs; the target
# and the learning-rate rule's reference change what is learnt, not how long a step takes.
_NOT_TIMING = frozenset({"seed", "target", "reference_lr", "reference_batch"})
# A/A pairs a profile's floor is learned from, newest first: enough to be measured, bounded in cost.
MAX_AA_PAIRS = 50
# Experiments a history scans (newest first) and the entries it holds.
HISTORY_SCAN = 200
HISTORY_ENTRIES = 100
# Where a run's profile is unknown (an imported run, or one from before profiles were kept).
UNKNOWN_PROFILE = "unknown"


@dataclass
class _Runs:
    """What the key reads of an experiment's runs: their specs as the server stored them, and their profile."""

    specs: list[Mapping[str, Any]] = field(default_factory=list)
    profile: str | None = None


def spec_key(request: Mapping[str, Any], run_specs: Iterable[Mapping[str, Any]], profile: str) -> str:
    """The sha256 of what an experiment's timing depends on: its runs' specs (each distinct one once, without the
    fields in _NOT_TIMING: repeats collapse into one), the request's scaling, isolation, partition and sbatch
    options, and the profile its runs ran on."""
    resources = request.get("resources") or {}
    specs = {
        json.dumps({name: value for name, value in spec.items() if name not in _NOT_TIMING}, sort_keys=True)
        for spec in run_specs
    }
    fields = {
        "runs": sorted(specs),
        "scaling": request.get("scaling", "strong"),
        "isolation": isolation_of(request),
        "partition": resources.get("partition"),
        "sbatch_options": resources.get("sbatch_options") or {},
        "profile": profile,
    }
    return hashlib.sha256(json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _runs_of(session: Session, experiment_ids: Sequence[str]) -> dict[str, _Runs]:
    """Each experiment's runs' specs and profile, in one query."""
    found: dict[str, _Runs] = defaultdict(_Runs)
    if experiment_ids:
        query = select(Run.experiment_id, Run.spec, Run.profile).where(col(Run.experiment_id).in_(experiment_ids))
        for experiment_id, spec, profile in session.exec(query):
            runs = found[experiment_id]
            runs.specs.append(spec)
            runs.profile = runs.profile or profile
    return found


def _key(experiment: Experiment, runs: _Runs) -> tuple[str, str]:
    requested = (experiment.request.get("resources") or {}).get("profile")
    profile = runs.profile or requested or UNKNOWN_PROFILE
    return spec_key(experiment.request, runs.specs, profile), profile


def key_of(session: Session, experiment: Experiment) -> tuple[str, str]:
    """(spec key, profile) of an experiment."""
    return _key(experiment, _runs_of(session, [experiment.id])[experiment.id])


def public(row: Reference) -> ReferencePublic:
    return ReferencePublic.model_validate(row, from_attributes=True)


# ---- pinning -----------------------------------------------------------------------------------------------------


def pin(session: Session, user: User, experiment_id: str) -> ReferencePublic:
    """Pin the experiment as the reference of its spec; the reference pinned before for that spec is unpinned (its
    A/A runs stay: they still measure the profile's noise)."""
    experiment = visible_experiment(session, user, experiment_id)
    require_owner(user, experiment.owner, f"experiment {experiment_id}")
    key, profile = key_of(session, experiment)
    for old in session.exec(select(Reference).where(Reference.spec_key == key, Reference.role == "reference")):
        session.delete(old)
    existing = session.get(Reference, experiment_id)
    if existing is not None:
        session.delete(existing)
    session.flush()
    row = Reference(experiment_id=experiment_id, role="reference", spec_key=key, profile=profile, pinned_by=user.name)
    session.add(row)
    session.commit()
    return public(row)


def mark_aa(session: Session, user: User, experiment_id: str) -> ReferencePublic:
    """Mark the experiment as an A/A run of its spec's pinned reference: its ratios to it teach the profile's
    noise floor. Conflict where no reference is pinned for its spec, or it is that reference."""
    experiment = visible_experiment(session, user, experiment_id)
    require_owner(user, experiment.owner, f"experiment {experiment_id}")
    key, profile = key_of(session, experiment)
    reference = pinned_for(session, key)
    if reference is None:
        raise Conflict(f"no reference is pinned for experiment {experiment_id}'s spec: pin one of its spec first")
    if reference.experiment_id == experiment_id:
        raise Conflict(f"experiment {experiment_id} is the reference itself: an A/A run is another run of its spec")
    existing = session.get(Reference, experiment_id)
    if existing is not None:
        session.delete(existing)
        session.flush()
    row = Reference(
        experiment_id=experiment_id,
        role="aa",
        spec_key=key,
        profile=profile,
        pair_of=reference.experiment_id,
        pinned_by=user.name,
    )
    session.add(row)
    session.commit()
    return public(row)


def unpin(session: Session, user: User, experiment_id: str) -> None:
    """Take the mark (reference or A/A) off the experiment; NotFound where it has none."""
    experiment = visible_experiment(session, user, experiment_id)
    require_owner(user, experiment.owner, f"experiment {experiment_id}")
    row = session.get(Reference, experiment_id)
    if row is None:
        raise NotFound(f"experiment {experiment_id} is neither pinned as a reference nor marked A/A")
    session.delete(row)
    session.commit()


def pinned_for(session: Session, key: str) -> Reference | None:
    return session.exec(select(Reference).where(Reference.spec_key == key, Reference.role == "reference")).first()


# ---- one side of a comparison, and two compared --------------------------------------------------------------------


@dataclass
class Side:
    """What a comparison reads of one side: per point (series, GPUs) the compared time of each finished run, the
    runs' ids, and the warnings on them; and the side's provenance."""

    times: dict[tuple[str, int], list[float]] = field(default_factory=dict)
    run_ids: dict[tuple[str, int], list[str]] = field(default_factory=dict)
    warnings: dict[tuple[str, int], list[Flag]] = field(default_factory=dict)
    measures: dict[tuple[str, int], Measure] = field(default_factory=dict)


# A verdict's own flags are never a reason to doubt the reference.
_VERDICT_CODES = frozenset({FlagCode.regressed, FlagCode.improved})


def _time(row: CompareRow) -> float | None:
    value = {"epoch_time_s": row.mean_epoch_time_s, "step_time_s": row.step_time_s, "run_time_s": row.run_time_s}
    return value.get(row.measure) if row.measure else None


def side_of_rows(rows: Iterable[CompareRow]) -> Side:
    """A side from comparison rows (an experiment's, or a card's once it is loaded as rows): a run counts once it
    completed and all its output was read."""
    side = Side()
    for row in rows:
        point = (row.series, row.gpus)
        side.run_ids.setdefault(point, []).append(row.run_id)
        if row.measure:
            side.measures[point] = row.measure
        time = _time(row)
        if row.state == RunState.completed and row.ingest_done and time is not None and time > 0:
            side.times.setdefault(point, []).append(time)
        warned = [flag for flag in row.flags if flag.severity == "warning" and flag.code not in _VERDICT_CODES]
        side.warnings.setdefault(point, []).extend(warned)
    return side


def side_of(session: Session, experiment_id: str) -> Side:
    return side_of_rows(compare_rows(session, experiment_ids=[experiment_id]))


def compare_sides(reference: Side, later: Side, floor: NoiseFloor) -> tuple[list[RegressionPoint], list[str]]:
    """Each point both sides have, later against reference; and the points only one side has, in words."""
    points: list[RegressionPoint] = []
    shared = sorted(set(reference.run_ids) & set(later.run_ids), key=lambda point: (point[0], point[1]))
    learned = floor.source == "aa_pairs"
    for point in shared:
        series, gpus = point
        before, after = reference.times.get(point, []), later.times.get(point, [])
        measured = regression.ratio(before, after) if before and after else None
        verdict: Verdict = regression.verdict(measured, floor.floor) if measured else "no_verdict"
        raised = None
        if measured:
            interval = (measured.ci_low, measured.ci_high)
            raised = flags.check_regression(verdict, series, gpus, measured.ratio, interval, floor.floor, learned)
        # One of each kind: the reference's runs at a point often share their warnings.
        reference_flags = list({flag.code: flag for flag in reference.warnings.get(point, [])}.values())
        points.append(
            RegressionPoint(
                series=series,
                gpus=gpus,
                measure=later.measures.get(point) or reference.measures.get(point),
                reference_mean_s=sum(before) / len(before) if before else None,
                reference_n=len(before),
                later_mean_s=sum(after) / len(after) if after else None,
                later_n=len(after),
                ratio=measured.ratio if measured else None,
                ci_low=measured.ci_low if measured else None,
                ci_high=measured.ci_high if measured else None,
                verdict=verdict,
                reference_flags=reference_flags,
                hedge=flags.reference_flagged([flag.code for flag in reference_flags]) if reference_flags else None,
                flags=[raised] if raised else [],
                reference_run_ids=reference.run_ids.get(point, []),
                later_run_ids=later.run_ids.get(point, []),
            )
        )
    alone = sorted(set(reference.run_ids) ^ set(later.run_ids))
    return points, [f"{series} at {gpus} GPUs" for series, gpus in alone]


# ---- the noise floor -----------------------------------------------------------------------------------------------


def noise_floor(session: Session, profile: str) -> NoiseFloor:
    """The profile's floor from its A/A pairs (each marked A/A run against the reference it repeats, every point
    with a ratio one value), or the default where it has none."""
    pairs = session.exec(
        select(Reference)
        .where(Reference.profile == profile, Reference.role == "aa", col(Reference.pair_of).is_not(None))
        .order_by(col(Reference.pinned_at).desc())
        .limit(MAX_AA_PAIRS)
    ).all()
    ratios: list[float] = []
    for pair in pairs:
        if pair.pair_of is None or session.get(Experiment, pair.pair_of) is None:
            continue
        reference, later = side_of(session, pair.pair_of), side_of(session, pair.experiment_id)
        for point in sorted(set(reference.times) & set(later.times)):
            ratios.append(regression.ratio(reference.times[point], later.times[point]).ratio)
    learned = regression.learned_floor(ratios)
    return NoiseFloor(profile=profile, floor=learned.value, source=learned.source, points=learned.pairs, ratios=ratios)


def noise_floors(session: Session) -> list[NoiseFloor]:
    """The floor of every profile some experiment was pinned or marked on."""
    profiles = sorted(set(session.exec(select(Reference.profile)).all()))
    return [noise_floor(session, profile) for profile in profiles]


# ---- a regression test, and a reference's history -----------------------------------------------------------------


def regression_of(session: Session, user: User, experiment_id: str, against: str | None = None) -> RegressionPublic:
    """The experiment against the reference pinned for its spec, or against another experiment (`against`, for an
    overlay of two): point by point, with the noise floor of the experiment's profile."""
    experiment = visible_experiment(session, user, experiment_id)
    key, profile = key_of(session, experiment)
    if against is None:
        pinned = pinned_for(session, key)
        if pinned is None:
            raise NotFound(f"no reference is pinned for experiment {experiment_id}'s spec")
        reference_id, chosen = pinned.experiment_id, False
        same = True
    else:
        try:
            other = visible_experiment(session, user, against)
        except NotFound:
            # A query parameter that names nothing is a bad parameter, as /compare's experiment_id is: 422 naming it.
            raise Invalid([(("query", "against"), f"no experiment {against!r}")]) from None
        reference_id, chosen = other.id, True
        same = key_of(session, other)[0] == key
    floor = noise_floor(session, profile)
    points, unmatched = compare_sides(side_of(session, reference_id), side_of(session, experiment_id), floor)
    return _answer(experiment_id, reference_id, chosen, same, floor, points, unmatched)


def _answer(
    experiment_id: str,
    reference_id: str,
    chosen: bool,
    same: bool,
    floor: NoiseFloor,
    points: list[RegressionPoint],
    unmatched: list[str],
) -> RegressionPublic:
    verdict = regression.overall([point.verdict for point in points])
    leaning = [point for point in points if point.reference_flags]
    hedged = bool(leaning) or not same
    return RegressionPublic(
        experiment_id=experiment_id,
        reference_id=reference_id,
        against="chosen" if chosen else "pinned",
        same_spec=same,
        floor=floor,
        verdict=verdict,
        hedged=hedged,
        summary=_summary(verdict, points, floor, leaning, same),
        points=points,
        unmatched=unmatched,
        resamples=regression.RESAMPLES,
        seed=regression.SEED,
    )


def _summary(
    verdict: Verdict,
    points: Sequence[RegressionPoint],
    floor: NoiseFloor,
    leaning: Sequence[RegressionPoint],
    same: bool,
) -> str:
    counts = Counter(point.verdict for point in points)
    where = (
        f"learned from {floor.points} A/A point{'' if floor.points == 1 else 's'} on {floor.profile}"
        if floor.source == "aa_pairs"
        else f"the default: {floor.profile} has no A/A pair yet; mark one (PUT .../aa) to measure its noise"
    )
    words = ", ".join(f"{count} {name.replace('_', ' ')}" for name, count in sorted(counts.items())) or "no point"
    sentence = f"{verdict.replace('_', ' ')}: {words}, against a noise floor of {floor.floor:.1%} ({where})."
    if leaning:
        sentence += (
            f" Hedged: {len(leaning)} reference point(s) carry warnings, so the verdict leans on doubtful figures."
        )
    if not same:
        sentence += " The two experiments are not of the same spec: the ratio compares unlike work."
    return sentence


@dataclass
class _Provenance:
    image: str | None = None
    image_digest: str | None = None
    torch_version: str | None = None
    worker_version: str | None = None
    source_revision: str | None = None
    nodes: list[str] = field(default_factory=list)


def _most_common(values: Counter[str]) -> str | None:
    return values.most_common(1)[0][0] if values else None


def _provenance(session: Session, experiment_ids: Sequence[str]) -> dict[str, _Provenance]:
    """Each experiment's runs' image, versions and nodes: the most common of each where its runs differ."""
    found: dict[str, dict[str, Counter[str]]] = defaultdict(lambda: defaultdict(Counter))
    nodes: dict[str, set[str]] = defaultdict(set)
    names = ("image", "image_digest", "torch_version", "worker_version", "source_revision")
    for run in session.exec(select(Run).where(col(Run.experiment_id).in_(experiment_ids))):
        for name in names:
            if (value := getattr(run, name)) is not None:
                found[run.experiment_id][name][value] += 1
        if run.nodes:
            nodes[run.experiment_id].add(run.nodes)
    return {
        experiment_id: _Provenance(
            **{name: _most_common(found[experiment_id][name]) for name in names},
            nodes=sorted(nodes[experiment_id]),
        )
        for experiment_id in experiment_ids
    }


def history(session: Session, user: User, reference_id: str) -> ReferenceHistory:
    """The pinned reference and every experiment of its spec the viewer may see (the newest HISTORY_SCAN
    experiments scanned), oldest first, each compared with the reference."""
    visible_experiment(session, user, reference_id)
    pinned = session.get(Reference, reference_id)
    if pinned is None or pinned.role != "reference":
        raise NotFound(f"experiment {reference_id} is not a pinned reference")
    candidates = session.exec(
        select(Experiment).where(visible(user)).order_by(col(Experiment.created_at).desc()).limit(HISTORY_SCAN)
    ).all()
    runs = _runs_of(session, [experiment.id for experiment in candidates])
    same = [experiment for experiment in candidates if _key(experiment, runs[experiment.id])[0] == pinned.spec_key]
    truncated = len(same) > HISTORY_ENTRIES
    chosen = sorted(same[:HISTORY_ENTRIES], key=lambda experiment: experiment.created_at)
    roles = {
        row.experiment_id: row.role
        for row in session.exec(select(Reference).where(col(Reference.experiment_id).in_([e.id for e in chosen])))
    }
    floor = noise_floor(session, pinned.profile)
    reference_side = side_of(session, reference_id)
    provenance = _provenance(session, [experiment.id for experiment in chosen])
    entries = []
    for experiment in chosen:
        points, _ = compare_sides(reference_side, side_of(session, experiment.id), floor)
        role = "reference" if experiment.id == reference_id else "aa" if roles.get(experiment.id) == "aa" else "later"
        origin = provenance[experiment.id]
        entries.append(
            HistoryEntry(
                experiment_id=experiment.id,
                name=experiment.name,
                created_at=experiment.created_at,
                role=role,
                verdict=regression.overall([point.verdict for point in points]),
                points=points,
                **asdict(origin),
            )
        )
    return ReferenceHistory(reference=public(pinned), floor=floor, entries=entries, truncated=truncated)
