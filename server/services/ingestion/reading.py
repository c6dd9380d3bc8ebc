"""Reading a run's output file from the byte offset stored last time: its new complete lines, a bounded chunk at a
time, and a finished run's cut last line. The one place ingestion opens, reads or measures a run's output, through
server/runfiles.py (no link, FIFO or device, no file but the run's own); it knows nothing of the database: what it
read is given back, and the caller stores it with the new offset and the file's identity.

A job only ever appends to its output (the batch script opens it with >>, a requeue or a resubmission too). One that
shrank below the offset read, or is another file than the one read so far, was truncated or replaced by its job:
reading it on would mean walking the offset back, or reading another file's bytes at the old one's offsets. Either
raises Unreadable, which the caller records once on the run, and reading that run's output ends there."""

from __future__ import annotations

from typing import NamedTuple

from contract.records import METRIC_PREFIX
from contract.rundir import OUTPUT_FILE
from server import runfiles
from server.runfiles import RunFile, Unreadable

# How much of a file one read takes: a run that printed a lot catches up over a few reads.
CHUNK_BYTES = 4 * 1024 * 1024
# A line longer than this is not a metric record the worker wrote.
MAX_LINE_BYTES = 1024 * 1024

_PREFIX = METRIC_PREFIX.encode()


# A run's stored output identity once its reading was stopped for good (see the module's docstring).
REFUSED = "refused"


class NewLines(NamedTuple):
    """What one read of a run's output found past its offset."""

    metric_lines: list[tuple[int, bytes]]  # (offset, line) of each line that may hold a record, in output order
    end: int  # where the next read starts: after the last complete line, or after the part of a line skipped
    lines_read: int  # how many lines (or pieces of one skipped) were read: 0 when nothing new was
    overlong: int  # lines that cannot be a record for their length: each a parse error
    identity: str  # the file read ("device:inode"), for the next read to be of the same file


class CutLine(NamedTuple):
    """A finished run's last line, which has no newline (the job was killed while printing it)."""

    offset: int
    line: bytes | None  # None: longer than a record can be, a parse error
    end: int  # the file's size: reading is over there
    identity: str


def output_size(run_dir: str) -> int:
    """The size of the run's output file (0: none yet, or unreadable), for a gauge of how far reading lags: its
    bytes are never read here, so whose it is does not matter."""
    try:
        with runfiles.open_file(run_dir, OUTPUT_FILE) as output:
            return 0 if output is None else output.size
    except (Unreadable, OSError):
        return 0


def _check(output: RunFile, offset: int, identity: str | None) -> None:
    """Refuse a file that is not the one read so far (`identity`: None where none was recorded yet), or that shrank
    below what was read of it."""
    if identity is not None and output.identity != identity:
        raise Unreadable(
            f"{OUTPUT_FILE} of this run was replaced by another file after {offset} bytes of it had been read"
        )
    if output.size < offset:
        raise Unreadable(
            f"{OUTPUT_FILE} of this run was truncated to {output.size} bytes, below the {offset} bytes already read"
        )


def measure(run_dir: str, offset: int, identity: str | None, owner: int | None) -> int:
    """The size of the run's output file (0: none yet); raises Unreadable for a file that cannot be read on: not a
    regular file of the run's own (see server/runfiles.py), another than the one read so far, or one truncated."""
    with runfiles.open_file(run_dir, OUTPUT_FILE, owner) as output:
        if output is None:
            return 0
        _check(output, offset, identity)
        return output.size


def read_new_lines(run_dir: str, offset: int, identity: str | None, owner: int | None) -> NewLines | None:
    """The complete lines past `offset`, at most a chunk of them; None when there is nothing to take yet (no file, or
    only a partial last line, which waits for the rest of it). Raises Unreadable as `measure` does.

    A line longer than a whole chunk is skipped over several reads, counted once, and never held whole.
    """
    # Read one byte before the offset too: it tells whether the offset starts a line or sits inside one
    # that an earlier read skipped for being too long.
    start = max(offset - 1, 0)
    with runfiles.open_file(run_dir, OUTPUT_FILE, owner) as output:
        if output is None:
            return None
        _check(output, offset, identity)
        chunk = output.read(start, CHUNK_BYTES + offset - start)
        identity = output.identity
    inside_skipped_line = offset > 0 and chunk[:1] != b"\n"
    # Indexes into the chunk rather than slices of it: a copy of a chunk of one overlong line would double the
    # memory that line takes.
    begin = offset - start
    new_bytes = len(chunk) - begin
    if inside_skipped_line:
        rest = chunk.find(b"\n", begin)
        skipped = new_bytes if rest < 0 else rest + 1 - begin
        return NewLines([], offset + skipped, 1 if skipped else 0, 0, identity)
    end = chunk.rfind(b"\n", begin)
    if end < 0:
        if new_bytes == CHUNK_BYTES:
            # One line longer than a whole chunk: not a metric line; skip it, counted once.
            return NewLines([], offset + new_bytes, 1, 1, identity)
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
    return NewLines(metric_lines, offset, len(lines), overlong, identity)


def read_cut_line(run_dir: str, offset: int, identity: str | None, owner: int | None) -> CutLine | None:
    """A finished run's last line past `offset`, which has no newline, read at most a line's bound of it; None when
    there is none (no file, or nothing past the offset). Raises Unreadable as `measure` does."""
    with runfiles.open_file(run_dir, OUTPUT_FILE, owner) as output:
        if output is None:
            return None
        _check(output, offset, identity)
        if output.size == offset:
            return None
        tail = output.read(offset, MAX_LINE_BYTES + 1)
        return CutLine(offset, None if len(tail) > MAX_LINE_BYTES else tail, output.size, output.identity)
