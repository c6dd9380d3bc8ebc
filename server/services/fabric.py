"""The fabric store: each probed tier of a run kept by its shape, with its curve and its fit (`conclude`, once the
run's output is read), the fits the prediction reads (`fits_for`), the listing `GET /api/fabric` answers, and a
probe experiment's runs with what each measured (`probe_runs`, or one run's: `probe_run`); and, apart from it, the
fabric a run imported from a scaling card carries (`carried`).

Nothing a job writes is trusted: the records were bounded and checked against nccl-tests' arithmetic when parsed
(contract.records.FabricRecord), and the fit stored is the server's own, made from the points it keeps
(contract.fabric.fit_alpha_beta), not the one the job printed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from pydantic import ValidationError
from sqlmodel import Session, col, delete, select

from contract.card import CardFabric
from contract.fabric import (
    AlphaBeta,
    Collective,
    Sample,
    Tier,
    algorithm_bandwidth,
    bus_bandwidth,
    fit_alpha_beta,
    fit_error,
)
from contract.records import FabricRecord
from contract.spec import RunKind, RunSpec
from server.errors import NotFound
from server.models import (
    FABRIC_FLAG_CHARS,
    CarriedFabric,
    Experiment,
    FabricEntry,
    FabricPoint,
    FabricProbe,
    FabricPublic,
    FabricShape,
    Flag,
    FlagCode,
    Metric,
    ProbeRunFabric,
    Run,
)
from server.models.common import utcnow
from server.profiles import FabricBand
from server.services import flags

# A profile's fabric_reference: per tier and backend, what a pre-flight is expected to reach.
Reference = Mapping[Tier, Mapping[str, FabricBand]]
# What a pre-flight is judged against: the flag's own band (one rule: server/services/flags.py).
Band = flags.FabricExpected
# Without a reference in the profile, a pre-flight is expected to reach the lowest of the earlier measurements of
# its shape at its size less this share: the latency-bandwidth model's own error (GenModel: about 20 %), and the
# noise of a shared machine, are not a degraded fabric.
SPREAD_MARGIN = 0.2

# The most entries one listing answers, newest first.
MAX_ENTRIES = 500


@dataclass(frozen=True)
class _Key:
    tier: Tier
    preflight: bool


def partition_of(session: Session, run: Run) -> str:
    """The partition the run was rendered for; for a run from before runs kept it, its request's, else ""."""
    if run.partition:
        return run.partition
    experiment = session.get(Experiment, run.experiment_id)
    resources = (experiment.request.get("resources") or {}) if experiment is not None else {}
    return str(resources.get("partition") or "")


def conclude(
    session: Session, run: Run, reference: Reference | None = None, bands: Mapping[Tier, Band | None] | None = None
) -> int:
    """Store the fabric measurements of a run whose output has been read to its end (a probe's, or a training run's
    pre-flight), one row per tier and pre-flight mark, replacing what an earlier reading stored; the rows written.
    A size measured twice (a requeued job measures again) keeps its latest figure. A pre-flight is judged against
    `reference` (its profile's fabric_reference) or else the earlier measurements of its shape (`expected`); where
    `bands` is given (a scaling card's, per tier), against those alone, nothing looked up. The band is kept with
    the verdict."""
    rows = session.exec(
        select(Metric.record)
        .where(Metric.run_id == run.id, Metric.kind == "fabric", col(Metric.counts))
        .order_by(col(Metric.offset))
    ).all()
    measured: dict[_Key, dict[tuple[Collective, int], FabricRecord]] = {}
    for stored in rows:
        try:
            record = FabricRecord.model_validate(stored)
        except ValidationError:
            continue  # stored by another version of scalelab, and not ours to read
        points = measured.setdefault(_Key(record.tier, record.preflight), {})
        points[(record.collective, record.nbytes)] = record
    if not measured:
        return 0
    session.exec(delete(FabricProbe).where(col(FabricProbe.run_id) == run.id))
    written = 0
    for key, points in measured.items():
        records = list(points.values())
        try:
            fit = fit_alpha_beta([Sample(r.collective, r.ranks, r.nbytes, r.seconds) for r in records])
        except ValueError:
            continue  # no curve to fit (one size, or timings that do not grow): nothing the prediction can read
        first = records[0]
        probe = FabricProbe(
            run_id=run.id,
            profile=run.profile or "",
            partition=partition_of(session, run),
            nodes=first.nodes,
            processes_per_node=first.processes_per_node,
            backend=first.backend,
            tier=key.tier.value,
            ranks=max(r.ranks for r in records),
            preflight=key.preflight,
            alpha_s=fit.alpha_s,
            beta_bytes_per_s=fit.beta_bytes_per_s,
            points=[
                {"collective": r.collective.value, "ranks": r.ranks, "nbytes": r.nbytes, "seconds": r.seconds}
                for r in records
            ],
            measured_at=run.ended_at or utcnow(),
        )
        if key.preflight:
            band, probe.degraded = _verdict(session, probe, records, reference or {}, bands)
            probe.expected = None if band is None else asdict(band)
        session.add(probe)
        written += 1
    return written


