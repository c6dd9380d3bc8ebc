"""A run's last word, once its output is read to the end: why it failed, from the last lines of its output, or that a
program run completed without printing a figure. The built-in worker says why it failed itself, in its end record; a
user's program cannot be relied on to, and neither can the worker when it never started: its container runtime
refused to start the container (apptainer's FATAL line), so the same rule reads the worker's output then."""

from __future__ import annotations

import re
from pathlib import Path

from sqlmodel import Session

from contract.records import METRIC_PREFIX
from contract.rundir import OUTPUT_FILE
from contract.spec import RunKind
from contract.states import RunState
from server import runfiles
from server.models import Run, RunSummary
from server.runfiles import Unreadable
from server.services import flags, launches, rundirs

# What the message quotes of the output: the last lines, at most this many bytes of them (the end kept).
TAIL_LINES = 15
TAIL_BYTES = 2048
# How much of the file's end is read for them: metric lines, which are left out, may crowd a crash's last words.
TAIL_READ_BYTES = 64 * 1024


def is_program(run: Run) -> bool:
    return run.spec.get("kind") == RunKind.program.value


def said_lines(run_dir: Path, owner: int | None) -> list[str]:
    """The non-empty lines at the end of a run's output that are not metric lines (figures, not what went wrong)."""
    try:
        with runfiles.open_file(run_dir, OUTPUT_FILE, owner) as output:
            if output is None:
                return []
            start = max(output.size - TAIL_READ_BYTES, 0)
            data = output.read(start, TAIL_READ_BYTES)
    except Unreadable:
        return []
    lines = data.decode("utf-8", errors="replace").splitlines()
    if start > 0:
        lines = lines[1:]  # read from inside a line
    return [line.rstrip() for line in lines if line.strip() and not line.lstrip().startswith(METRIC_PREFIX)]


# A line where a failure shows first: a Python exception's own line, or a C++ runtime's abort. torchrun's report of
# its children comes after the cause and its own traceback can push the cause out of the tail; it also names as
# "root cause" whichever child it saw first within the same second, often one it stopped itself (SIGTERM).
# A container runtime's refusal is such a line too: apptainer (and singularity) write "FATAL:   While ..." and
# "ERROR  : ..." (the level padded before or after its colon) before the program has started, and exit 255.
# Python's logging ("ERROR:root:...") pads neither.
_RUNTIME_CAUSE = re.compile(r"^(FATAL:|ERROR\s+:)\s")
_CAUSE = re.compile(
    r"^(\w+\.)*\w*(Error|Exception)\b.*:|^terminate called\b|^Fatal Python error\b|" + _RUNTIME_CAUSE.pattern
)
_LAUNCHER_ERRORS = ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError",)
# An abort as Python shuts down after a gloo process group: torch's threads still hold what the interpreter frees.
_EXIT_ABORT = "terminate called without an active exception"
EXIT_ABORT_HINT = (
    'a process aborted as Python shut down ("terminate called without an active exception"), which torch\'s gloo '
    "threads can cause after training has ended; ending the script with os._exit(0) after destroy_process_group "
    "avoids it, as examples/programs/train_ddp.py does"
)


def first_cause(lines: list[str]) -> str | None:
    """The first line among `lines` that says what went wrong, torchrun's own summary left out."""
    for line in lines:
        said = line.strip()
        if _CAUSE.match(said) and not said.startswith(_LAUNCHER_ERRORS):
            return said
    return None


# What to do about a container runtime's refusal, by what it said: (words in its line, advice).
_RUNTIME_ADVICE = (
    (
        "is not readable by the current user",
        "the image must be readable by the user the job runs as: make it so (chmod o+r, or a group of that "
        "user's), or point the profile's container.image at a copy that user can read",
    ),
    (
        "no such file or directory",
        "the image does not exist at that path on the compute nodes: build it there, in a directory the nodes "
        "share (containers/build worker-sif makes the worker's SIF), or correct the profile's container.image",
    ),
)
_RUNTIME_ADVICE_ELSE = "check the profile's [container] settings (image, extra_args) and the runtime on the nodes"


def runtime_advice(cause: str) -> str:
    """What to do about a container runtime's refusal to start the container."""
    said = cause.lower()
    return next((advice for words, advice in _RUNTIME_ADVICE if words in said), _RUNTIME_ADVICE_ELSE)


def failure_message(run_dir: Path, exit_code: str | None, owner: int | None = None) -> str:
    """Why a program run failed: how it ended, the first line that says what went wrong (a container runtime's
    refusal always, with what to do; another cause where the tail would not show it), and the tail."""
    return _failure_message(said_lines(run_dir, owner), exit_code, "the program")


def refusal_message(run_dir: Path, exit_code: str | None, owner: int | None = None) -> str | None:
    """Why a worker run failed whose container never started, as failure_message says it; None where the output
    shows no container runtime's refusal (the worker's own words, or their absence, are not the output's tail)."""
    said = said_lines(run_dir, owner)
    cause = first_cause(said)
    if cause is None or not _RUNTIME_CAUSE.match(cause):
        return None
    return _failure_message(said, exit_code, "the job")


def _failure_message(said: list[str], exit_code: str | None, what: str) -> str:
    if not said:
        return _exit(exit_code, what) + "; it printed nothing"
    tail = said[-TAIL_LINES:]
    cause = first_cause(said)
    if cause == _EXIT_ABORT:
        told = f"; {EXIT_ABORT_HINT}"
    elif cause is not None and _RUNTIME_CAUSE.match(cause):
        told = f"; the container runtime did not start it: {cause[:TAIL_BYTES]}; {runtime_advice(cause)}"
    elif cause is not None and cause not in (line.strip() for line in tail):
        told = f"; it first went wrong at: {cause[:TAIL_BYTES]}"
    else:
        told = ""
    return _exit(exit_code, what) + told + "; the last lines of its output:\n" + "\n".join(tail)[-TAIL_BYTES:]


def _exit(exit_code: str | None, what: str) -> str:
    """Slurm's `code:signal` in words."""
    code, _, signal = (exit_code or "").partition(":")
    if signal not in ("", "0"):
        return f"{what} was killed by signal {signal}"
    if code not in ("", "0"):
        return f"{what} exited with code {code}"
    return f"{what} failed"


def silent(run: Run, epochs_done: int) -> bool:
    """A program run that completed without printing an epoch record: scalelab has nothing of it to chart."""
    return is_program(run) and run.state is RunState.completed and epochs_done == 0


def conclude(session: Session, run: Run) -> None:
    """Stage a run's message from how it ended, once all its output has been read: a program run's always, a worker
    run's where it failed without a word of its own because its container runtime did not start it."""
    if not is_program(run):
        if run.state is RunState.failed and not run.message:
            run.message = refusal_message(Path(run.run_dir), run.exit_code, rundirs.file_owner(run))
            session.add(run)
        return
    summary = session.get(RunSummary, run.id)
    if run.state is RunState.failed:
        run.message = failure_message(Path(run.run_dir), run.exit_code, rundirs.file_owner(run))
    elif silent(run, summary.epochs_done if summary else 0):
        timed = launches.run_time(launches.launch_records(session, [run.id]).get(run.id, []), final=True)
        run.message = flags.no_metrics(run_timed=timed.seconds is not None).message
    session.add(run)
