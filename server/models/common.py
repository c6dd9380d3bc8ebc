"""What the models of every entity share: how ids and timestamps are made, and which names may be shown."""

from __future__ import annotations

import re
import secrets
from datetime import UTC, datetime

from sqlalchemy import BigInteger, Integer

# Byte counts and offsets pass 2**31 (a GPU's memory, a long output): 64 bits on PostgreSQL, whose INTEGER has 32.
# SQLite's INTEGER has 64 already, and a primary key must stay INTEGER there to be the rowid, so SQLite keeps it.
BIG_INTEGER = BigInteger().with_variant(Integer(), "sqlite")


def new_id() -> str:
    """Server-made ids: short enough to type, random enough not to guess or collide."""
    return secrets.token_hex(5)


def utcnow() -> datetime:
    return datetime.now(UTC)


# Characters that would let a name hide or disguise itself on the dashboard: control characters, and the
# bidirectional overrides that reorder what follows them.
_UNSHOWABLE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def showable(name: str) -> str:
    if _UNSHOWABLE.search(name):
        raise ValueError("a name may not hold control characters or bidirectional overrides")
    return name
