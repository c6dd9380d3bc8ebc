"""Accounts: users, their API tokens and their browser sessions, with only hashes of the secrets stored."""

from __future__ import annotations

import functools
import hashlib
import hmac
import logging
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import aliased
from sqlmodel import Session, col, delete, select

from server.config import Settings
from server.errors import NotFound
from server.models import LOCAL_USER, USER_NAME, ApiToken, User, WebSession, utcnow
from server.services import signed_in, unix_accounts
from server.services.unix_accounts import MAX_PASSWORD_BYTES, Verdict

log = logging.getLogger(__name__)

TOKEN_PREFIX = "sl_"  # noqa: S105 (marks a scalelab token in logs and secret scanners; not a secret)
MIN_PASSWORD_LENGTH = 10
# scrypt's cost: about 50 ms and 16 MiB per check here; a web login is rare, a guess should be dear.
_SCRYPT_N, _SCRYPT_R, _SCRYPT_P = 2**14, 8, 1
_ACCOUNT = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
# A token's last use is written at most this often: a write per request would contend with ingestion for SQLite.
_LAST_USED_EVERY = timedelta(minutes=5)


class UserError(ValueError):
    """A request about users that cannot be done; the message says why."""


@dataclass(frozen=True)
class Quotas:
    max_concurrent_runs: int | None = None
    max_gpus_in_use: int | None = None
    max_runs_per_day: int | None = None


def digest(secret: str) -> str:
    """Tokens and session cookies are random and long: a plain SHA-256 of them cannot be reversed by guessing."""
    return hashlib.sha256(secret.encode()).hexdigest()


def _new_secret() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_password(password: str) -> str:
    if len(password) < MIN_PASSWORD_LENGTH:
        raise UserError(f"a password needs at least {MIN_PASSWORD_LENGTH} characters")
    salt = secrets.token_bytes(16)
    key = hashlib.scrypt(password.encode(), salt=salt, n=_SCRYPT_N, r=_SCRYPT_R, p=_SCRYPT_P)
    return f"scrypt${_SCRYPT_N}${_SCRYPT_R}${_SCRYPT_P}${salt.hex()}${key.hex()}"


def password_matches(password: str, stored: str | None) -> bool:
    if not stored:
        return False
    _, n, r, p, salt, key = stored.split("$")
    candidate = hashlib.scrypt(password.encode(), salt=bytes.fromhex(salt), n=int(n), r=int(r), p=int(p))
    return hmac.compare_digest(candidate, bytes.fromhex(key))


def _check(name: str, slurm_account: str | None, quotas: Quotas) -> None:
    if not re.fullmatch(USER_NAME, name):  # (match would let a name end in a newline, before `$`)
        raise UserError(f"user name {name!r}: a lowercase letter or _, then lowercase letters, digits, _ . - (≤ 32)")
    if slurm_account is not None and not _ACCOUNT.match(slurm_account):
        raise UserError(f"Slurm account {slurm_account!r}: letters, digits, _ . - only")
    for field, value in vars(quotas).items():
        if value is not None and value < 0:
            raise UserError(f"{field} cannot be negative")


def add_user(
    session: Session,
    name: str,
    *,
    is_admin: bool = False,
    password: str | None = None,
    slurm_account: str | None = None,
    quotas: Quotas = Quotas(),
) -> str:
    """Create the user with a first API token, which is returned: it is shown once and never stored."""
    _check(name, slurm_account, quotas)
    if session.get(User, name) is not None:
        raise UserError(f"user {name!r} exists already (a revoked name stays taken)")
    user = User(name=name, is_admin=is_admin, slurm_account=slurm_account, **vars(quotas))
    if password is not None:
        user.password_hash = hash_password(password)
    session.add(user)
    session.flush()  # the token refers to the user, and no relationship tells the session to insert the user first
    _, secret = _stage_token(session, name)
    session.commit()
    return secret


def change_user(
    session: Session,
    name: str,
    *,
    is_admin: bool | None = None,
    password: str | None = None,
    slurm_account: str | None = None,
    quotas: Quotas | None = None,
) -> User:
    """Change what is given; a quota of None in `quotas` removes that quota."""
    user = active_user(session, name)
    _check(name, slurm_account, quotas or Quotas())
    if is_admin is not None:
        user.is_admin = is_admin
    if password is not None:
        user.password_hash = hash_password(password)
        # Whoever knew the old password may have signed in or made tokens with it: all of that ends with it.
        _end_credentials(session, name)
    if slurm_account is not None:
        user.slurm_account = slurm_account or None
    if quotas is not None:
        for field, value in vars(quotas).items():
            setattr(user, field, value)
    session.add(user)
    session.commit()
    signed_in.forget_everyone()
    session.refresh(user)
    return user


