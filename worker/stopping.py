"""Slurm's warning before the time limit (--signal=USR1@...) or a SIGTERM, caught from the worker's first instant.

The signal can come while torch is still importing or the data loading: without a handler by then, SIGUSR1's
default action would kill the process and the run would fail instead of saving and coming back.
"""

from __future__ import annotations

import signal
from types import FrameType


class StopSignal:
    """Remembers that a stop was asked for; training acts on it at the end of an epoch, after a checkpoint."""

    def __init__(self) -> None:
        self.signal: int | None = None
        for signum in (signal.SIGUSR1, signal.SIGTERM):
            signal.signal(signum, self._handle)

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        self.signal = signum
