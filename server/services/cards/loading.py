"""A card's runs turned back into rows: its experiment, runs, accounting and records stored in a session by
ingestion's own code (each record parsed and bounded as a line of output is, its verdict and the run's summary
decided by the same rule), and the figures then computed by the comparison's own code. In a database of their own
(`recompute`) to check a card, or in this server's (`load_card`) to import one.

`recompute(card)` is what another part reads a card's figures with (a card against an experiment): the card's
figures as this server computes them, and each run's provenance as its records tell it."""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError
from sqlalchemy import create_engine
from sqlalchemy.pool import StaticPool
from sqlmodel import Session, SQLModel, col, select

from contract.card import INT32_MAX, CardFabric, CardFabricBand, CardRun, ScalingCard
from contract.fabric import Tier
from contract.records import (
    METRIC_PREFIX,
    MetricParseError,
    MetricRecord,
    StartRecord,
    current_start,
    parse_metric_line,
)
from contract.spec import RunSpec
from contract.states import FailureKind, RunState
from server.errors import Invalid
from server.models import (
    CarriedFabric,
    ComparePublic,
    Experiment,
    FabricProbe,
    Metric,
    Run,
    RunAccounting,
    RunAccountingBase,
    RunSummary,
    showable,
)
from server.models import ScalingPublic as ScalingAnswer
from server.services import fabric
from server.services.code import code_records
from server.services.comparison import recomputed_answer, scaling
from server.services.comparison.predicted import backend_of
from server.services.ingestion.storing import store_records
from server.services.kept_records import records_by_run

# What an imported run's `scheduler` says: it had no job here, and the monitor never asks a backend about it.
CARD_SCHEDULER = "card"
# A card's problems named in one answer, at most: the first of them say what was done to it.
MAX_PROBLEMS = 20

Loc = tuple[str | int, ...]
# Accounting's figures kept in 32-bit columns (the rest are 64-bit, as a card's JSON is bounded).
_INT32_ACCOUNTING = ("elapsed_s", "alloc_cpus")


class CardRefused(Invalid):
    """The card cannot be read back into runs, or its figures are not its records': each problem names the field."""

    def __init__(self, problems: Sequence[tuple[Loc, str]]) -> None:
        super().__init__((("body", *loc), message) for loc, message in problems[:MAX_PROBLEMS])
        self.found = list(problems[:MAX_PROBLEMS])


@dataclass(frozen=True)
class Recomputed:
    """A card's figures as this server computes them from its records, and each run's provenance as they tell it."""

    compare: ComparePublic
    scaling: ScalingAnswer
    provenance: dict[str, dict[str, Any]]  # run id -> its provenance (TOLD_BY_RECORDS: as its records tell it)

    def figures(self) -> dict[str, Any]:
        """The figures as a card holds them."""
        return figures_json(self.compare, self.scaling)


def figures_json(compare: ComparePublic, analysis: ScalingAnswer) -> dict[str, Any]:
    """The figures as a card holds them: the two answers' JSON, as the API sends it (by alias)."""
    return {
        "compare": compare.model_dump(mode="json", by_alias=True),
        "scaling": analysis.model_dump(mode="json", by_alias=True),
    }


def figures_of(session: Session, experiment_id: str) -> tuple[ComparePublic, ScalingAnswer]:
    """An experiment's figures as a card holds them, none taken from kept answers."""
    compare = recomputed_answer(session, experiment_id)
    return compare, scaling(compare.data, experiment_id)


# The provenance a run's records tell, which a card must carry as they tell it: the columns ingestion sets from the
# latest start record, the hardware of the current start, the code record.
RECORDED = ("image", "image_digest", "worker_version", "torch_version", "source_revision")
# Those a card must carry as its records tell them (the rest: the scheduler's, taken as the card says). The fabric's
# fits are the run's records' (what it measured, its pre-flights' verdicts drawn against the bands the card carries)
# and, taken as the card says, the bands and the stored fits its prediction read.
TOLD_BY_RECORDS = (*RECORDED, "hardware", "code", "fabric")