def active_user(session: Session, name: str) -> User:
    user = session.get(User, name)
    if user is None:
        raise UserError(f"no user {name!r}")
    if user.revoked_at is not None:
        raise UserError(f"user {name!r} was revoked")
    return user


def list_users(session: Session) -> list[User]:
    return list(session.exec(select(User).order_by(col(User.name))).all())


def revoke_user(session: Session, name: str) -> None:
    """The user can no longer sign in: every token and session ends now. Their runs stay, and keep their owner."""
    user = active_user(session, name)
    user.revoked_at = utcnow()
    _end_credentials(session, name)
    session.add(user)
    session.commit()
    signed_in.forget_everyone()


def _end_credentials(session: Session, name: str) -> None:
    """Revoke every token of the user and end every browser session, in the session's transaction: the caller
    commits, then calls signed_in.forget_everyone (other processes see it within the memo's TTL)."""
    now = utcnow()
    for token in session.exec(select(ApiToken).where(ApiToken.user_name == name, col(ApiToken.revoked_at).is_(None))):
        token.revoked_at = now
        session.add(token)
    session.exec(delete(WebSession).where(col(WebSession.user_name) == name))


def issue_token(session: Session, name: str, lifetime: timedelta | None = None) -> str:
    """Another API token for the user (tokens of scripts and notebooks can then be revoked apart), ending after
    `lifetime` (None: when revoked)."""
    active_user(session, name)
    _, secret = _stage_token(session, name, utcnow() + lifetime if lifetime is not None else None)
    session.commit()
    return secret


def _stage_token(
    session: Session, name: str, expires_at: datetime | None = None, parent_id: str | None = None
) -> tuple[ApiToken, str]:
    """A new token of the user, added to the session: its row, and the secret (only its hash is stored)."""
    secret = _new_secret()
    token = ApiToken(user_name=name, token_hash=digest(secret), expires_at=expires_at, parent_id=parent_id)
    session.add(token)
    return token, secret


UNKNOWN_TOKEN = "this API token is unknown or revoked: ask an admin for a new one"  # noqa: S105 (a message)


@dataclass(frozen=True)
class TokenRefused:
    """Why a token signs no one in: unknown, revoked (itself, its maker or its user), or expired."""

    message: str


def token_sender(session: Session, token_hash: str) -> tuple[User, ApiToken] | TokenRefused:
    """The active user the token of this digest belongs to, and the token; or why it is refused.

    A token made with another token is refused once its maker is revoked, as well as revoked with it
    (`revoke_token`): the maker's revocation may have raced the making of this one."""
    maker = aliased(ApiToken)
    found = session.exec(
        select(ApiToken, User, maker)
        .join(User, col(User.name) == ApiToken.user_name)
        .join(maker, col(maker.id) == ApiToken.parent_id, isouter=True)
        .where(ApiToken.token_hash == token_hash, col(User.revoked_at).is_(None))
    ).first()
    if found is None:
        return TokenRefused(UNKNOWN_TOKEN)
    api_token, user, made_by = found
    if api_token.revoked_at is not None or (made_by is not None and made_by.revoked_at is not None):
        return TokenRefused(UNKNOWN_TOKEN)
    now = utcnow()
    if api_token.expires_at is not None and api_token.expires_at <= now:
        return TokenRefused(
            f"this API token expired at {api_token.expires_at:%Y-%m-%d %H:%M} UTC: "
            "make a new one with `scalelab login`, or ask an admin"
        )
    if api_token.last_used_at is None or now - api_token.last_used_at > _LAST_USED_EVERY:
        api_token.last_used_at = now
        session.add(api_token)
        session.commit()
    return user, api_token


def user_of_token(session: Session, token_hash: str) -> User | None:
    """The active user the token of this digest belongs to; None for a token unknown, revoked, expired, or of a
    revoked user."""
    found = token_sender(session, token_hash)
    return None if isinstance(found, TokenRefused) else found[0]


def sign_in(session: Session, user: User, lifetime: timedelta) -> tuple[str, WebSession]:
    """A browser session for the user: the cookie value to set, and the session with its CSRF token."""
    cookie = secrets.token_urlsafe(32)
    web_session = WebSession(
        id_hash=digest(cookie),
        user_name=user.name,
        csrf_token=secrets.token_urlsafe(24),
        expires_at=utcnow() + lifetime,
    )
    session.add(web_session)
    session.commit()
    return cookie, web_session


