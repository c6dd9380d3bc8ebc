"""A program run's last word, once its output is read to the end: why it failed, from the last lines of its output,
or that it completed without printing a figure. The built-in worker says so itself in its end record; a user's
program cannot be relied on to."""

from __future__ import annotations

from pathlib import Path

from sqlmodel import Session

from contract.records import METRIC_PREFIX
from contract.spec import RunKind
from contract.states import RunState
from server.models import Run, RunSummary
from server.services import flags, rundirs

# What the message quotes of the output: the last lines, at most this many bytes of them (the end kept).
TAIL_LINES = 15
TAIL_BYTES = 2048
# How much of the file's end is read for them: metric lines, which are left out, may crowd a crash's last words.
TAIL_READ_BYTES = 64 * 1024


def is_program(run: Run) -> bool:
    return run.spec.get("kind") == RunKind.program.value


def output_tail(run_dir: Path) -> str:
    """The last lines of a run's output that are not metric lines (figures, not what went wrong)."""
    try:
        _, size = rundirs.read_output(run_dir, 0, 0)
        start = max(size - TAIL_READ_BYTES, 0)
        data, _ = rundirs.read_output(run_dir, start, TAIL_READ_BYTES)
    except rundirs.OutputUnavailable:
        return ""
    lines = data.decode("utf-8", errors="replace").splitlines()
    if start > 0:
        lines = lines[1:]  # read from inside a line
    said = [line.rstrip() for line in lines if line.strip() and not line.lstrip().startswith(METRIC_PREFIX)]
    return "\n".join(said[-TAIL_LINES:])[-TAIL_BYTES:]


def _exit(exit_code: str | None) -> str:
    """Slurm's `code:signal` in words."""
    code, _, signal = (exit_code or "").partition(":")
    if signal not in ("", "0"):
        return f"the program was killed by signal {signal}"
    if code not in ("", "0"):
        return f"the program exited with code {code}"
    return "the program failed"


def silent(run: Run, epochs_done: int) -> bool:
    """A program run that completed without printing an epoch record: scalelab has nothing of it to chart."""
    return is_program(run) and run.state is RunState.completed and epochs_done == 0


def conclude(session: Session, run: Run) -> None:
    """Stage a program run's message from how it ended, once all its output has been read."""
    if not is_program(run):
        return
    summary = session.get(RunSummary, run.id)
    if run.state is RunState.failed:
        tail = output_tail(Path(run.run_dir))
        run.message = _exit(run.exit_code) + (
            f"; the last lines of its output:\n{tail}" if tail else "; it printed nothing"
        )
    elif silent(run, summary.epochs_done if summary else 0):
        run.message = flags.no_metrics().message
    session.add(run)