def _utc_text(moment: datetime) -> str:
    """A time as a card's fabric holds it: UTC, ISO 8601 (a time without a zone is UTC, as the database keeps it)."""
    return (moment.astimezone(UTC) if moment.tzinfo else moment.replace(tzinfo=UTC)).isoformat()


def fabric_of(session: Session, run: Run) -> dict[str, Any] | None:
    """The run's fabric as a card holds it (contract.card.CardFabric): the tiers it measured itself (with the band a
    pre-flight was judged against), and for a multi-process run of the worker the stored probe fits its prediction
    reads (fabric.chosen_probes); for a run from a card, what its card carries beside them (fabric.carried); none
    where there is neither."""
    own = session.exec(
        select(FabricProbe)
        .where(FabricProbe.run_id == run.id)
        .order_by(col(FabricProbe.tier), col(FabricProbe.preflight))
    ).all()
    measured = [
        {
            "tier": probe.tier, "preflight": probe.preflight, "nodes": probe.nodes,
            "processes_per_node": probe.processes_per_node, "backend": probe.backend, "ranks": probe.ranks,
            "alpha_s": probe.alpha_s, "beta_bytes_per_s": probe.beta_bytes_per_s, "degraded": probe.degraded,
            "expected": probe.expected,
        }
        for probe in own
    ]  # fmt: skip
    given = fabric.carried(session, [run.id]).get(run.id)
    if given is not None:
        # The card's fits and partition; its measurements, where this instance kept them rather than drew them again.
        card = given.model_dump(mode="json")
        return {"partition": card["partition"], "measured": measured + card["measured"], "fits": card["fits"]}
    fits = []
    spec = RunSpec.model_validate(run.spec) if run.spec else None
    if spec is not None and spec.gpus > 1 and spec.reads("global_batch_size") and run.profile and run.partition:
        backend = backend_of(session, run.id)
        chosen = fabric.chosen_probes(session, run.profile, run.partition, spec.nodes, spec.gpus_per_node, backend)
        fits = [
            {
                "tier": tier.value, "run_id": probe.run_id, "nodes": probe.nodes,
                "processes_per_node": probe.processes_per_node, "backend": probe.backend, "alpha_s": probe.alpha_s,
                "beta_bytes_per_s": probe.beta_bytes_per_s, "measured_at": _utc_text(probe.measured_at),
            }
            for tier, probe in sorted(chosen.items())
        ]  # fmt: skip
    if not measured and not fits:
        return None
    return {"partition": run.partition, "measured": measured, "fits": fits}


def provenance_of(session: Session, runs: Collection[Run]) -> dict[str, dict[str, Any]]:
    """Each run's provenance, as a card holds it."""
    ids = [run.id for run in runs]
    starts = records_by_run(session, ids, "start", StartRecord)
    codes = code_records(session, ids)
    found = {}
    for run in runs:
        start = current_start(starts.get(run.id, []))
        hardware = start.nodes_hardware if start is not None else None
        code = codes.get(run.id)
        found[run.id] = {
            **{name: getattr(run, name) for name in RECORDED},
            "scheduler": run.scheduler,
            "profile": run.profile,
            "job_id": run.job_id,
            "nodes": run.nodes,
            "hardware": None if hardware is None else [node.model_dump(mode="json") for node in hardware],
            "code": None if code is None else code.model_dump(mode="json", exclude_none=True),
            "fabric": fabric_of(session, run),
        }
    return found


