"""With authentication off, the service answers only to its loopback names.

Off, everyone who reaches the server acts as the admin `local`; the server listens on loopback only, but a web page
elsewhere can still reach it through the browser of whoever runs it: by DNS rebinding (a name of the attacker's,
turned to 127.0.0.1 after the page loaded, so that the page is "same-origin" with the API), or by a plain
cross-site form post. The first is refused by its Host header, which names the attacker's host; the second by its
Origin, which a browser always sends on a cross-site POST, PUT, PATCH or DELETE.

Any port is accepted: a rebinding page must be served on the port it rebinds to (same origin), so the name alone
tells it apart, while an SSH tunnel (`ssh -L 9000:127.0.0.1:8000`) brings a browser to another port of localhost.
"""

from __future__ import annotations

import json
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from server.admin import is_loopback

CHANGES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def host_name(netloc: str) -> str:
    """`127.0.0.1:8000` -> `127.0.0.1`, `[::1]:8000` -> `::1`; "" where it is no host."""
    try:
        return urlsplit(f"//{netloc}").hostname or ""
    except ValueError:  # a malformed port or bracket
        return ""


class LoopbackOnly:
    """ASGI middleware: a request whose Host is not a loopback name answers 421; a change whose Origin is another
    site than the Host asked for answers 403. A request without Origin (curl, the scalelab command) is no
    browser's cross-site request, and passes."""

    def __init__(self, app: ASGIApp, *, enabled: bool) -> None:
        self.app = app
        self.enabled = enabled

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self.enabled or scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        host = headers.get("host", "")
        origin = headers.get("origin")
        if not is_loopback(host_name(host)):
            await _refuse(
                send,
                421,
                f"this server has authentication off and answers only at a loopback address (127.0.0.1, localhost, "
                f"[::1]), not at the host {host!r}",
            )
        elif scope["method"] in CHANGES and origin is not None and _netloc(origin) != host.lower():
            await _refuse(
                send,
                403,
                f"this server has authentication off and takes changes only from its own pages, not {origin!r}",
            )
        else:
            await self.app(scope, receive, send)


def _netloc(origin: str) -> str:
    """The host[:port] of an Origin ("null" where the browser hides it: a sandboxed frame, a file)."""
    try:
        return urlsplit(origin).netloc.lower()
    except ValueError:
        return ""


async def _refuse(send: Send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