def _verdict(
    session: Session,
    probe: FabricProbe,
    records: list[FabricRecord],
    reference: Reference,
    bands: Mapping[Tier, Band | None] | None,
) -> tuple[Band | None, str | None]:
    """The band a pre-flight's largest all-reduce is judged against (`bands`' where given, else `expected`), and the
    fabric_degraded sentence where it is below it, else None."""
    reduces = [r for r in records if r.collective is Collective.all_reduce and r.ranks > 1]
    if not reduces:
        return None, None
    largest = max(reduces, key=lambda r: r.nbytes)
    # A card's bands are taken outright: nothing of this instance's reference or probes is looked up for them.
    band = bands.get(Tier(probe.tier)) if bands is not None else expected(session, probe, largest.nbytes, reference)
    flag = flags.check_fabric_degraded(probe.tier, largest.nbytes, largest.busbw_bytes_per_s, band)
    return band, (flag.message[:FABRIC_FLAG_CHARS] if flag is not None else None)


def expected(session: Session, probe: FabricProbe, nbytes: int, reference: Reference) -> Band | None:
    """What an all-reduce of `nbytes` on the probe's tier is expected to reach: the profile's reference band for its
    tier and backend where it sets one; else the spread of the earlier measurements (probe runs and pre-flights) of
    the same shape, profile and partition at that size, its low end less SPREAD_MARGIN; else nothing (no flag)."""
    band = reference.get(Tier(probe.tier), {}).get(probe.backend)
    if band is not None:
        low, high = band.busbw_gb_per_s
        source = f"profile {probe.profile}'s fabric_reference: {band.source}"
        return Band(low * 1e9, high * 1e9, source, "profile_reference")
    earlier = session.exec(
        select(FabricProbe).where(
            FabricProbe.profile == probe.profile,
            FabricProbe.partition == probe.partition,
            FabricProbe.nodes == probe.nodes,
            FabricProbe.processes_per_node == probe.processes_per_node,
            FabricProbe.backend == probe.backend,
            FabricProbe.tier == probe.tier,
            FabricProbe.run_id != probe.run_id,
            col(FabricProbe.measured_at) < probe.measured_at,
        )
    ).all()
    figures: list[tuple[float, str]] = []
    for other in earlier:
        for stored in other.points:
            if stored["collective"] == Collective.all_reduce.value and int(stored["nbytes"]) == nbytes:
                figures.append((_point(stored).busbw_bytes_per_s, other.run_id))
    if not figures:
        return None
    values = [value for value, _ in figures]
    runs = sorted({run_id for _, run_id in figures})
    named = ", ".join(runs[:3]) + (f" and {len(runs) - 3} more" if len(runs) > 3 else "")
    source = (
        f"no fabric_reference in profile {probe.profile}: the spread of {len(runs)} earlier probe(s) of "
        f"{probe.nodes} node(s) x {probe.processes_per_node} on partition {probe.partition or 'default'} "
        f"(runs {named}), {min(values) / 1e9:.3g}-{max(values) / 1e9:.3g} GB/s, its low end less "
        f"{SPREAD_MARGIN:.0%}"
    )
    return Band(min(values) * (1 - SPREAD_MARGIN), max(values), source, "earlier_probes")