@dataclass(frozen=True)
class Refusal:
    """A sign-in refused: what the person is told, and the reason the log keeps (which may say more)."""

    message: str
    reason: str


WRONG_PASSWORD = "Wrong user name or password."  # noqa: S105 (a message, not a password)


def possible_name(name: str) -> bool:
    """A name some user could have (match would let a name end in a newline, before `$`)."""
    return re.fullmatch(USER_NAME, name) is not None


def _plausible_password(password: str) -> bool:
    """No one's password holds a NUL or runs past MAX_PASSWORD_BYTES (nor is it not UTF-8)."""
    try:
        encoded = password.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return b"\0" not in encoded and len(encoded) <= MAX_PASSWORD_BYTES


def check_sign_in(session: Session, name: str, password: str, settings: Settings) -> User | Refusal:
    """The user this name and password sign in, or why not. Blocking (PAM may take seconds): run it off the
    event loop.

    With `signin=local` only scalelab's own password hashes are checked. With `signin=pam` the name and password go
    to PAM, never to the hashes, except for a name that is scalelab's own account (a row with `unix` false, which
    an admin made): such an account keeps signing in with its own password, and PAM is never asked about its
    name, so that a Unix user of the same name cannot take over its experiments. A Unix user's first sign-in
    makes their row (`unix` true); each sign-in brings `is_admin` in line with `admin_group` where that is set.

    A name that is no possible user and a password no one can have are refused before PAM. A wrong password, an
    unknown user and a locked account get the same answer, so that names cannot be probed; only someone whose
    password was right learns that their account has expired or is not in `allowed_group`. The log says which."""
    refusal = _check_sign_in(session, name, password, settings)
    if isinstance(refusal, Refusal):
        log.info("sign-in of %r refused: %s", name[:64], refusal.reason)
    return refusal


def _check_sign_in(session: Session, name: str, password: str, settings: Settings) -> User | Refusal:
    if not possible_name(name) or not _plausible_password(password):
        return Refusal(WRONG_PASSWORD, "a name or password that no account can have, refused before checking")
    row = session.get(User, name)
    if settings.signin == "local" or (row is not None and not row.unix):
        user = user_of_password(session, name, password)
        return user or Refusal(WRONG_PASSWORD, "no such scalelab account, or a wrong password")
    answer = unix_accounts.check_password(settings.pam_service, name, password)
    if answer.verdict is Verdict.wrong:
        return Refusal(WRONG_PASSWORD, f"PAM: {answer.detail}")
    if answer.verdict is Verdict.error:
        return Refusal(
            "The login node's accounts cannot be checked now: ask the admin (the server's log says why).",
            f"PAM service {settings.pam_service!r} failed: {answer.detail}",
        )
    if answer.verdict is Verdict.expired:
        return Refusal(
            "This account or its password has expired: renew it on the login node, or ask its admin.",
            f"PAM: {answer.detail}",
        )
    # The password was right: from here the person may learn why they are refused.
    why_not = unix_refusal(name, settings)
    if why_not is not None:
        return Refusal("This account may not use scalelab here: ask the admin to add you.", why_not)
    if row is not None and row.revoked_at is not None:
        return Refusal("This account was revoked in scalelab: ask an admin.", "the scalelab user is revoked")
    user = row or User(name=name, unix=True)
    follow_admin_group(user, settings)
    session.add(user)
    session.commit()
    session.refresh(user)
    return user


def unix_refusal(name: str, settings: Settings) -> str | None:
    """Why a Unix user may not use scalelab now (None: they may): no longer a Unix user, or not in
    `allowed_group`. From the kept group lists: a change counts within unix_accounts.GROUPS_TTL_S."""
    groups = unix_accounts.groups_of(name)
    if groups is None:
        return f"{name!r} is not a Unix user of this machine"
    if settings.allowed_group is not None and settings.allowed_group not in groups:
        return f"{name!r} is not in the Unix group {settings.allowed_group!r} (SCALELAB_ALLOWED_GROUP)"
    return None


def follow_admin_group(user: User, settings: Settings) -> bool:
    """Make a Unix user an admin exactly while they are in `admin_group` (where it is set); whether it changed."""
    if not user.unix or settings.admin_group is None:
        return False
    is_admin = settings.admin_group in (unix_accounts.groups_of(user.name) or ())
    changed = user.is_admin != is_admin
    user.is_admin = is_admin
    return changed


