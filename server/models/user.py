"""Users and what proves who they are: API tokens and signed-in browser sessions.

The tokens and sessions have no public schema: they hold secrets' hashes and are never returned.
"""

from __future__ import annotations

from datetime import datetime

from sqlmodel import Field as SQLField
from sqlmodel import SQLModel

from server.models.common import new_id, utcnow

# A user name: what Slurm and Unix accept as a login, so that it can name an account too.
USER_NAME = r"^[a-z_][a-z0-9_.-]{0,31}$"
# The user requests act as where authentication is turned off (a single-user server on loopback).
LOCAL_USER = "local"


class UserBase(SQLModel):
    name: str = SQLField(primary_key=True, max_length=32)
    is_admin: bool = False
    slurm_account: str | None = SQLField(default=None, max_length=64, description="sbatch --account of the user's runs")
    max_concurrent_runs: int | None = SQLField(default=None, ge=0, description="runs not yet ended, at most")
    max_gpus_in_use: int | None = SQLField(default=None, ge=0, description="GPUs of runs not yet ended, at most")
    max_runs_per_day: int | None = SQLField(default=None, ge=0, description="runs created in any 24 hours, at most")
    unix: bool = SQLField(
        default=False, description="a Unix user of the login node, who signs in through PAM (else scalelab's own)"
    )


class User(UserBase, table=True):
    created_at: datetime = SQLField(default_factory=utcnow)
    revoked_at: datetime | None = None
    password_hash: str | None = None


class UserPublic(UserBase):
    created_at: datetime
    revoked_at: datetime | None


class ApiToken(SQLModel, table=True):
    """A bearer token: only its SHA-256 is kept; the token itself is shown once, when it is made."""

    id: str = SQLField(default_factory=new_id, primary_key=True, max_length=16)
    user_name: str = SQLField(foreign_key="user.name", index=True)
    token_hash: str = SQLField(unique=True, max_length=64)
    created_at: datetime = SQLField(default_factory=utcnow)
    last_used_at: datetime | None = None
    revoked_at: datetime | None = None
    expires_at: datetime | None = None
    # The token whose request made this one: it never outlives its maker and is revoked with it. No foreign key:
    # token rows are never deleted, and SQLite would have to copy the table to add one.
    parent_id: str | None = SQLField(default=None, index=True, max_length=16)


class ApiTokenPublic(SQLModel):
    """A token as its owner sees it: when it was made and last used, never the secret."""

    id: str
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None
    expires_at: datetime | None = SQLField(default=None, description="refused from then on; none: until revoked")
    parent_id: str | None = SQLField(
        default=None, description="the token that made this one: it ends no later than it, and is revoked with it"
    )


class ApiTokenRequest(SQLModel):
    """What a new token should be: all optional."""

    lifetime_days: float | None = SQLField(
        default=None,
        gt=0,
        le=3650,
        description="the token is refused this many days from now (none: until revoked); a token made with another "
        "token never outlives it",
    )


class ApiTokensPublic(SQLModel):
    data: list[ApiTokenPublic]
    count: int


class ApiTokenCreated(ApiTokenPublic):
    token: str = SQLField(description="the token itself: shown this once, never stored; send it as a bearer token")


class WebSession(SQLModel, table=True):
    """A signed-in browser: the cookie's SHA-256, and the CSRF token its pages send back."""

    id_hash: str = SQLField(primary_key=True, max_length=64)
    user_name: str = SQLField(foreign_key="user.name", index=True)
    csrf_token: str = SQLField(max_length=64)
    created_at: datetime = SQLField(default_factory=utcnow)
    expires_at: datetime


class SignInFailures(SQLModel, table=True):
    """Failed password sign-ins within a window, by account name or by client address: what throttling counts.

    Kept in the database so that every server process counts the same failures (and a restart forgets none).
    """

    key: str = SQLField(primary_key=True, max_length=80, description="'name:<user name>' or 'address:<client address>'")
    failures: int = 0
    window_ends: datetime
