"""The hang watchdog, each monitor cycle: a running run stalled past its bound (stalls.py) is flagged and every rank
asked for its stacks through the scheduler; a cycle `dump_wait_s` later the stacks are read, the verdict given
(hang_verdict.py) and kept as the run's failure detail, and with on_hang: cancel its job is cancelled, so that it
stops costing its allocation: the run ends failed, hung (runstate.apply_status, once the scheduler says cancelled).

The two steps are a cycle or more apart, never a wait inside one: the monitor follows every other run meanwhile,
and a restart between them resumes where the run's columns say (stalled_at, stall_judged)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlmodel import Session, col, or_

from contract.program import Launcher
from contract.rundir import STACKS_DIR, STACKS_SIGNAL, stacks_name
from contract.states import FailureKind, RunState
from server.config import Settings
from server.models import Experiment, RankStacks, Run, RunEventKind, RunStacks, utcnow
from server.models.experiment import on_hang_of
from server.models.run import FAILURE_DETAIL_CHARS
from server.runfiles import Unreadable, open_file
from server.scheduler import Scheduler, SchedulerError, SchedulerUnavailable
from server.services import events, notifications, stalls
from server.services.hang_verdict import Place, last_dump, main_thread, place_of, verdict
from server.services.ingestion.reading import REFUSED
from server.services.rundirs import file_owner

log = logging.getLogger(__name__)

# Of each rank's file, its end is read: the last dump, which is what the verdict and the page show.
STACK_BYTES = 64 * 1024
# Ranks whose stacks are read at most: a verdict names groups, not every rank, and a page shows them all.
MAX_RANKS = 256


@dataclass(frozen=True)
class HangRules:
    """The watchdog's settings: the stall rule, and how long the ranks have to write their stacks."""

    stall: stalls.StallRule
    dump_wait_s: float

    @classmethod
    def of(cls, settings: Settings) -> HangRules:
        rule = stalls.StallRule(settings.hang_pace_factor, settings.hang_floor_s, settings.hang_ceiling_s)
        return cls(rule, settings.hang_dump_wait_s)


DEFAULT_HANG_RULES = HangRules.of(Settings.model_construct())


def records_arrived(run: Run, progressed: bool) -> None:
    """Stage that new records of the run were stored now, `progressed` where a step, epoch, generation or program's
    metric line was among them: its pace moves on (from its first progress on; before, it is starting up), and a
    stall it was flagged with (one it was let to keep) is over."""
    if progressed or run.record_arrivals:
        run.record_arrivals = stalls.keep_arrival(run.record_arrivals or [], utcnow().timestamp())
    if run.stalled_at is not None and run.failure_kind != FailureKind.hung:
        run.stalled_at, run.stall_judged = None, False


def _aware(at: datetime) -> datetime:
    return at if at.tzinfo else at.replace(tzinfo=UTC)  # SQLite drops the zone


def watch(engine: Engine, scheduler: Scheduler, rules: HangRules = DEFAULT_HANG_RULES) -> None:
    """One cycle of the watchdog over the running runs of this scheduler whose output is read."""
    now = utcnow()
    with Session(engine) as session:
        # Only the columns the rule reads: thousands of runs may be running, almost none of them stalled.
        rows = (
            session.connection()
            .execute(
                sa.select(col(Run.id), col(Run.started_at), col(Run.record_arrivals), col(Run.stalled_at),
                          col(Run.stall_judged))
                .where(
                    col(Run.state) == RunState.running,
                    col(Run.scheduler) == scheduler.name,
                    col(Run.job_id).is_not(None),
                    col(Run.ingest_stopped).is_(None),
                    or_(col(Run.output_file).is_(None), col(Run.output_file) != REFUSED),
                )
            )
            .all()
        )  # fmt: skip
    for run_id, started_at, arrivals, stalled_at, judged in rows:
        try:
            if stalled_at is None:
                since = _aware(started_at or now).timestamp()
                found = stalls.stall(arrivals or [], since, now.timestamp(), rules.stall)
                if found is not None:
                    _flag(engine, scheduler, run_id, found.sentence(rules.stall))
            elif not judged and (now - _aware(stalled_at)).total_seconds() >= rules.dump_wait_s:
                _judge(engine, scheduler, run_id)
        except Exception:
            # One run's trouble (its files, the scheduler's answer about it) is that run's: the others are watched.
            log.exception("run %s: the hang watchdog failed on it; trying again next cycle", run_id)


