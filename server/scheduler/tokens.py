"""Slurm JWTs for slurmrestd: each user's from the operator's token command, the service's own from `scontrol`.

The service never holds the JWT key. A user's token comes from a narrowly scoped helper that the operator lets
the service run (scripts/scalelab-slurm-token through sudo), which mints tokens for the members of one group
only; the service's own token, for reading every job's state, is one any user may mint for themselves.
"""

from __future__ import annotations

import re
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from server.scheduler import SchedulerError, SchedulerUnavailable

TOKEN_COMMAND_TIMEOUT_S = 30
_JWT_LINE = re.compile(r"^SLURM_JWT=(\S+)\s*$", re.MULTILINE)

Runner = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]


def run_token_command(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=TOKEN_COMMAND_TIMEOUT_S, check=False)
    except FileNotFoundError:
        raise SchedulerUnavailable(f"cannot mint a Slurm token: {argv[0]} not found") from None
    except PermissionError:
        raise SchedulerUnavailable(f"cannot mint a Slurm token: {argv[0]} is not executable") from None
    except subprocess.TimeoutExpired:
        raise SchedulerUnavailable(
            f"cannot mint a Slurm token: {argv[0]} did not answer within {TOKEN_COMMAND_TIMEOUT_S} s"
        ) from None


@dataclass(frozen=True)
class _Cached:
    token: str
    renew_at: float  # monotonic


class Tokens:
    """Mints and caches JWTs: each is used until 2/3 of its lifespan, so one never expires on its way."""

    def __init__(
        self,
        command: Sequence[str],
        lifespan_s: int,
        run: Runner = run_token_command,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not command:
            raise ValueError("the token command is empty")
        self._command = list(command)
        self._lifespan_s = lifespan_s
        self._run = run
        self._clock = clock
        self._cache: dict[str | None, _Cached] = {}  # None: the service's own
        self._lock = threading.Lock()
        # One mint at a time per user: a sweep's concurrent submissions share the first token.
        self._minting: dict[str | None, threading.Lock] = {}

    def user_token(self, user: str) -> str:
        """`user`'s token, from the operator's command (`COMMAND USER LIFESPAN`)."""
        # The helper checks the name again; this keeps anything odd from reaching it at all.
        if not re.fullmatch(r"[a-z_][a-z0-9_.-]{0,31}", user):
            raise SchedulerError(f"cannot submit as {user[:40]!r}: not a Unix user name")
        return self._token(user, [*self._command, user, str(self._helper_lifespan())])

    def service_token(self) -> str:
        """The service's own token, for reading every job's state: `scontrol token` for itself."""
        return self._token(None, ["scontrol", "token", f"lifespan={self._lifespan_s}"])

    def forget(self, user: str | None) -> None:
        """Drop a cached token (slurmrestd refused it): the next call mints a new one."""
        with self._lock:
            self._cache.pop(user, None)

    def _helper_lifespan(self) -> int:
        # The helper mints tokens of at most an hour.
        return max(60, min(self._lifespan_s, 3600))

    def _cached(self, user: str | None) -> str | None:
        with self._lock:
            cached = self._cache.get(user)
            return cached.token if cached is not None and self._clock() < cached.renew_at else None

    def _token(self, user: str | None, argv: list[str]) -> str:
        if (token := self._cached(user)) is not None:
            return token
        with self._lock:
            minting = self._minting.setdefault(user, threading.Lock())
        with minting:
            if (token := self._cached(user)) is not None:
                return token  # another thread minted it meanwhile
            lifespan = self._lifespan_s if user is None else self._helper_lifespan()
            minted_at = self._clock()
            token = self._mint(user, argv)
            with self._lock:
                self._cache[user] = _Cached(token, minted_at + lifespan * 2 / 3)
            return token

    def _mint(self, user: str | None, argv: list[str]) -> str:
        whose = "the service" if user is None else user
        result = self._run(argv)
        said = (result.stderr.strip() or result.stdout.strip())[:500]
        if result.returncode != 0:
            # scontrol (or the helper's) cannot reach slurmctld: a refusal of nobody in particular.
            if any(marker in said for marker in ("Unable to contact", "Connection refused", "Socket timed out")):
                raise SchedulerUnavailable(f"cannot mint a Slurm token for {whose}: {said}")
            raise SchedulerError(f"cannot mint a Slurm token for {whose}: {said or f'exit {result.returncode}'}")
        match = _JWT_LINE.search(result.stdout)
        if match is None:
            raise SchedulerError(f"cannot mint a Slurm token for {whose}: {argv[0]} printed no SLURM_JWT= line")
        return match[1]
