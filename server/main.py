"""The application: routes, pages, and the monitor that follows the jobs."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from datetime import timedelta

from fastapi import Depends, FastAPI, HTTPException, Request, Response
from fastapi.encoders import jsonable_encoder
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.gzip import GZipMiddleware
from fastapi.responses import JSONResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from sqlalchemy.engine import Engine

from server import __version__
from server.api import (
    cards,
    compare,
    experiments,
    fabric,
    imports,
    notifications,
    ops,
    plans,
    profiles,
    references,
    reports,
    runs,
    tokens,
)
from server.api.deps import SignInRequired, get_current_user
from server.api.errors import SIGN_IN, add_handlers
from server.api.limits import BodyLimit
from server.api.prepared import GZIP_MINIMUM_SIZE
from server.config import Settings, get_settings
from server.db import init_db, make_engine
from server.lease import Lease
from server.lease import timing as lease_timing
from server.logs import RequestContext
from server.monitor import Monitor
from server.profiles import ProfileCatalog, load_catalog
from server.scheduler import Scheduler
from server.scheduler.choice import SchedulerUnusable, make_scheduler
from server.services import rundirs
from server.services.delivery import DeliveryLoop
from server.services.hangs import HangRules
from server.services.ingestion import OutputLimits
from server.services.signed_in import SignedIn
from server.services.signin_throttle import PasswordChecks
from server.telemetry import Counter
from server.web import docs, pages, signin
from server.web.headers import SecurityHeaders
from server.web.loopback import LoopbackOnly
from server.web.templating import STATIC_DIR

log = logging.getLogger(__name__)


def check_fit(settings: Settings, scheduler: Scheduler) -> Scheduler:
    """The scheduler, once what it needs of this host is checked."""
    if scheduler.runs_as_user:
        try:
            rundirs.check_shared_root(settings.runs_dir)
        except rundirs.RunsDirUnfit as exc:
            raise SchedulerUnusable(f"the {scheduler.name} scheduler runs jobs as their users, but {exc}") from None
    return scheduler


def warn_of_programs_for_all(settings: Settings, scheduler: Scheduler) -> None:
    """Say at every start that every user can act as the service's account, where the operator chose so."""
    if settings.programs_for_all_as_service_account and not scheduler.runs_as_user:
        log.warning(
            "SCALELAB_PROGRAMS_FOR_ALL_AS_SERVICE_ACCOUNT is set and the %s scheduler runs every job as this "
            "service's own account: every user may run a program, and so can do anything this account can (read "
            "and change the database, every run's files): every user is as trusted as an admin",
            scheduler.name,
        )


def make_monitor(
    settings: Settings, engine: Engine, scheduler: Scheduler, catalog: ProfileCatalog | None = None
) -> Monitor:
    profiles = catalog.profiles if catalog is not None else {}
    return Monitor(
        engine,
        scheduler,
        settings.poll_interval_s,
        unknown_job_after=timedelta(seconds=settings.unknown_job_after_s),
        limits=OutputLimits.of(settings),
        hang_rules=HangRules.of(settings),
        fabric_references={name: profile.fabric_reference for name, profile in profiles.items()},
    )


def monitor_lease(settings: Settings, engine: Engine) -> Lease:
    """The lease that chooses which of the processes sharing the database follows the jobs."""
    return Lease(engine, lease_timing(settings.poll_interval_s))


async def invalid_request(_request: Request, exc: RequestValidationError) -> JSONResponse:
    """A 422 naming each field and what is wrong with it. The refused values are not echoed back: they can be
    100 kB long, or not even representable in JSON (NaN, a lone surrogate)."""
    errors = [{key: value for key, value in error.items() if key != "input"} for error in exc.errors()]
    return JSONResponse(status_code=422, content={"detail": jsonable_encoder(errors)})


