"""Reading a run's output file from the byte offset stored last time: its new complete lines, a bounded chunk at a
time, and a finished run's cut last line. The one place ingestion opens, reads or measures a run's output; it knows
nothing of the database: what it read is given back, and the caller stores it with the new offset."""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

from contract.records import METRIC_PREFIX
from contract.rundir import OUTPUT_FILE

# How much of a file one read takes: a run that printed a lot catches up over a few reads.
CHUNK_BYTES = 4 * 1024 * 1024
# A line longer than this is not a metric record the worker wrote.
MAX_LINE_BYTES = 1024 * 1024

_PREFIX = METRIC_PREFIX.encode()


class NewLines(NamedTuple):
    """What one read of a run's output found past its offset."""

    metric_lines: list[tuple[int, bytes]]  # (offset, line) of each line that may hold a record, in output order
    end: int  # where the next read starts: after the last complete line, or after the part of a line skipped
    lines_read: int  # how many lines (or pieces of one skipped) were read: 0 when nothing new was
    overlong: int  # lines that cannot be a record for their length: each a parse error


class CutLine(NamedTuple):
    """A finished run's last line, which has no newline (the job was killed while printing it)."""

    offset: int
    line: bytes | None  # None: longer than a record can be, a parse error
    end: int  # the file's size: reading is over there


def output_size(run_dir: str) -> int:
    """The size of the run's output file (0: none yet, or unreadable)."""
    try:
        return (Path(run_dir) / OUTPUT_FILE).stat().st_size
    except OSError:
        return 0


def read_new_lines(run_dir: str, offset: int) -> NewLines | None:
    """The complete lines past `offset`, at most a chunk of them; None when there is nothing to take yet (no file, or
    only a partial last line, which waits for the rest of it).

    A line longer than a whole chunk is skipped over several reads, counted once, and never held whole.
    """
    path = Path(run_dir) / OUTPUT_FILE
    # Read one byte before the offset too: it tells whether the offset starts a line or sits inside one
    # that an earlier read skipped for being too long.
    start = max(offset - 1, 0)
    try:
        with path.open("rb") as handle:
            handle.seek(start)
            chunk = handle.read(CHUNK_BYTES + offset - start)
    except FileNotFoundError:
        return None
    inside_skipped_line = offset > 0 and chunk[:1] != b"\n"
    # Indexes into the chunk rather than slices of it: a copy of a chunk of one overlong line would double the
    # memory that line takes.
    begin = offset - start
    new_bytes = len(chunk) - begin
    if inside_skipped_line:
        rest = chunk.find(b"\n", begin)
        skipped = new_bytes if rest < 0 else rest + 1 - begin
        return NewLines([], offset + skipped, 1 if skipped else 0, 0)
    end = chunk.rfind(b"\n", begin)
    if end < 0:
        if new_bytes == CHUNK_BYTES:
            # One line longer than a whole chunk: not a metric line; skip it, counted once.
            return NewLines([], offset + new_bytes, 1, 1)
        return None  # a partial last line: wait for the rest of it
    metric_lines: list[tuple[int, bytes]] = []
    overlong = 0
    lines = chunk[begin : end + 1].splitlines(keepends=True)
    for raw in lines:
        line_offset, offset = offset, offset + len(raw)
        if _PREFIX not in raw:
            continue  # a progress line: no metric record can be on it
        if len(raw) > MAX_LINE_BYTES:
            overlong += 1
            continue
        metric_lines.append((line_offset, raw))
    return NewLines(metric_lines, offset, len(lines), overlong)


def read_cut_line(run_dir: str, offset: int) -> CutLine | None:
    """A finished run's last line past `offset`, which has no newline, read at most a line's bound of it; None when
    there is none (no file, or nothing past the offset)."""
    path = Path(run_dir) / OUTPUT_FILE
    try:
        with path.open("rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size <= offset:
                return None
            handle.seek(offset)
            tail = handle.read(MAX_LINE_BYTES + 1)
    except FileNotFoundError:
        return None
    return CutLine(offset, None if len(tail) > MAX_LINE_BYTES else tail, size)
