"""Text for a terminal: tables that fit its width, progress bars, and lines that update in place."""

from __future__ import annotations

import contextlib
import re
import shutil
import sys
from collections.abc import Iterator, Sequence
from itertools import zip_longest
from typing import Any, TextIO, cast

# Where the output is not a terminal (a pipe, a file, CI): wide enough for every column of a run listing.
FALLBACK_COLUMNS = 160
GAP = "  "

# Every control character but tab and line feed: C0, DEL, and C1 (0x9b is a CSI to some terminals). What a job
# wrote (a metric's name, a message, a log) is read by whoever an experiment is shared with; printed raw, an escape
# sequence could clear their screen, retitle their window, hide a line or plant a link.
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """The text without its control characters: only text reaches the reader's terminal."""
    return CONTROL.sub("", text)


class Printable:
    """A text stream that writes only printable text (see `printable`); anything else is the stream's own."""

    def __init__(self, out: TextIO) -> None:
        self.out = out

    def write(self, text: str) -> int:
        self.out.write(printable(text))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.out, name)


@contextlib.contextmanager
def printable_output() -> Iterator[None]:
    """Standard output and error filtered through `printable` for as long as a command runs: every string the
    server sent is printed through one of them, so none can be forgotten."""
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = cast(TextIO, Printable(out)), cast(TextIO, Printable(err))
    try:
        yield
    finally:
        sys.stdout, sys.stderr = out, err


def unfiltered(out: TextIO) -> TextIO:
    """The stream under `printable_output`'s filter: for the client's own control sequences."""
    return out.out if isinstance(out, Printable) else out


def columns() -> int:
    """The terminal's width ($COLUMNS wins, as shells set it)."""
    return shutil.get_terminal_size((FALLBACK_COLUMNS, 24)).columns


def shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], width: int, *, flexible: int = -1) -> list[str]:
    """Columns as wide as their widest cell. Too wide for `width`: the `flexible` column (free text, say a name)
    gives way first, down to its header's width; then columns are left out from the right, never the first."""
    text = [[cell(value) for value in row] for row in rows]
    widths = [max([len(header), *(len(row[i]) for row in text)]) for i, header in enumerate(headers)]
    shown = len(headers)

    def total() -> int:
        return sum(widths[:shown]) + len(GAP) * (shown - 1)

    if total() > width and 0 <= flexible < shown:
        widths[flexible] = max(len(headers[flexible]), widths[flexible] - (total() - width))
    while total() > width and shown > 1:
        shown -= 1
    lines = [
        GAP.join(shorten(value, w).ljust(w) for value, w in zip(row[:shown], widths, strict=False)).rstrip()
        for row in [list(headers), *text]
    ]
    return [shorten(line, width) for line in lines]


def bar(done: int, total: int, width: int = 20) -> str:
    filled = min(width, width * done // total) if total > 0 else 0
    return "[" + "#" * filled + "." * (width - filled) + "]"


class Board:
    """A block of lines shown again as they change: in place on a terminal; elsewhere (a pipe, a CI log)
    each line that changed is printed once more."""

    def __init__(self, out: TextIO) -> None:
        # The board's own sequences move the cursor; its lines are made printable here, as the filter would.
        self.out = unfiltered(out)
        self.lines: list[str] = []
        self.in_place = out.isatty()

    def show(self, lines: list[str]) -> None:
        lines = [printable(line) for line in lines]
        if self.in_place:
            width = columns()
            if self.lines:
                self.out.write(f"\x1b[{len(self.lines)}F")  # back to the block's first line
            # Lines kept narrower than the terminal: a wrapped line would throw the count above off.
            self.out.write("".join(f"\x1b[2K{shorten(line, width - 1)}\n" for line in lines))
        else:
            changed = [new for old, new in zip_longest(self.lines, lines) if new is not None and new != old]
            self.out.write("".join(f"{line}\n" for line in changed))
        self.out.flush()
        self.lines = lines