def parsed_records(
    index: int, run: CardRun, keeps_non_finite: bool
) -> tuple[list[tuple[int, MetricRecord]], list[tuple[Loc, str]]]:
    """The run's records parsed as ingestion parses a line of output, with the problems of those it refuses, those
    out of order, and a count that is not the run's."""
    parsed: list[tuple[int, MetricRecord]] = []
    problems: list[tuple[Loc, str]] = []
    last = -1
    for position, item in enumerate(run.records):
        where: Loc = ("runs", index, "records", position)
        if item.offset <= last:
            problems.append(((*where, "offset"), f"{item.offset} does not follow the record before it ({last})"))
        last = max(last, item.offset)
        try:
            record = parse_metric_line(f"{METRIC_PREFIX} {json.dumps(item.record)}", keeps_non_finite=keeps_non_finite)
        except MetricParseError as exc:
            problems.append(((*where, "record"), str(exc)))
            continue
        if record is None:  # cannot happen: the line starts with the prefix
            continue
        parsed.append((item.offset, record))
    if len(run.records) != run.records_read:
        problems.append(
            (
                ("runs", index, "records"),
                f"the card holds {len(run.records)} records of run {run.id}, which stored {run.records_read}: "
                "every record its figures come from must be on the card",
            )
        )
    return parsed, problems


def _run_row(
    index: int, part: CardRun, experiment_id: str, run_id: str, owner: str | None, run_dir: str
) -> tuple[Run, list[tuple[Loc, str]]]:
    problems: list[tuple[Loc, str]] = []
    try:
        state = RunState(part.state)
        if not state.is_final:
            problems.append((("runs", index, "state"), f"{part.state}: a card holds runs that have ended"))
    except ValueError:
        state = RunState.completed
        problems.append((("runs", index, "state"), f"{part.state[:40]!r} is no run state"))
    try:
        spec = RunSpec.model_validate(part.spec).model_dump(mode="json")
    except ValidationError as exc:
        first = exc.errors()[0]
        problems.append((("runs", index, "spec", *first["loc"]), first["msg"]))
        spec = {}
    kind = None
    if part.failure_kind is not None:
        try:
            kind = FailureKind(part.failure_kind)
        except ValueError:
            problems.append((("runs", index, "failure_kind"), f"{part.failure_kind[:40]!r} is no failure kind"))
    run = Run(
        id=run_id,
        experiment_id=experiment_id,
        owner=owner,
        position=part.position,
        state=state,
        spec=spec,
        scheduler=CARD_SCHEDULER,
        origin="imported",
        profile=part.provenance.profile,
        job_id=part.provenance.job_id,
        nodes=part.provenance.nodes,
        exit_code=part.exit_code,
        message=part.message,
        created_at=part.created_at,
        started_at=part.started_at,
        ended_at=part.ended_at,
        failure_kind=kind,
        failure_detail=part.failure_detail,
        run_dir=run_dir,
        ingest_done=True,
        ingest_stopped=part.ingest_stopped,
        parse_errors=part.parse_errors,
        records_read=part.records_read,
    )
    return run, problems


def load_card(
    session: Session,
    card: ScalingCard,
    *,
    owner: str | None,
    new_id: Callable[[str], str],
    run_dir: Callable[[str], str],
) -> tuple[Experiment, list[Run]]:
    """The card's experiment and runs staged in `session` (flushed, not committed), their records stored by
    ingestion's code: `new_id` gives each of the card's ids its id here, `run_dir` each new run id its directory.
    Raises CardRefused naming every field that cannot be read back."""
    keeps_non_finite = session.get_bind().dialect.name == "sqlite"
    part = card.experiment
    try:
        showable(part.name)
    except ValueError as exc:
        raise CardRefused([(("experiment", "name"), str(exc))]) from None
    experiment = Experiment(
        id=new_id(part.id), name=part.name, owner=owner, created_at=part.created_at, request=part.request
    )
    session.add(experiment)
    session.flush()
    problems: list[tuple[Loc, str]] = []
    staged: list[tuple[Run, list[tuple[int, MetricRecord]], CardRun, int]] = []
    for index, run_part in enumerate(card.runs):
        run_id = new_id(run_part.id)
        run, found = _run_row(index, run_part, experiment.id, run_id, owner, run_dir(run_id))
        records, wrong = parsed_records(index, run_part, keeps_non_finite)
        problems += found + wrong
        staged.append((run, records, run_part, index))
    if len({run.id for run, *_ in staged}) != len(staged):
        problems.append((("runs",), "two runs bear the same id"))
    if problems:
        raise CardRefused(problems)
    runs = []
    for run, records, run_part, index in staged:
        session.add(run)
        session.flush()
        summary = RunSummary(run_id=run.id)
        session.add(summary)
        store_records(session, run, summary, records)
        if run_part.accounting is not None:
            try:
                accounting = RunAccountingBase.model_validate(run_part.accounting)
            except ValidationError as exc:
                first = exc.errors()[0]
                raise CardRefused([(("runs", index, "accounting", *first["loc"]), first["msg"])]) from None
            beyond = [name for name in _INT32_ACCOUNTING if abs(getattr(accounting, name) or 0) > INT32_MAX]
            if beyond:
                raise CardRefused([(("runs", index, "accounting", beyond[0]), f"more than {INT32_MAX}")])
            session.add(RunAccounting(run_id=run.id, **accounting.model_dump()))
        runs.append(run)
    session.flush()
    return experiment, runs


