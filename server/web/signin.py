"""Signing in and out of the pages: a user name and password, or an API token, for an HttpOnly session cookie."""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from fastapi import APIRouter, Request, status
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from server.api.deps import SESSION_COOKIE, SessionDep, SettingsDep, client_address
from server.config import Settings
from server.models import User
from server.services import signin_throttle, users
from server.web.templating import render

router = APIRouter(include_in_schema=False)

# A sign-in form is small; anything bigger is not one.
MAX_FORM_BYTES = 8192


def login_url(request: Request) -> str:
    """The sign-in page, with the page asked for to come back to."""
    back = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return f"{request.scope.get('root_path', '')}/login?{urlencode({'next': back})}"


def _local_target(next_page: str) -> str:
    """Only a path of this site: never another site's address (an open redirect would help phishing)."""
    parts = urlsplit(next_page)
    if parts.scheme or parts.netloc or not next_page.startswith("/") or next_page.startswith("//"):
        return "/"
    return next_page


def _login_page(
    request: Request,
    next_page: str,
    error: str | None = None,
    name: str = "",
    later: signin_throttle.Throttled | signin_throttle.Busy | None = None,
) -> HTMLResponse:
    """The form, with what went wrong; a sign-in refused for now (throttled, or busy) says when to come back."""
    code = status.HTTP_401_UNAUTHORIZED if error else status.HTTP_200_OK
    context = {
        "title": "Sign in",
        "next": _local_target(next_page),
        "error": error,
        "name": name,
        "cluster_accounts": request.app.state.settings.signin == "pam",
    }
    if later is None:
        return render(request, "login.html", context, code)
    busy = isinstance(later, signin_throttle.Busy)
    page = render(request, "login.html", context, 503 if busy else status.HTTP_429_TOO_MANY_REQUESTS)
    page.headers["Retry-After"] = str(later.retry_after_s)
    return page


@router.get("/login", response_class=HTMLResponse)
def login_form(request: Request, settings: SettingsDep, next: str = "/") -> Response:
    if not settings.auth:
        return RedirectResponse(_local_target(next), status_code=status.HTTP_303_SEE_OTHER)
    return _login_page(request, next)


@router.post("/login", response_class=HTMLResponse)
async def login(request: Request, session: SessionDep, settings: SettingsDep) -> Response:
    body = await request.body()
    form = _form(body) if len(body) <= MAX_FORM_BYTES else {}
    next_page = form.get("next", "/")
    if not _same_origin(request):
        return _login_page(request, next_page, "This sign-in did not come from scalelab's own page: sign in here.")
    name, password, token = form.get("name", ""), form.get("password", ""), form.get("token", "")
    found: User | users.Refusal | signin_throttle.Throttled | signin_throttle.Busy | None = None
    if token:
        sender = users.token_sender(session, users.digest(token))
        if isinstance(sender, users.TokenRefused):
            expired = sender.message != users.UNKNOWN_TOKEN
            what = f"This{sender.message.removeprefix('this')}." if expired else "This token is unknown or revoked."
            found = users.Refusal(what, sender.message)
        elif not users.still_allowed(session, sender[0], settings):
            found = users.Refusal("This account may no longer use scalelab here.", "not allowed")
        else:
            found = sender[0]
    elif name and password:
        # PAM may wait seconds (after a wrong password, or on a remote directory): never on the event loop.
        checks = request.app.state.password_checks
        found = await signin_throttle.sign_in_with_password(
            session, checks, name, password, client_address(request), settings
        )
    if isinstance(found, signin_throttle.Throttled | signin_throttle.Busy):
        return _login_page(request, next_page, found.message, name, found)
    if not isinstance(found, User):
        what = found.message if isinstance(found, users.Refusal) else users.WRONG_PASSWORD
        return _login_page(request, next_page, f"{what} Ask an admin if you have no account.", name)
    user = found
    response = RedirectResponse(_local_target(next_page), status_code=status.HTTP_303_SEE_OTHER)
    _set_cookie(response, *_sign_in(session, user, settings), settings)
    return response


@router.post("/logout")
async def logout(request: Request, session: SessionDep) -> Response:
    cookie = request.cookies.get(SESSION_COOKIE)
    form = _form(await request.body())
    found = users.session_of_cookie(session, users.digest(cookie)) if cookie else None
    # Signing out needs the page's CSRF token too: another site must not be able to sign anyone out.
    if found is not None and form.get("csrf") == found[1].csrf_token:
        users.sign_out(session, cookie or "")
    response = RedirectResponse(f"{request.scope.get('root_path', '')}/login", status_code=status.HTTP_303_SEE_OTHER)
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response


def _sign_in(session: SessionDep, user: User, settings: Settings) -> tuple[str, timedelta]:
    lifetime = timedelta(hours=settings.session_hours)
    cookie, _ = users.sign_in(session, user, lifetime)
    return cookie, lifetime


def _set_cookie(response: Response, cookie: str, lifetime: timedelta, settings: Settings) -> None:
    response.set_cookie(
        SESSION_COOKIE,
        cookie,
        max_age=int(lifetime.total_seconds()),
        httponly=True,
        samesite="strict",
        secure=settings.secure_cookies,
        path="/",
    )


def _form(body: bytes) -> dict[str, str]:
    try:
        fields: dict[str, Any] = parse_qs(body.decode("utf-8", errors="replace"), max_num_fields=8)
    except ValueError:  # more fields than a sign-in form has
        return {}
    return {key: values[0] for key, values in fields.items()}


def _same_origin(request: Request) -> bool:
    """A browser says where a form was posted from; a sign-in posted from another site is refused (login CSRF)."""
    origin = request.headers.get("Origin") or request.headers.get("Referer")
    if origin is None:
        return True  # not a browser: scripts send neither, and no browser can be made to send a cookie-less request
    return urlsplit(origin).netloc == request.headers.get("Host", "")
