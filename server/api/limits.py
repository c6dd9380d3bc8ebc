"""Bounded request bodies, and no body read for a sender who is not signed in.

An ASGI middleware, in front of the routes: FastAPI reads and parses a route's whole body before its dependencies
run, so that an anonymous 200 MB POST was read, parsed (about 550 MB of memory) and only then refused with a 401.
Here:

- a body whose Content-Length is beyond its limit is answered 413 at once, without reading a byte of it;
- a route that needs a signed-in user checks the sender at its first read of the body, before a byte is handed
  over: one who is not signed in gets the route's own answer (401, or the sign-in page), and the body is never read;
- a body that comes without a length (chunked) is counted as it arrives and cut off at its limit with a 413.

The limit is small for every route (SCALELAB_MAX_BODY_BYTES) but the import (SCALELAB_MAX_IMPORT_BODY_BYTES), whose
logs may hold tens of MiB. Until the body is read, uvicorn holds at most 64 KiB of it and stops reading the socket.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from fastapi import HTTPException, Request, status
from fastapi.dependencies.models import Dependant
from sqlalchemy.exc import SQLAlchemyError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from contract.errors import ErrorBody
from server.api.deps import get_current_user
from server.config import Settings

# The routes whose body may be larger: an import's logs, a scaling card's records.
IMPORTS_PATH = "/api/imports"
LARGE_BODY_PATHS = frozenset({IMPORTS_PATH, "/api/cards", "/api/cards/verify"})
# Tells the client that the connection ends with this answer: uvicorn would otherwise read (and throw away) the
# rest of a body nobody reads, however long the sender goes on.
CLOSE = (b"connection", b"close")


class BodyTooLarge(HTTPException):
    """Raised to the route that reads a body beyond its limit, once the 413 is answered: FastAPI passes an
    HTTPException raised while reading the body on as it is."""

    def __init__(self, detail: str) -> None:
        super().__init__(status.HTTP_413_CONTENT_TOO_LARGE, detail)


def route_path(scope: Scope) -> str:
    """The path the routes see: without the prefix a proxy serves the application under (--root-path)."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root) else path


def limit_of(settings: Settings, path: str) -> tuple[int, str]:
    """The most bytes a request's body may hold on `path`, and the setting that says so."""
    if path in LARGE_BODY_PATHS:
        return settings.max_import_body_bytes, "SCALELAB_MAX_IMPORT_BODY_BYTES"
    return settings.max_body_bytes, "SCALELAB_MAX_BODY_BYTES"


def too_large(limit: int, setting: str) -> str:
    return (
        f"the request's body is larger than this server accepts here: at most {limit} bytes "
        f"({limit / 2**20:.3g} MiB; {setting}). Nothing of it was read or kept."
    )


def _content_length(scope: Scope) -> int | None:
    for key, value in scope["headers"]:
        if key == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # uvicorn refuses such a request before it gets here
    return None


def _calls(dependant: Dependant) -> Iterator[Any]:
    yield dependant.call
    for sub in dependant.dependencies:
        yield from _calls(sub)


def needs_user(scope: Scope) -> bool:
    """Whether the route (found by the router, which put it in the scope) signs its sender in: the routers' own
    declaration of who they need decides, not a list of paths."""
    dependant: Dependant | None = getattr(scope.get("route"), "dependant", None)
    return dependant is not None and any(call is get_current_user for call in _calls(dependant))


class BodyLimit:
    """ASGI middleware: see the module's docstring."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        settings: Settings = scope["app"].state.settings
        limit, setting = limit_of(settings, route_path(scope))
        detail = too_large(limit, setting)
        length = _content_length(scope)
        if length is not None and length > limit:
            await _refuse(send, detail, limit)
            return

        read = 0
        checked = answered = withheld = False

        async def limited_receive() -> Message:
            nonlocal read, checked, answered, withheld
            if not checked:
                checked = True
                if needs_user(scope):
                    try:
                        await get_current_user(Request(scope))
                    except HTTPException:
                        # The route's own dependency raises the same again, and the app answers it as always.
                        withheld = True
                        raise
                    except SQLAlchemyError:
                        pass  # the database did not answer: the route's own check meets it too, and answers 503
            message = await receive()
            if message["type"] == "http.request":
                read += len(message.get("body", b""))
                if read > limit:
                    if not answered:
                        answered = True
                        await _refuse(send, detail, limit)
                    raise BodyTooLarge(detail)
            return message

        async def guarded_send(message: Message) -> None:
            if answered:
                return  # the 413 went out instead of what the route would have answered
            if withheld and message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), CLOSE]
            await send(message)

        try:
            await self.app(scope, limited_receive, guarded_send)
        except BodyTooLarge:
            if not answered:
                raise


async def _refuse(send: Send, detail: str, limit: int) -> None:
    body = ErrorBody(detail=detail, limit_bytes=limit).model_dump_json(exclude_none=True).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), CLOSE]
    await send({"type": "http.response.start", "status": status.HTTP_413_CONTENT_TOO_LARGE, "headers": headers})
    await send({"type": "http.response.body", "body": body})
