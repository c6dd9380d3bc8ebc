"""The admin command, `python -m server`: serve scalelab, or manage its users."""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import sys

from pydantic import ValidationError

from server import admin_users, logs

DESCRIPTION = (
    "Serve scalelab: the REST API (OpenAPI at /docs), the pages, and the monitor that follows the jobs. "
    "Settings come from SCALELAB_* environment variables: SCALELAB_DATABASE_URL, SCALELAB_RUNS_DIR, "
    "SCALELAB_SCHEDULER (auto, slurm, local), SCALELAB_WORKER_PYTHON, SCALELAB_PROFILE, SCALELAB_POLL_INTERVAL_S, "
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
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.add_parser("serve", help="serve scalelab (what happens without a command)")
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
    logs.configure(args.log_level, args.log_format)
    if args.command == "users":
        return admin_users.run(args)
    return serve(args.host, args.port, args.log_level)


def serve(host: str, port: int, log_level: str) -> int:
    import uvicorn
    from sqlmodel import Session

    from server.config import get_settings
    from server.main import SchedulerUnusable, create_app
    from server.profiles import ProfileError
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
    uvicorn.run(app, host=host, port=port, log_level=log_level, log_config=None, timeout_keep_alive=KEEP_ALIVE_S)
    return 0