@contextmanager
def scratch_session() -> Iterator[Session]:
    """A session on an empty database of its own, in memory, gone when the block ends."""
    engine = create_engine("sqlite://", poolclass=StaticPool)
    try:
        SQLModel.metadata.create_all(engine)
        with Session(engine) as session:
            yield session
    finally:
        engine.dispose()


def _band(given: CardFabricBand | None) -> fabric.Band | None:
    if given is None:
        return None
    return fabric.Band(given.low_bytes_per_s, given.high_bytes_per_s, given.source, given.basis)


def _carried_bands(given: CardFabric | None) -> dict[Tier, fabric.Band | None]:
    """The bands a card's run's pre-flights were judged against, per tier (none: nothing was expected)."""
    return {Tier(item.tier): _band(item.expected) for item in (given.measured if given else []) if item.preflight}


def _restore_fabric(session: Session, runs: list[Run], card: ScalingCard) -> None:
    """The fabric of a card's runs in their database of their own, as the card tells it: what each run measured
    fitted again from its records and its pre-flights judged again by the server's rule against the bands the card
    carries (nothing of this server's references or probes read); the fits its prediction read, and its partition,
    taken as the card says (fabric.carried). A run's own measurements are drawn again, never copied from the card."""
    for run, part in zip(runs, card.runs, strict=True):
        given: CardFabric | None = part.provenance.fabric
        if given is not None:
            run.partition = given.partition
            session.add(run)
            session.add(CarriedFabric(run_id=run.id, fabric={**given.model_dump(mode="json"), "measured": []}))
        fabric.conclude(session, run, bands=_carried_bands(given))
    session.flush()


def recompute(card: ScalingCard) -> Recomputed:
    """The card's figures computed from its records by this server's ingestion and comparison, in a database of
    their own (the card's ids kept), with its fabric store as the card tells it (_restore_fabric); CardRefused
    names what cannot be read back."""
    with scratch_session() as session:
        experiment, runs = load_card(session, card, owner=None, new_id=lambda old: old, run_dir=lambda _: "")
        _restore_fabric(session, runs, card)
        compare, analysis = figures_of(session, experiment.id)
        return Recomputed(compare, analysis, provenance_of(session, runs))


def stored_records(session: Session, run_ids: Collection[str]) -> dict[str, list[tuple[int, dict[str, Any]]]]:
    """Each run's records as stored, in output order."""
    found: dict[str, list[tuple[int, dict[str, Any]]]] = {run_id: [] for run_id in run_ids}
    rows = session.exec(
        select(Metric.run_id, Metric.offset, Metric.record)
        .where(col(Metric.run_id).in_(run_ids))
        .order_by(col(Metric.run_id), col(Metric.offset))
    )
    for run_id, offset, record in rows:
        found[run_id].append((offset, dict(record)))
    return found