async def sign_in_required(request: Request, exc: Exception) -> Response:
    """The API (and /metrics, which Prometheus scrapes) answers 401; a page sends the browser to the sign-in page,
    which brings it back afterwards."""
    path = request.url.path
    if isinstance(exc, HTTPException) and (path.startswith("/api/") or path == "/metrics"):
        return await http_exception_handler(request, exc)
    return RedirectResponse(signin.login_url(request), status_code=303)


def create_app(
    settings: Settings | None = None, scheduler: Scheduler | None = None, *, start_monitor: bool = True
) -> FastAPI:
    settings = settings or get_settings()
    engine = make_engine(settings.database_url)
    init_db(engine)
    scheduler = check_fit(settings, scheduler or make_scheduler(settings))
    catalog = load_catalog(settings.profiles_dir, settings.profile, settings.program_roots)
    monitor = make_monitor(settings, engine, scheduler, catalog)
    delivery = DeliveryLoop(engine, settings)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        log.info("scalelab %s: scheduler %s, runs in %s", __version__, scheduler.name, settings.runs_dir)
        warn_of_programs_for_all(settings, scheduler)
        tasks = []
        if start_monitor and settings.monitor_in_web:
            # Every web process stands by; the one holding the lease follows the jobs. The notifications the
            # monitor queues are sent beside it, under a lease of their own, so that no receiver can hold a cycle.
            tasks.append(asyncio.create_task(monitor.run_forever(monitor_lease(settings, engine))))
            tasks.append(asyncio.create_task(delivery.run_forever(delivery.lease())))
        yield
        for task in tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        engine.dispose()

    app = FastAPI(
        title="scalelab",
        version=__version__,
        summary="Run and compare distributed PyTorch training experiments on a Slurm cluster.",
        lifespan=lifespan,
        # /docs is the server's own (server/web/docs.py): no CDN.
        docs_url=None,
        redoc_url=None,
    )
    app.exception_handler(RequestValidationError)(invalid_request)
    app.exception_handler(SignInRequired)(sign_in_required)
    add_handlers(app)
    # plotly.js alone is 4.8 MB, and login nodes are often reached through slow SSH tunnels. Level 1, not
    # Starlette's 9: a list of 100 runs (80 kB of JSON) shrinks to 2.9 kB instead of 2.6 kB for a sixth of the CPU
    # (0.16 ms instead of 0.9 ms), the largest cost of that request once its rows are kept.
    app.add_middleware(GZipMiddleware, minimum_size=GZIP_MINIMUM_SIZE, compresslevel=1)
    app.add_middleware(BodyLimit)  # inside RequestContext, which logs and counts its 413s
    app.add_middleware(LoopbackOnly, enabled=not settings.auth)
    app.add_middleware(SecurityHeaders)
    # Added last, so it is outermost: it sees the status and time of the response as the client gets it.
    http_requests = Counter("scalelab_http_requests_total", "HTTP requests served, by method, route and status.")
    app.add_middleware(RequestContext, requests=http_requests)
    app.state.http_requests = http_requests
    app.state.settings = settings
    app.state.engine = engine
    app.state.scheduler = scheduler
    app.state.monitor = monitor
    app.state.delivery = delivery
    app.state.profiles = catalog
    app.state.signed_in = SignedIn(settings.signed_in_ttl_s)
    app.state.password_checks = PasswordChecks(settings.password_checks)
    for router in (
        experiments.router,
        runs.router,
        imports.router,
        profiles.router,
        compare.router,
        reports.router,
        fabric.router,
        references.router,
        cards.router,
        notifications.router,
        plans.router,
    ):
        app.include_router(router, dependencies=[Depends(get_current_user)], responses=SIGN_IN)
    # Making a token may sign in by password (HTTP Basic) instead: each route names who it needs.
    app.include_router(tokens.router, responses=SIGN_IN)
    app.include_router(signin.router)
    app.include_router(ops.router)
    app.include_router(docs.router)

    app.include_router(pages.router, dependencies=[Depends(get_current_user)])
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")

    return app
