"""Operations: liveness and readiness probes, and the Prometheus metrics.

/healthz and /readyz answer without sign-in: probes (Kubernetes, systemd, a load balancer) carry no token and
they tell nothing about anyone's runs. /metrics carries counts of everyone's runs and what the service does, so it
is for admins when authentication is on: give Prometheus an admin's token (`authorization: {credentials: TOKEN}`
in its scrape config).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import Literal

from fastapi import APIRouter, Depends, HTTPException, Request, status
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BaseModel, Field
from sqlalchemy import text
from sqlalchemy.engine import Engine
from sqlmodel import Session, col, func, or_, select

from contract.states import RunState
from server.api.deps import get_current_user
from server.api.errors import SIGN_IN
from server.models import Run, User
from server.monitor import Monitor
from server.scheduler import Scheduler, SchedulerError
from server.services.ingestion.reading import REFUSED, output_size
from server.telemetry import CONTENT_TYPE, Counter, family

log = logging.getLogger(__name__)

router = APIRouter(tags=["operations"])

# A probe that hangs is worse than one that fails: a check taking longer than this counts as failed.
CHECK_TIMEOUT_S = 10.0


class Health(BaseModel):
    status: Literal["ok"] = "ok"


class Check(BaseModel):
    name: str = Field(description="database or scheduler")
    ok: bool
    detail: str = Field(description="what answered, or why the check failed")


class Readiness(BaseModel):
    status: Literal["ready", "not ready"]
    checks: list[Check]


@router.get("/healthz", response_model=Health, summary="Liveness: the process answers (checks nothing else)")
async def healthz() -> Health:
    return Health()


def _check_database(engine: Engine) -> Check:
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1")).scalar_one()
    except Exception as exc:  # any driver error means the same to a probe: not ready
        return Check(name="database", ok=False, detail=f"{type(exc).__name__}: {exc}")
    return Check(name="database", ok=True, detail="answers")


def _check_scheduler(scheduler: Scheduler) -> Check:
    try:
        scheduler.ping()
    except SchedulerError as exc:
        return Check(name="scheduler", ok=False, detail=f"{scheduler.name}: {exc}")
    return Check(name="scheduler", ok=True, detail=f"{scheduler.name} answers")


class _SingleFlight:
    """Checks that run once at a time each: probes arriving while a check still runs wait for that same run.

    A hung `scontrol ping` blocks its thread until Slurm's own timeout (30 s); with a thread per probe, a probe
    every second would pile up 30 of them and starve the default executor, which the rest of the server shares.
    The checks run on threads of their own (one per check at most), as futures that outlive an event loop.
    """

    def __init__(self, names: int) -> None:
        self._threads = ThreadPoolExecutor(max_workers=names, thread_name_prefix="readiness")
        self._running: dict[str, Future[Check]] = {}
        self._lock = threading.Lock()

    async def run(self, name: str, check: Callable[[], Check]) -> Check:
        with self._lock:
            running = self._running.get(name)
            waited = running is not None and not running.done()
            if running is None or running.done():
                running = self._running[name] = self._threads.submit(check)
        try:
            # Shielded: a probe that gives up leaves the check running for the next probe to wait on.
            return await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(running)), CHECK_TIMEOUT_S)
        except TimeoutError:
            still = " (an earlier probe's check still waits for its answer)" if waited else ""
            return Check(name=name, ok=False, detail=f"no answer within {CHECK_TIMEOUT_S:g} s{still}")


@router.get(
    "/readyz",
    response_model=Readiness,
    summary="Readiness: the database and the scheduler answer (503 naming the check that failed and why)",
    responses={503: {"model": Readiness, "description": "a check failed"}},
)
async def readyz(request: Request) -> JSONResponse:
    state = request.app.state
    if not hasattr(state, "readiness_checks"):
        state.readiness_checks = _SingleFlight(names=2)
    checks = list(
        await asyncio.gather(
            state.readiness_checks.run("database", partial(_check_database, state.engine)),
            state.readiness_checks.run("scheduler", partial(_check_scheduler, state.scheduler)),
        )
    )
    ready = all(check.ok for check in checks)
    for check in checks:
        if not check.ok:
            log.warning("not ready: %s: %s", check.name, check.detail)
    body = Readiness(status="ready" if ready else "not ready", checks=checks)
    return JSONResponse(body.model_dump(), status_code=200 if ready else 503)


def database_families(engine: Engine, monitor: Monitor) -> str:
    """Runs by state, parse errors and ingestion lag, read from the database and the run directories now."""
    with Session(engine) as session:
        by_state = dict(session.exec(select(Run.state, func.count()).group_by(col(Run.state))).all())
        parse_errors = session.exec(select(func.coalesce(func.sum(Run.parse_errors), 0))).one()
        unread = session.exec(
            select(Run.id, Run.run_dir, Run.log_offset).where(
                Run.ingest_done == False,  # noqa: E712  (SQL, not Python, comparison)
                col(Run.state).not_in([RunState.created]),
                # A run whose output was refused is read no further: it is not behind.
                or_(col(Run.output_file).is_(None), col(Run.output_file) != REFUSED),
            )
        ).all()
    now = time.monotonic()
    caught_up = dict(monitor.caught_up)
    lag_bytes, lag_seconds, behind = 0, 0.0, 0
    for run_id, run_dir, offset in unread:
        missing = output_size(run_dir) - offset
        if missing > 0:
            behind += 1
            lag_bytes = max(lag_bytes, missing)
            lag_seconds = max(lag_seconds, now - caught_up.get(run_id, monitor.started_monotonic))
    return "".join(
        [
            family(
                "scalelab_runs",
                "gauge",
                "Runs in the database by state.",
                [((("state", state.value),), by_state.get(state, 0)) for state in RunState],
            ),
            family(
                "scalelab_metric_parse_errors",
                "gauge",
                "Output lines that looked like metric records but could not be read, over all runs in the database.",
                [((), parse_errors)],
            ),
            family(
                "scalelab_ingest_lag_bytes",
                "gauge",
                "Bytes of output not yet ingested, for the run furthest behind.",
                [((), lag_bytes)],
            ),
            family(
                "scalelab_ingest_lag_seconds",
                "gauge",
                "Seconds since the run furthest behind was last read to the end of its output.",
                [((), round(lag_seconds, 3))],
            ),
            family("scalelab_ingest_runs_behind", "gauge", "Runs with output not yet ingested.", [((), behind)]),
        ]
    )


async def get_admin(request: Request) -> User:
    """The sender, if an admin (with authentication off everyone acts as the admin `local`)."""
    user = await get_current_user(request)
    if not user.is_admin:
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            "/metrics is for admins: it counts everyone's runs; give Prometheus an admin's API token",
        )
    return user


@router.get(
    "/metrics",
    response_class=PlainTextResponse,
    summary="Prometheus metrics: runs by state, monitor cycle time, ingestion lag, parse errors, HTTP requests",
    responses={
        200: {"content": {CONTENT_TYPE: {}}, "description": "Prometheus text exposition format 0.0.4"},
        **SIGN_IN,
        403: {"description": "the sender is not an admin"},
    },
    dependencies=[Depends(get_admin)],
)
async def metrics(request: Request) -> PlainTextResponse:
    state = request.app.state
    monitor: Monitor = state.monitor
    http_requests: Counter = state.http_requests
    stored = await asyncio.to_thread(database_families, state.engine, monitor)
    last = monitor.last_cycle_s
    body = "".join(
        [
            stored,
            family(
                "scalelab_monitor_last_cycle_seconds",
                "gauge",
                "Duration of the monitor's last cycle (NaN before the first).",
                [((), float("nan") if last is None else last)],
            ),
            monitor.cycle_seconds.render(),
            family(
                "scalelab_scheduler_failures",
                "gauge",
                "Consecutive monitor polls the scheduler did not answer (0: it answers).",
                [((), monitor.scheduler_failures)],
            ),
            http_requests.render(),
        ]
    )
    return PlainTextResponse(body, media_type=CONTENT_TYPE)