def degraded_flags(session: Session, run_ids: Iterable[str]) -> dict[str, list[Flag]]:
    """The fabric_degraded flags of these runs' pre-flights, by run, as judged when they were stored; for a run
    imported from a scaling card, as its card carries them (judged on the exporting cluster, verified on import)."""
    ids = list(run_ids)
    if not ids:
        return {}
    found: dict[str, list[Flag]] = {}
    rows = session.exec(
        select(FabricProbe.run_id, FabricProbe.degraded).where(
            col(FabricProbe.run_id).in_(ids), col(FabricProbe.degraded).is_not(None)
        )
    ).all()
    verdicts = [
        *rows,
        *((run_id, item.degraded) for run_id, given in carried(session, ids).items() for item in given.measured),
    ]
    for run_id, message in verdicts:
        if message:
            found.setdefault(run_id, []).append(
                Flag(code=FlagCode.fabric_degraded, severity="warning", message=message)
            )
    return found


def carried(session: Session, run_ids: Iterable[str]) -> dict[str, CardFabric]:
    """The fabric a scaling card carries for each of these runs that came from one (CarriedFabric), by run."""
    ids = list(run_ids)
    if not ids:
        return {}
    rows = session.exec(select(CarriedFabric).where(col(CarriedFabric.run_id).in_(ids))).all()
    return {row.run_id: CardFabric.model_validate(row.fabric) for row in rows}


def carried_fits(given: CardFabric) -> dict[Tier, AlphaBeta]:
    """The fits a card's run's prediction read, per tier, as the card carries them."""
    return {Tier(fit.tier): AlphaBeta(alpha_s=fit.alpha_s, beta_bytes_per_s=fit.beta_bytes_per_s) for fit in given.fits}


def _distance(wanted: int, measured: int) -> float:
    """How far apart two rank counts are, as a ratio: 2 against 4 is as far as 4 against 8."""
    return abs(math.log(max(1, wanted) / max(1, measured)))


def fits_for(
    session: Session, profile: str, partition: str, nodes: int, processes_per_node: int, backend: str
) -> dict[Tier, AlphaBeta]:
    """The latency and bandwidth of each tier a run of this shape communicates over (chosen_probes' rule); an empty
    dict when none was probed there."""
    chosen = chosen_probes(session, profile, partition, nodes, processes_per_node, backend)
    return {
        tier: AlphaBeta(alpha_s=probe.alpha_s, beta_bytes_per_s=probe.beta_bytes_per_s)
        for tier, probe in chosen.items()
    }


def chosen_probes(
    session: Session, profile: str, partition: str, nodes: int, processes_per_node: int, backend: str
) -> dict[Tier, FabricProbe]:
    """The stored probe whose fit is read for each tier a run of this shape communicates over, from the newest probe
    runs of its profile, partition and backend; none where none was probed there.

    The rule: a tier's figures depend on that tier's ranks only. The intra_node tier (a run with more than one
    process per node) is read from probes with the same processes per node, whatever their node count; the
    inter_node tier (a run of more than one node) from probes of the same node count, whatever their processes per
    node (one rank per node takes part). Where no probe has that count, the closest count probed (by ratio; the
    newest among equals) stands in: busbw is normalised by nccl-tests' factors to depend little on the ranks.
    Pre-flights (a few all-reduces, 16x apart, whose fit rests on four or five points) are not read.
    """
    wanted: dict[Tier, tuple[str, int]] = {}
    if processes_per_node > 1:
        wanted[Tier.intra_node] = ("processes_per_node", processes_per_node)
    if nodes > 1:
        wanted[Tier.inter_node] = ("nodes", nodes)
    if not wanted:
        return {}
    probes = session.exec(
        select(FabricProbe).where(
            FabricProbe.profile == profile,
            FabricProbe.partition == partition,
            FabricProbe.backend == backend,
            col(FabricProbe.tier).in_([tier.value for tier in wanted]),
            col(FabricProbe.preflight) == False,  # noqa: E712  (SQL, not Python, comparison)
        )
    ).all()
    chosen: dict[Tier, FabricProbe] = {}
    for tier, (field, count) in wanted.items():
        candidates = [probe for probe in probes if probe.tier == tier.value]
        if candidates:
            chosen[tier] = min(
                candidates, key=lambda probe: (_distance(count, getattr(probe, field)), -probe.measured_at.timestamp())
            )
    return chosen


