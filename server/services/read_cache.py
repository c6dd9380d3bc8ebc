"""What reads may keep between requests: pieces of answers (a run's JSON, a row of the runs page, a finished run's
figures) under a key that changes whenever what they were made from changes.

No entry is ever invalidated by hand, so several server processes, each with its own memos, never disagree with
the database: a key either holds every value its piece was made from (a run's row, as read), or, for what is made
from a run's metric records, the run's `attempt` and `log_offset` once `ingest_done` (finished_version). Ingestion
moves `log_offset` in the transaction that stores the records (the exactly-once rule), a resubmission bumps
`attempt` and clears `ingest_done`, and a deleted run is no longer found by the query that would look its pieces
up. A run's accounting may still arrive after it ended, so nothing is keyed on that.
"""

from __future__ import annotations

import gzip
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from pydantic import BaseModel

Value = TypeVar("Value")

# Enough for the pages and comparisons of a centre's recent runs; a piece is a few kB at most.
DEFAULT_ENTRIES = 20_000


class Memo(Generic[Value]):
    """A bounded map from key to value, least recently used out first; safe to share between request threads.

    Bounded by entries, and by `budget` units of `weigh(value)` where given (bytes of answers that may be large).
    """

    def __init__(
        self, entries: int = DEFAULT_ENTRIES, *, weigh: Callable[[Value], int] | None = None, budget: int = 0
    ) -> None:
        self.entries = entries
        self._weigh = weigh
        self._budget = budget
        self._weight = 0
        self._values: OrderedDict[Hashable, Value] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable, make: Callable[[], Value]) -> Value:
        """The value kept under `key`, made (outside the lock: making may read the database) if there is none."""
        found = self.peek(key)
        if found is not None:
            return found
        made = make()
        self.put(key, made)
        return made

    def peek(self, key: Hashable) -> Value | None:
        with self._lock:
            value = self._values.get(key)
            if value is not None:
                self._values.move_to_end(key)
            return value

    def put(self, key: Hashable, value: Value) -> None:
        weight = self._weigh(value) if self._weigh else 0
        if self._weigh and weight > self._budget:
            return  # larger than everything kept together: made again each time
        with self._lock:
            old = self._values.pop(key, None)
            if old is not None and self._weigh:
                self._weight -= self._weigh(old)
            self._values[key] = value
            self._weight += weight
            while len(self._values) > self.entries or (self._weigh and self._weight > self._budget):
                _, dropped = self._values.popitem(last=False)
                if self._weigh:
                    self._weight -= self._weigh(dropped)

    def clear(self) -> None:
        with self._lock:
            self._values.clear()
            self._weight = 0

    def __len__(self) -> int:
        return len(self._values)


FinishedVersion = tuple[str, int, int]


def finished_version(run_id: str, attempt: int, log_offset: int, ingest_done: bool) -> FinishedVersion | None:
    """The key of what a run's metric records make (its figures, its records' answers), or None while they may
    still change: ingestion is not done with the run."""
    return (run_id, attempt, log_offset) if ingest_done else None


def as_json(model: BaseModel) -> bytes:
    """A model's JSON as FastAPI answers with it (by alias, compact), for answers made once and sent as they are."""
    return model.model_dump_json(by_alias=True).encode()


class Answer:
    """A whole answer kept: its JSON, and that JSON gzipped, made on first need and kept with it."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self._gzipped: bytes | None = None

    def gzipped(self) -> bytes:
        if self._gzipped is None:  # two threads may both make it: the same bytes, and either is kept
            self._gzipped = gzip.compress(self.body, compresslevel=6, mtime=0)
        return self._gzipped

    def __len__(self) -> int:
        return len(self.body)
