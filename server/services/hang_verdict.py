"""Which rank hung, and where, as pure rules: each rank's stack dump (Python's faulthandler format) parsed, and the
ranks grouped by where their main thread is, naming the rank(s) not where the others are.

A dump is a job's file, a stranger's text: it is parsed line by line with bounded patterns, at most MAX_THREADS
threads and MAX_FRAMES frames each, and the names quoted from it are cut short. faulthandler shows Python frames
only: a rank sleeping in time.sleep shows the line of its own code that called it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from server.models.run import FAILURE_DETAIL_CHARS

MAX_THREADS = 64
MAX_FRAMES = 200
_NAME_CHARS = 80
_HEADER = re.compile(r"^(Current thread|Thread) (0x[0-9a-fA-F]{1,16})\b.*\(most recent call first\):\s*$")
_FRAME = re.compile(r'^\s+File "(.{1,1000})", line (\d{1,9}|\?\?\?) in (.{1,200})$')
# Where a frame is in a library (the standard library, an installed package), not the program's or the worker's code.
_LIBRARY = re.compile(r"/lib/python3[^/]*/(?:site-packages/|dist-packages/)?|/site-packages/|/dist-packages/|^<frozen ")
# A library frame where a rank waits for its peers.
_COLLECTIVE = re.compile(r"torch/distributed/")


@dataclass(frozen=True)
class Frame:
    file: str
    line: int | None
    function: str

    @property
    def in_library(self) -> bool:
        return bool(_LIBRARY.search(self.file))

    def where(self) -> str:
        """The frame as a reader knows it: a library's file from its package down, the program's by its name."""
        library = _LIBRARY.split(self.file)
        shown = library[-1] if self.in_library and library[-1] else self.file.rsplit("/", 1)[-1]
        line = "?" if self.line is None else str(self.line)
        return f"{shown[-_NAME_CHARS:]}:{line}"


@dataclass(frozen=True)
class Thread:
    ident: str
    current: bool
    frames: tuple[Frame, ...]  # innermost first, as faulthandler writes them


def last_dump(text: str) -> tuple[int, list[Thread]]:
    """Where the last dump of an appended file starts (a character offset) and its threads: dumps follow each other,
    so the last is the longest run of threads at the end with no thread twice."""
    threads: list[tuple[int, Thread]] = []
    at = 0
    current: tuple[int, str, bool, list[Frame]] | None = None
    for line in text.splitlines(keepends=True):
        header = _HEADER.match(line.rstrip("\n"))
        if header:
            if current is not None:
                threads.append((current[0], Thread(current[1], current[2], tuple(current[3]))))
            current = (at, header.group(2).lower(), header.group(1) == "Current thread", [])
        elif current is not None and len(current[3]) < MAX_FRAMES and (frame := _FRAME.match(line.rstrip("\n"))):
            number = frame.group(2)
            current[3].append(Frame(frame.group(1), int(number) if number.isdigit() else None, frame.group(3)))
        at += len(line)
    if current is not None:
        threads.append((current[0], Thread(current[1], current[2], tuple(current[3]))))
    seen: set[str] = set()
    start = len(text)
    last: list[Thread] = []
    for offset, thread in reversed(threads):
        if thread.ident in seen or len(last) >= MAX_THREADS:
            break
        seen.add(thread.ident)
        last.insert(0, thread)
        start = offset
    return start, last


def main_thread(threads: Sequence[Thread]) -> Thread | None:
    """The thread that runs the program: the one not started by threading (its outermost frame is elsewhere), else
    the one the signal interrupted, else the first."""
    for thread in threads:
        if thread.frames and not thread.frames[-1].file.endswith("threading.py"):
            return thread
    return next((thread for thread in threads if thread.current), threads[0] if threads else None)


@dataclass(frozen=True)
class Place:
    """Where a rank's main thread is: its innermost frame in the program's (or worker's) own code, and its innermost
    frame of all (in a library, where the two differ)."""

    own: Frame | None
    innermost: Frame | None

    @property
    def in_collective(self) -> bool:
        return self.innermost is not None and bool(_COLLECTIVE.search(self.innermost.file))

    def key(self) -> tuple[str, int | None, str] | None:
        frame = self.own or self.innermost
        return None if frame is None else (frame.file, frame.line, frame.function)

    def describe(self) -> str:
        own, inner = self.own, self.innermost
        if inner is None:
            return "with no Python frame"
        if own is None or own == inner:
            frame = own or inner
            return f"at {frame.where()} in {frame.function[:_NAME_CHARS]}"
        return (
            f"in {inner.function[:_NAME_CHARS]} ({inner.where()}), from {own.where()} in {own.function[:_NAME_CHARS]}"
        )


def place_of(thread: Thread) -> Place:
    own = next((frame for frame in thread.frames if not frame.in_library), None)
    return Place(own, thread.frames[0] if thread.frames else None)


def _ranks(ranks: Sequence[int]) -> str:
    shown = ", ".join(map(str, ranks[:16])) + (f" and {len(ranks) - 16} more" if len(ranks) > 16 else "")
    return f"rank {shown}" if len(ranks) == 1 else f"ranks {shown}"


def verdict(places: Mapping[int, Place | None]) -> str:
    """Which rank is not where the others are, in one paragraph: every rank's place grouped; `None`: a rank that
    wrote no stacks."""
    groups: dict[tuple[str, int | None, str] | None, list[int]] = {}
    found: dict[tuple[str, int | None, str] | None, Place] = {}
    silent = sorted(rank for rank, place in places.items() if place is None or place.key() is None)
    for rank in sorted(places):
        place = places[rank]
        if place is None or (key := place.key()) is None:
            continue
        groups.setdefault(key, []).append(rank)
        found.setdefault(key, place)
    parts: list[str] = []
    if len(groups) == 1:
        ((key, ranks),) = groups.items()
        place = found[key]
        parts.append(f"every rank that answered ({_ranks(ranks).split(' ', 1)[1]}) is {place.describe()}")
        if place.in_collective:
            parts.append(
                "all wait in the same collective: for a peer outside the job, or a deadlock (a collective some "
                "rank never reaches); if the job's ranks are all here, look at what each rank called before it"
            )
        else:
            parts.append("all are in the same place: a step much slower than the run's own pace, or a deadlock")
    elif groups:
        # The odd one out: a group not waiting in a collective (the others wait for it), the smallest first.
        order = sorted(groups, key=lambda key: (found[key].in_collective, len(groups[key]), groups[key]))
        odd, rest = order[0], order[1:]
        parts.append(f"{_ranks(groups[odd])}: not where the others are, {found[odd].describe()}")
        parts.extend(f"{_ranks(groups[key])} {found[key].describe()}" for key in rest)
        parts.append(f"look at what {_ranks(groups[odd])} does there: the others wait for it")
    if silent:
        parts.append(f"{_ranks(silent)} wrote no stacks (the program did not install contract.stacks, or it died)")
    text = "; ".join(parts) if parts else "no rank wrote its stacks: the program did not install contract.stacks"
    return text[:FAILURE_DETAIL_CHARS]
