"""The admin command, `python -m server`: serve scalelab, or manage its users."""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import logging
import os
import signal
import sys
from typing import TYPE_CHECKING

from pydantic import ValidationError

from server import admin_users, logs

if TYPE_CHECKING:
    from fastapi import FastAPI

DESCRIPTION = (
    "Serve scalelab: the REST API (OpenAPI at /docs), the pages, and the monitor that follows the jobs. "
    "Settings come from SCALELAB_* environment variables: SCALELAB_DATABASE_URL, SCALELAB_RUNS_DIR, "
    "SCALELAB_SCHEDULER (auto, slurm, local), SCALELAB_WORKER_PYTHON, SCALELAB_PROFILE, SCALELAB_POLL_INTERVAL_S, "
    "SCALELAB_MONITOR_IN_WEB (false: only `python -m server monitor` follows the jobs), "
    "SCALELAB_AUTH (true: sign-in required), SCALELAB_MAX_CONCURRENT_RUNS, SCALELAB_MAX_GPUS_IN_USE, "
    "SCALELAB_MAX_RUNS_PER_DAY (default quotas per user), SCALELAB_LOG_FORMAT (text or json, as --log-format). "
    "Probes: GET /healthz (alive), GET /readyz (database and scheduler answer); Prometheus: GET /metrics. "
    "`python -m server users --help` manages the accounts."
)


