"""Security headers on every answer: a Content-Security-Policy, no framing, no MIME sniffing, no referrer abroad.

The policy allows scripts from the server itself only, plus the inline <script type="module"> that mounts a page's
modules (templates/_mount.html), which carries this request's nonce; an injected <script> has none, so it never
runs, whatever a template might one day let through. Styles: plotly.js adds <style> elements of its own rules when it
draws (measured in chromium: without 'unsafe-inline' in style-src each chart page reports "style-src-elem inline"
refusals); their hashes change with plotly's version, and an inline style cannot run code, so inline styles are
allowed. No eval (plotly's SVG charts need none: measured too), no plugin, no <base>, forms posted here only.
"""

from __future__ import annotations

import secrets

from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

POLICY = (
    "default-src 'self'; script-src 'self' 'nonce-{nonce}'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data: blob:; font-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'"
)
HEADERS = {
    "X-Content-Type-Options": "nosniff",
    # Links out of scalelab (a README's, a profile's) carry no run or experiment id in their Referer.
    "Referrer-Policy": "same-origin",
    # frame-ancestors 'none' for browsers that predate it.
    "X-Frame-Options": "DENY",
}


def csp_nonce(request: Request) -> str:
    """This request's nonce, for the templates' inline scripts ("" outside the middleware: a test's bare app)."""
    nonce: str = getattr(request.state, "csp_nonce", "")
    return nonce


class SecurityHeaders:
    """ASGI middleware: the headers above on every response, and the policy with a nonce of its own per request. A
    response that brings its own policy (the saved report: no script at all) keeps it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        nonce = secrets.token_urlsafe(18)
        scope.setdefault("state", {})["csp_nonce"] = nonce

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in HEADERS.items():
                    headers.setdefault(name, value)
                headers.setdefault("Content-Security-Policy", POLICY.format(nonce=nonce))
            await send(message)

        await self.app(scope, receive, send_with_headers)
