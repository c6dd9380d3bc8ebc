"""Text for a terminal: tables that fit its width, progress bars, and lines that update in place."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from itertools import zip_longest
from typing import TextIO

# Where the output is not a terminal (a pipe, a file, CI): wide enough for every column of a run listing.
FALLBACK_COLUMNS = 160
GAP = "  "


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
        self.out = out
        self.lines: list[str] = []
        self.in_place = out.isatty()

    def show(self, lines: list[str]) -> None:
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