def point(collective: Collective, ranks: int, nbytes: int, seconds: float) -> FabricPoint:
    """A stored point with its bandwidths, computed again from its size and time by nccl-tests' definitions."""
    return FabricPoint(
        collective=collective,
        ranks=ranks,
        nbytes=nbytes,
        seconds=seconds,
        algbw_bytes_per_s=algorithm_bandwidth(nbytes, seconds),
        busbw_bytes_per_s=bus_bandwidth(collective, ranks, nbytes, seconds),
    )


def entry(probe: FabricProbe) -> FabricEntry:
    points = [_point(stored) for stored in probe.points]
    fit = AlphaBeta(alpha_s=probe.alpha_s, beta_bytes_per_s=probe.beta_bytes_per_s)
    return FabricEntry(
        shape=FabricShape(
            profile=probe.profile,
            partition=probe.partition,
            nodes=probe.nodes,
            processes_per_node=probe.processes_per_node,
            backend=probe.backend,
            tier=Tier(probe.tier),
        ),
        preflight=probe.preflight,
        ranks=probe.ranks,
        points=points,
        alpha_s=probe.alpha_s,
        beta_bytes_per_s=probe.beta_bytes_per_s,
        fit_error=fit_error(fit, [Sample(p.collective, p.ranks, p.nbytes, p.seconds) for p in points]),
        run_id=probe.run_id,
        measured_at=probe.measured_at,
        degraded=probe.degraded,
    )


def _point(stored: dict[str, Any]) -> FabricPoint:
    return point(
        Collective(stored["collective"]), int(stored["ranks"]), int(stored["nbytes"]), float(stored["seconds"])
    )


def listing(
    session: Session,
    profile: str | None = None,
    partition: str | None = None,
    backend: str | None = None,
    preflight: bool | None = None,
    nodes: int | None = None,
    processes_per_node: int | None = None,
) -> FabricPublic:
    """The stored probes, newest first, filtered by what is given."""
    query = select(FabricProbe)
    if nodes is not None:
        query = query.where(FabricProbe.nodes == nodes)
    if processes_per_node is not None:
        query = query.where(FabricProbe.processes_per_node == processes_per_node)
    if profile is not None:
        query = query.where(FabricProbe.profile == profile)
    if partition is not None:
        query = query.where(FabricProbe.partition == partition)
    if backend is not None:
        query = query.where(FabricProbe.backend == backend)
    if preflight is not None:
        query = query.where(FabricProbe.preflight == preflight)
    probes = session.exec(
        query.order_by(col(FabricProbe.measured_at).desc(), col(FabricProbe.tier)).limit(MAX_ENTRIES)
    ).all()
    return FabricPublic(data=[entry(probe) for probe in probes], count=len(probes))


def probe_runs(session: Session, runs: Sequence[Run]) -> list[ProbeRunFabric]:
    """The probe runs among `runs`, in their order, each with its shape, state, failure and the tiers it measured
    (its probe runs' rows, not pre-flights: one query)."""
    probes = [run for run in runs if run.spec.get("kind") == RunKind.probe.value]
    stored = session.exec(
        select(FabricProbe)
        .where(col(FabricProbe.run_id).in_([run.id for run in probes]), col(FabricProbe.preflight) == False)  # noqa: E712
        .order_by(col(FabricProbe.tier).desc())  # intra_node first: within a node, then across nodes
    ).all()
    tiers: dict[str, list[FabricEntry]] = {}
    for probe in stored:
        tiers.setdefault(probe.run_id, []).append(entry(probe))
    answer = []
    for run in probes:
        spec = RunSpec.model_validate(run.spec)
        measured = tiers.get(run.id, [])
        answer.append(
            ProbeRunFabric(
                run_id=run.id,
                state=run.state,
                profile=run.profile or "",
                partition=partition_of(session, run),
                nodes=spec.nodes,
                processes_per_node=spec.gpus_per_node,
                backend=measured[0].shape.backend if measured else None,
                failure_kind=run.failure_kind,
                failure_detail=run.failure_detail,
                message=run.message,
                ingest_done=run.ingest_done,
                tiers=measured,
            )
        )
    return answer


def probe_run(session: Session, run: Run) -> ProbeRunFabric:
    """One probe run's shape, state and the tiers it measured, as `probe_runs` lists it; NotFound for a run of
    another kind, which has no fabric curves of its own."""
    found = probe_runs(session, [run])
    if not found:
        raise NotFound(f"run {run.id} is not a fabric probe: it has no fabric curves of its own")
    return found[0]
