"""Logging: text for a terminal, or one JSON object per line for a log collector; request ids; access logs."""

from __future__ import annotations

import contextvars
import json
import logging
import re
import sys
import time
import uuid
from datetime import UTC, datetime
from typing import Any, Literal

from starlette.routing import Match, Mount, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from server.telemetry import Counter

LogFormat = Literal["text", "json"]
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
REQUEST_ID_HEADER = "X-Request-ID"
# A request id the client sends is kept if it is short and plain: it ends up in every log line of the request.
_CLIENT_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
# What an access log line carries beside the message, as `extra=` fields of the log record.
ACCESS_FIELDS = ("method", "path", "status", "duration_ms")

request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)
access_log = logging.getLogger("server.access")


class _RequestIdFilter(logging.Filter):
    """Stamps each record with the id of the request being served (None outside a request)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id.get()
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        rid = getattr(record, "request_id", None)
        if rid is not None:
            entry["request_id"] = rid
        for field in ACCESS_FIELDS:
            if hasattr(record, field):
                entry[field] = getattr(record, field)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def configure(level: str, log_format: LogFormat) -> None:
    """Route every logger (uvicorn's too) through one handler on stderr in the chosen format."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT))
    handler.addFilter(_RequestIdFilter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error"):
        logging.getLogger(name).handlers.clear()
        logging.getLogger(name).propagate = True
    # RequestContext below writes the access log, with the request id and the route; uvicorn's would repeat it.
    logging.getLogger("uvicorn.access").disabled = True


# Methods counted by name; a client may send any token as a method, and every other one counts as one.
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def _route_of(scope: Scope, root_path: str) -> str:
    """The route's template (/api/runs/{run_id}, /static/{path}), so that a label's values stay few whatever
    clients ask for: never a path as sent, which would add a series to /metrics for each new one."""
    template = getattr(scope.get("route"), "path", None)
    if template:
        return str(template)
    # FastAPI's own routes (/openapi.json, /docs) and the static files' mount leave no route in the scope: they are
    # found again by the request as it came (a mount changes the scope's root_path).
    asked = {"type": "http", "path": scope["path"], "root_path": root_path, "method": scope["method"]}
    for route in scope["app"].router.routes:
        if isinstance(route, Mount | Route) and route.matches(asked)[0] is not Match.NONE:
            return f"{route.path}/{{path}}" if isinstance(route, Mount) else route.path
    # Whatever matched no route (a 404, a redirect to the path with or without its last slash) counts as one.
    return "unmatched"


class RequestContext:
    """ASGI middleware: a request id for each request (the client's X-Request-ID, or a new one), echoed in the
    response; one access log line; and the count of requests by route and status for /metrics."""

    def __init__(self, app: ASGIApp, requests: Counter) -> None:
        self.app = app
        self.requests = requests

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = next((value.decode("latin-1") for key, value in scope["headers"] if key == b"x-request-id"), "")
        rid = given if _CLIENT_REQUEST_ID.match(given) else uuid.uuid4().hex
        token = request_id.set(rid)
        started = time.perf_counter()
        root_path = scope.get("root_path", "")
        status = 500  # what the client sees if the app fails before it starts a response

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (b"x-request-id", rid.encode())]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            duration_ms = round((time.perf_counter() - started) * 1000, 2)
            method, path = scope["method"], scope["path"]
            counted = method if method in _METHODS else "other"
            self.requests.inc({"method": counted, "route": _route_of(scope, root_path), "status": str(status)})
            access_log.info(
                "%s %s %d %.1f ms",
                method,
                path,
                status,
                duration_ms,
                extra={"method": method, "path": path, "status": status, "duration_ms": duration_ms},
            )
            request_id.reset(token)