def _flag(engine: Engine, scheduler: Scheduler, run_id: str, why: str) -> None:
    """Flag the run stalled and ask every rank for its stacks."""
    with Session(engine) as session:
        run = session.get(Run, run_id)
        if run is None or run.state is not RunState.running or run.stalled_at is not None or run.job_id is None:
            return
        try:
            if scheduler.uses_slurm and _under_torchrun(run):
                # Slurm signals the step's tasks, here one torchrun per node, which would die of it.
                asked = "its ranks were not asked for their stacks: torchrun, Slurm's task, would die of the signal"
            elif _all_installed(run):
                scheduler.signal(run.job_id, STACKS_SIGNAL, run.owner)
                asked = "every rank was asked for its stacks"
            else:
                # A process that did not install the handler would die of the signal: a program without it.
                asked = "its ranks were not asked for their stacks: not every rank installed contract.stacks"
        except SchedulerUnavailable as exc:
            log.warning("run %s: stalled, but the scheduler cannot be reached to ask for stacks: %s", run_id, exc)
            return  # the next cycle finds it stalled again, and asks again
        except SchedulerError as exc:
            asked = f"its ranks could not be asked for their stacks: {exc}"
        run.stalled_at, run.stall_judged = utcnow(), False
        events.record(session, run, RunEventKind.stalled, f"{why}; {asked}")
        log.warning("run %s (job %s) stalled: %s; %s", run_id, run.job_id, why, asked)
        session.add(run)
        session.commit()


def _world(run: Run) -> int:
    return min(int(run.spec.get("gpus") or 1), MAX_RANKS)


def _under_torchrun(run: Run) -> bool:
    program = run.spec.get("program")
    return isinstance(program, dict) and program.get("launcher") == Launcher.torchrun


def _all_installed(run: Run) -> bool:
    """Whether every rank made its stacks file (contract.stacks.install does at once), so answers the signal."""
    for rank in range(_world(run)):
        try:
            with open_file(run.run_dir, stacks_name(rank), file_owner(run), below=STACKS_DIR) as dump:
                if dump is None:
                    return False
        except Unreadable:
            return False
    return True


def rank_stacks(run: Run) -> dict[int, str | None]:
    """Each rank's last stack dump, as text (at most STACK_BYTES of it); None for a rank that wrote none, or whose
    file is not a regular file of the run's own."""
    found: dict[int, str | None] = {}
    for rank in range(_world(run)):
        try:
            with open_file(run.run_dir, stacks_name(rank), file_owner(run), below=STACKS_DIR) as dump:
                if dump is None:
                    found[rank] = None
                    continue
                start = max(0, dump.size - STACK_BYTES)
                text = dump.read(start, STACK_BYTES).decode("utf-8", errors="replace")
        except Unreadable:
            found[rank] = None
            continue
        if start:
            text = text.partition("\n")[2]  # the cut first line
        offset, threads = last_dump(text)
        found[rank] = text[offset:] if threads else None
    return found


def stacks_public(run: Run) -> RunStacks:
    """The run's stall, its verdict and every rank's stacks, for its page."""
    judged = run.stall_judged or run.failure_kind == FailureKind.hung
    return RunStacks(
        run_id=run.id,
        stalled_at=run.stalled_at,
        verdict=run.failure_detail if judged else None,
        ranks=[RankStacks(rank=rank, text=text) for rank, text in rank_stacks(run).items()],
    )


def places_of(stacks: dict[int, str | None]) -> dict[int, Place | None]:
    """Where each rank's main thread is, from its last dump."""
    places: dict[int, Place | None] = {}
    for rank, text in stacks.items():
        thread = main_thread(last_dump(text)[1]) if text else None
        places[rank] = place_of(thread) if thread is not None else None
    return places


def _judge(engine: Engine, scheduler: Scheduler, run_id: str) -> None:
    """Read the stalled run's stacks, keep the verdict, and apply the experiment's on_hang."""
    with Session(engine) as session:
        run = session.get(Run, run_id)
        if run is None or run.state is not RunState.running or run.stalled_at is None or run.stall_judged:
            return
        found = verdict(places_of(rank_stacks(run)))
        experiment = session.get(Experiment, run.experiment_id)
        policy = on_hang_of(experiment.request if experiment is not None else {})
        if policy == "cancel" and run.job_id is not None:
            try:
                scheduler.cancel(run.job_id, run.owner)
            except SchedulerUnavailable as exc:
                log.warning("run %s hung, but the scheduler cannot be reached to cancel it: %s", run_id, exc)
                return  # judged again next cycle
            except SchedulerError as exc:
                found = f"{found}; it could not be cancelled: {exc}"
            else:
                # The scheduler's cancellation then ends it failed, hung (runstate.apply_status).
                run.failure_kind = FailureKind.hung
                events.record(session, run, RunEventKind.hang_cancelled, found[:FAILURE_DETAIL_CHARS])
        run.failure_detail = found[:FAILURE_DETAIL_CHARS]
        run.stall_judged = True
        session.add(run)
        notifications.run_hung(session, run, found[:FAILURE_DETAIL_CHARS])
        session.commit()
    log.warning("run %s hung (on_hang: %s): %s", run_id, policy, found)