def still_allowed(session: Session, user: User, settings: Settings) -> bool:
    """On each request by a token or a session: a Unix user must still be one, and in `allowed_group`; their admin
    role follows `admin_group`. scalelab's own accounts pass as they are."""
    if not user.unix:
        return True
    why_not = unix_refusal(user.name, settings)
    if why_not is not None:
        log.info("request of %r refused: %s", user.name, why_not)
        return False
    if follow_admin_group(user, settings):
        session.add(user)
        session.commit()
        signed_in.forget_everyone()
        session.refresh(user)
    return True


def user_of_password(session: Session, name: str, password: str) -> User | None:
    """scalelab's own account of this name, if the password is its own (never a Unix user's: see check_sign_in)."""
    user = session.get(User, name) if re.fullmatch(USER_NAME, name) else None
    if user is None or user.revoked_at is not None or user.unix:
        password_matches(password, _unmatchable_hash())  # as long as a wrong password: names cannot be probed
        return None
    return user if password_matches(password, user.password_hash) else None


@functools.cache
def _unmatchable_hash() -> str:
    return hash_password(secrets.token_urlsafe(16))


def session_of_cookie(session: Session, cookie_hash: str) -> tuple[User, WebSession] | None:
    """The active user and browser session of the cookie of this digest; None for one unknown or ended."""
    found = session.exec(
        select(User, WebSession)
        .join(WebSession, col(WebSession.user_name) == User.name)
        .where(WebSession.id_hash == cookie_hash, col(User.revoked_at).is_(None))
    ).first()
    if found is None or found[1].expires_at <= utcnow():
        return None
    return found[0], found[1]


def sign_out(session: Session, cookie: str) -> None:
    session.exec(delete(WebSession).where(col(WebSession.id_hash) == digest(cookie)))
    session.commit()
    signed_in.forget_everyone()


def local_user(session: Session) -> User:
    """The user every request acts as where authentication is off: an admin, made on first use."""
    user = session.get(User, LOCAL_USER)
    if user is not None:
        return user
    session.add(User(name=LOCAL_USER, is_admin=True))
    try:
        session.commit()
    except IntegrityError:
        # The first requests of a new database all make it; one wins, and the others take the row it made.
        session.rollback()
    return session.exec(select(User).where(User.name == LOCAL_USER)).one()


def first_admin(session: Session) -> str | None:
    """On a server with no users yet, the admin `admin` and its one-time token; None where users exist."""
    if session.exec(select(User.name).where(User.name != LOCAL_USER)).first() is not None:
        return None
    return add_user(session, "admin", is_admin=True)


def new_token(
    session: Session, user: User, lifetime: timedelta | None = None, maker_hash: str | None = None
) -> tuple[ApiToken, str]:
    """A user's own new API token (for a script or the CLI): the row, and the secret to show this once.

    It ends after `lifetime` (None: when revoked). Made with another token (of this digest), it records that
    token as its maker: it ends no later than the maker, and is revoked with it (`revoke_token`)."""
    expires_at = utcnow() + lifetime if lifetime is not None else None
    maker = session.exec(select(ApiToken).where(ApiToken.token_hash == maker_hash)).first() if maker_hash else None
    if maker is not None and maker.expires_at is not None:
        expires_at = maker.expires_at if expires_at is None else min(expires_at, maker.expires_at)
    token, secret = _stage_token(session, user.name, expires_at, maker.id if maker is not None else None)
    session.commit()
    session.refresh(token)
    return token, secret


def tokens_of(session: Session, name: str) -> list[ApiToken]:
    return list(session.exec(select(ApiToken).where(ApiToken.user_name == name).order_by(col(ApiToken.created_at))))


def revoke_token(session: Session, user: User, token_id: str) -> ApiToken:
    """Revoke one of the user's tokens (an admin may revoke anyone's); NotFound for another's, as for none."""
    token = session.get(ApiToken, token_id)
    if token is None or (token.user_name != user.name and not user.is_admin):
        raise NotFound(f"no API token {token_id!r} of yours")
    # With it, every token made with it, and those made with them.
    now = utcnow()
    pending = [token]
    while pending:
        ending = pending.pop()
        if ending.revoked_at is None:
            ending.revoked_at = now
            session.add(ending)
        pending.extend(
            session.exec(
                select(ApiToken).where(ApiToken.parent_id == ending.id, col(ApiToken.revoked_at).is_(None))
            ).all()
        )
    session.commit()
    signed_in.forget_everyone()
    session.refresh(token)
    return token