# Seconds an idle connection stays open. Clients and proxies close theirs sooner (httpx after 5 s, nginx after 60 s),
# so the closing is theirs: with uvicorn's own 5 s, a busy client reused connections the server was closing at that
# instant, and the request died unanswered.
KEEP_ALIVE_S = 75


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m server", description=DESCRIPTION)
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    parser.add_argument("--port", type=int, default=8000, help="port to listen on (default: %(default)s)")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    parser.add_argument(
        "--log-format",
        default=os.environ.get("SCALELAB_LOG_FORMAT", "text"),
        choices=["text", "json"],
        help="json: one JSON object per line (time, level, logger, message, request_id; access lines add method, "
        "path, status, duration_ms) for a log collector (default: $SCALELAB_LOG_FORMAT or %(default)s)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="server processes sharing the port, to serve on every core; one of them at a time follows the jobs, "
        "the holder of the monitor's lease in the database (default: %(default)s)",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.add_parser("serve", help="serve scalelab (what happens without a command)")
    commands.add_parser(
        "monitor",
        help="only follow the jobs and send the notifications, without serving: for web processes started with "
        "SCALELAB_MONITOR_IN_WEB=false (several monitors may run: one at a time holds the lease, the others stand by)",
    )
    admin_users.add_parser(commands)
    return parser


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.log_format not in ("text", "json"):  # argparse checks only what is given on the command line
        parser.error(f"SCALELAB_LOG_FORMAT must be text or json, not {args.log_format!r}")
    if args.workers < 1:
        parser.error(f"--workers must be at least 1, not {args.workers}")
    logs.configure(args.log_level, args.log_format)  # once the command line is known good: it replaces every handler
    if args.command == "users":
        return admin_users.run(args)
    if args.command == "monitor":
        return monitor_only()
    return serve(args.host, args.port, args.log_level, args.log_format, args.workers)


def serve(host: str, port: int, log_level: str, log_format: str = "text", workers: int = 1) -> int:
    import uvicorn
    from sqlmodel import Session

    from server.config import get_settings
    from server.main import create_app
    from server.profiles import ProfileError
    from server.scheduler.choice import SchedulerUnusable
    from server.services import users

    log = logging.getLogger("server")
    try:
        settings = get_settings()
        if not settings.auth and not is_loopback(host):
            log.error(
                "refusing to listen on %s with SCALELAB_AUTH=false: anyone who reaches it could run jobs as you. "
                "Turn authentication on (the default) or listen on 127.0.0.1.",
                host,
            )
            return 2
        if (settings.signin == "pam" or settings.scheduler == "slurmrestd") and os.geteuid() == 0:
            log.error(
                "refusing to serve a shared instance (SCALELAB_SIGNIN=pam or SCALELAB_SCHEDULER=slurmrestd) as root: "
                "a web service that submits everyone's jobs must hold no more power than that. Run it as its "
                "service account (scripts/shared-instance install makes one), e.g. runuser -u scalelab -- ..."
            )
            return 2
        app = create_app(settings)
    except ValidationError as exc:
        log.error("invalid settings:\n%s", exc)
        return 2
    except (ProfileError, SchedulerUnusable) as exc:
        log.error("%s", exc)
        return 2
    if settings.auth:
        with Session(app.state.engine) as session:
            token = users.first_admin(session)
        if token is not None:
            print(
                f"scalelab: first start, so the admin user `admin` was made. Its API token, shown only now:\n\n"
                f"    {token}\n\nSign in at http://{host}:{port}/login with it, or give it to the CLI as "
                "SCALELAB_TOKEN. More users: python -m server users add NAME",
                file=sys.stderr,
                flush=True,
            )
    # log_config=None: uvicorn keeps the handlers logs.configure set up, in the chosen format.
    if workers == 1:
        uvicorn.run(app, host=host, port=port, log_level=log_level, log_config=None, timeout_keep_alive=KEEP_ALIVE_S)
        return 0
    # The app above was made to check the settings and to migrate the database once, before the workers start:
    # each worker makes its own (in a fresh interpreter), and uvicorn starts another in place of one that dies.
    app.state.engine.dispose()
    os.environ.update({WORKER_LOG_LEVEL: log_level, "SCALELAB_LOG_FORMAT": log_format})
    uvicorn.run(
        "server.admin:worker_app",
        factory=True,
        workers=workers,
        host=host,
        port=port,
        log_level=log_level,
        log_config=None,
        timeout_keep_alive=KEEP_ALIVE_S,
    )
    return 0


# How the parent hands its log level to the workers, which start as fresh interpreters.
WORKER_LOG_LEVEL = "SCALELAB_WORKER_LOG_LEVEL"


def worker_app() -> FastAPI:
    """The app of one of `--workers N` processes."""
    from server.main import create_app

    log_format: logs.LogFormat = "json" if os.environ.get("SCALELAB_LOG_FORMAT") == "json" else "text"
    logs.configure(os.environ.get(WORKER_LOG_LEVEL, "info"), log_format)
    return create_app()


def monitor_only() -> int:
    """Follow the jobs until SIGTERM or SIGINT, without serving; the lease is given up on the way out."""
    import asyncio

    from server.config import get_settings
    from server.db import init_db, make_engine
    from server.main import check_fit, make_monitor, monitor_lease
    from server.profiles import ProfileError, load_catalog
    from server.scheduler.choice import SchedulerUnusable, make_scheduler
    from server.services.delivery import DeliveryLoop

    log = logging.getLogger("server")
    try:
        settings = get_settings()
        engine = make_engine(settings.database_url)
        init_db(engine)
        scheduler = check_fit(settings, make_scheduler(settings))
    except ValidationError as exc:
        log.error("invalid settings:\n%s", exc)
        return 2
    except SchedulerUnusable as exc:
        log.error("%s", exc)
        return 2
    try:
        catalog = load_catalog(settings.profiles_dir, settings.profile, settings.program_roots)
    except ProfileError as exc:
        log.error("%s", exc)
        return 2
    monitor = make_monitor(settings, engine, scheduler, catalog)
    log.info("scalelab monitor, pid %d: scheduler %s, runs in %s", os.getpid(), scheduler.name, settings.runs_dir)

    delivery = DeliveryLoop(engine, settings)

    async def until_stopped() -> None:
        # The notifications the monitor queues are sent beside it (server/services/delivery.py).
        following = asyncio.gather(
            monitor.run_forever(monitor_lease(settings, engine)), delivery.run_forever(delivery.lease())
        )
        for signum in (signal.SIGTERM, signal.SIGINT):
            asyncio.get_running_loop().add_signal_handler(signum, following.cancel)
        with contextlib.suppress(asyncio.CancelledError):
            await following

    asyncio.run(until_stopped())
    engine.dispose()
    return 0
