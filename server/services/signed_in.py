"""Who a credential (an API token, a session cookie) stands for, kept a few seconds by each server process.

Every request proves who sends it, and finding that in the database cost more than reading the run it asks for:
a query, a connection of the pool, a hand-off to the thread pool and back (about 0.4 ms of CPU of a 1.7 ms
request). What a credential was found to stand for is kept here for `Settings.signed_in_ttl_s`, so a request
whose sender was seen a moment ago is admitted in the event loop without any of that.

What it costs: a change that takes a user's rights away (a revoked token or user, a sign-out, a changed admin
flag) takes effect at once in the process that made it (`forget_everyone`, called by the functions of
server.services.users that make such changes), and within the TTL in any other (another server process, the
admin command). A change of a Unix user's groups, which counts within unix_accounts.GROUPS_TTL_S, may take
the TTL longer.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import datetime

from server.models import User, utcnow
from server.services.read_cache import Memo

# Senders seen within a TTL: one entry each, a few hundred bytes; far more than a centre's active users.
ENTRIES = 50_000

# Bumped by every change that takes rights away; a sender kept under an older one is looked up again.
_current = 0
_lock = threading.Lock()


def forget_everyone() -> None:
    """Every sender kept by this process is looked up again: called where a user's rights were taken or changed."""
    global _current
    with _lock:
        _current += 1


def generation() -> int:
    """Read before a lookup and given to `SignedIn.keep`: a lookup that a change overtook is not kept."""
    return _current


@dataclass(frozen=True)
class Sender:
    """What a credential was found to stand for: the user, and a browser session's CSRF token and end.

    The same User object serves every request of the sender while it is kept: detached from the session that
    loaded it, with every column loaded (`SignedIn.keep`), read by any thread. Making a fresh one per request
    cost a sixth of the sign-in it saves. A route reads it and never adds it to a session of its own (as before:
    the sign-in's session was closed before the route ran); one that changes a user loads that user itself.
    """

    user: User
    csrf_token: str | None
    session_ends: datetime | None
    kept_until: float
    generation: int


class SignedIn:
    """The senders one server process has seen, by credential: ("token", digest) or ("cookie", digest)."""

    def __init__(self, ttl_s: float) -> None:
        self.ttl_s = ttl_s
        self._senders: Memo[Sender] = Memo(ENTRIES)

    def recall(self, credential: tuple[str, str]) -> Sender | None:
        if self.ttl_s <= 0:
            return None
        sender = self._senders.peek(credential)
        if sender is None or sender.generation != _current or sender.kept_until < time.monotonic():
            return None
        if sender.session_ends is not None and sender.session_ends <= utcnow():
            return None
        return sender

    def keep(
        self,
        credential: tuple[str, str],
        user: User,
        seen_at_generation: int,
        csrf_token: str | None = None,
        session_ends: datetime | None = None,
    ) -> None:
        if self.ttl_s <= 0 or seen_at_generation != _current:
            return
        for name in User.model_fields:
            getattr(user, name)  # loaded now, while its session is open: a commit may have expired it
        kept_until = time.monotonic() + self.ttl_s
        self._senders.put(credential, Sender(user, csrf_token, session_ends, kept_until, seen_at_generation))
