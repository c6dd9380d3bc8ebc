"""Why a run that did not complete ended, as one failure kind and one sentence of what to do: each kind's condition,
a pure function over what the server knows of the ended run (Slurm's state, reason and exit code, the worker's own
error, the last lines of its output), beside its sentence; `classify` tries them in order, most telling first.

Which of a run's ends are failures is written here too: a run the user cancelled, one preempted (Slurm may run it
again) or one that never reached the scheduler (submit_failed, which says why itself) is not, and gets no kind.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from contract.states import FailureKind, RunState
from server.models.run import FAILURE_DETAIL_CHARS
from server.runstate import FAILED_STATES
from server.services.programs import first_cause

# How much of one line of evidence the detail quotes: a stranger's line, bounded.
QUOTED_CHARS = 400


@dataclass(frozen=True)
class Ending:
    """What the server knows of a run that ended without completing."""

    state: RunState
    exit_code: str | None = None  # Slurm's "exit:signal"
    reason: str | None = None  # Slurm's reason, verbatim
    lines: Sequence[str] = ()  # the worker's own error (its end record), then the last lines of the output


@dataclass(frozen=True)
class Verdict:
    kind: FailureKind
    evidence: str  # what showed it: Slurm's state, or the line quoted

    @property
    def detail(self) -> str:
        """The evidence and what to do, bounded as the run's column is."""
        advice = ADVICE[self.kind]
        room = FAILURE_DETAIL_CHARS - len(advice) - 2
        return f"{self.evidence[:room]}. {advice}"


# torch prefixes each rank's lines ("[rank1]: "), srun --label each task's ("1: "): the line's own words follow.
_RANK_PREFIX = re.compile(r"^\s*(\[rank\d+\]:|\d+:)\s*")


def _own_words(lines: Iterable[str]) -> list[str]:
    return [_RANK_PREFIX.sub("", line).strip() for line in lines]


def _first(lines: Sequence[str], pattern: re.Pattern[str]) -> str | None:
    """The first line that matches, quoted (bounded)."""
    for line in _own_words(lines):
        if pattern.search(line):
            return _quote(line)
    return None


def _quote(line: str) -> str:
    return repr(line[:QUOTED_CHARS] + ("…" if len(line) > QUOTED_CHARS else ""))


def _exit(exit_code: str | None) -> tuple[int | None, int | None]:
    """Slurm's `code:signal` as numbers (None where it said none)."""
    code, _, signal = (exit_code or "").partition(":")
    return (int(code) if code.isdigit() else None, int(signal) if signal.isdigit() else None)


# ---- hung: set by the watchdog, never here --------------------------------------------------------------------------

HUNG = (
    "A rank stopped making progress while the others waited for it: its stack on the run's page says where; fix "
    "what it waits on (a rank that skips a collective, a data loader stuck on I/O), or set on_hang keep to look at it "
    "live."
)

# ---- time_limit ------------------------------------------------------------------------------------------------------

TIME_LIMIT = (
    "Resubmit it with a longer resources.time_limit or fewer epochs; checkpoints let a resubmitted run go on from "
    "where it stopped."
)


def time_limit(ending: Ending) -> str | None:
    if ending.state is not RunState.timeout:
        return None
    return f"Slurm ended the job at its time limit ({ending.reason or 'TIMEOUT'})"


# ---- node_failure ----------------------------------------------------------------------------------------------------

NODE_FAILURE = (
    "The run is not at fault: resubmit it; if the same node fails again, tell the cluster's admins the job id and the "
    "node."
)


def node_failure(ending: Ending) -> str | None:
    if ending.state is not RunState.node_fail:
        return None
    return f"Slurm ended the job because a node failed ({ending.reason or 'NODE_FAIL'})"


# ---- out_of_memory ---------------------------------------------------------------------------------------------------

OUT_OF_MEMORY = (
    "Make it smaller per device (a lower global_batch_size, bf16 precision, activation checkpointing, fsdp over "
    'more GPUs) or give it more host memory (resources.sbatch_options "mem" where the profile allows it).'
)
# The device's allocator (CUDA, HIP, torch's OutOfMemoryError), torch's host allocator ("DefaultCPUAllocator: can't
# allocate memory"), Python's MemoryError, and Slurm's own words when it killed a step over its --mem (the cgroup's
# oom-kill, or the accounting plugin's "Exceeded job memory limit").
_OUT_OF_MEMORY = re.compile(
    r"CUDA out of memory|HIP out of memory|OutOfMemoryError|can't allocate memory|^(\w+\.)*MemoryError\b|oom[-_ ]kill|"
    r"Exceeded (job|step) memory limit|task \d+: Out Of Memory|Out of memory: Killed process",
    re.IGNORECASE,
)


def out_of_memory(ending: Ending) -> str | None:
    if ending.state is RunState.out_of_memory:
        return f"Slurm ended the job for using more memory than it was allocated ({ending.reason or 'OUT_OF_MEMORY'})"
    found = _first(ending.lines, _OUT_OF_MEMORY)
    return f"it ran out of memory: {found}" if found else None


# ---- import_error ----------------------------------------------------------------------------------------------------

IMPORT_ERROR = (
    "It will fail the same way at any size: install the missing module or library in the environment the job runs "
    "in (the image, or the program's venv), or correct the import, then rerun."
)
_IMPORT_ERROR = re.compile(r"^(\w+\.)*(ModuleNotFoundError|ImportError)\b")


def import_error(ending: Ending) -> str | None:
    found = _first(ending.lines, _IMPORT_ERROR)
    return f"the program could not import what it needs: {found}" if found else None


# ---- collective_timeout ----------------------------------------------------------------------------------------------

COLLECTIVE_TIMEOUT = (
    "A collective waited longer than the process group's timeout: one rank fell behind or never joined (a rank that "
    "skips a collective, uneven data, a slow first step); find the rank that did not get there in the other ranks' "
    "output, or raise the timeout in init_process_group if its steps are that slow."
)
# gloo: "Timed out waiting 3000ms for recv operation to complete"; NCCL's watchdog: "Watchdog caught collective
# operation timeout: WorkNCCL(...) ran for 600000 milliseconds before timing out"; c10d's DistBackendError of a
# store or communicator that timed out.
_COLLECTIVE = re.compile(r"gloo|nccl|ProcessGroup|DistBackendError|Watchdog|collective|c10d", re.IGNORECASE)
_TIMED_OUT = re.compile(r"timed out|timeout|timing out", re.IGNORECASE)


def collective_timeout(ending: Ending) -> str | None:
    for line in _own_words(ending.lines):
        if _COLLECTIVE.search(line) and _TIMED_OUT.search(line):
            return f"a collective timed out: {_quote(line)}"
    return None


# ---- launcher_error --------------------------------------------------------------------------------------------------

LAUNCHER_ERROR = (
    "The program never ran (or its launcher failed around it): check the command and its path, the cluster "
    "profile's [container] settings and the launcher's own words in the job's output, then rerun."
)
# Before the program started: the shell could not find or run the command (exit 127 / 126), a container runtime
# refused (apptainer's "FATAL:" / "ERROR  :", podman's "Error:"), slurmstepd could not exec the task.
_NOT_STARTED = re.compile(
    r"command not found|No such file or directory$|Permission denied$|^(FATAL:|ERROR\s+:)\s|^Error: |"
    r"slurmstepd: error: execve\(\)|pyxis: "
)
# Around the program: srun's and torchrun's own errors, which follow a program's traceback when there is one.
_LAUNCHER = re.compile(r"^srun: error: |ChildFailedError|^slurmstepd: error: ")
_NOT_FOUND_CODES = (126, 127)


def launcher_not_started(ending: Ending) -> str | None:
    code, _ = _exit(ending.exit_code)
    found = _first(ending.lines, _NOT_STARTED)
    if found:
        return f"the program did not start: {found}"
    if code in _NOT_FOUND_CODES:
        return f"the job's command exited with code {code}: the shell could not find or run it"
    return None


def launcher_around(ending: Ending) -> str | None:
    found = _first(ending.lines, _LAUNCHER)
    return f"the launcher failed with no traceback of the program's: {found}" if found else None


# ---- program_error ---------------------------------------------------------------------------------------------------

PROGRAM_ERROR = (
    "It will fail the same way at any size: the program raised (or exited with an error) on its own; fix the code "
    "or its input from the traceback in the run's log, then rerun."
)


def program_error(ending: Ending) -> str | None:
    cause = first_cause(_own_words(ending.lines))
    return f"the program raised: {_quote(cause)}" if cause else None


def program_exit(ending: Ending) -> str | None:
    """The last resort: nothing said why, but the program itself exited with an error or was killed."""
    code, signal = _exit(ending.exit_code)
    if signal:
        return f"the program was killed by signal {signal} without a message saying why"
    if code:
        return f"the program exited with code {code} without a traceback"
    return None


# Each kind's sentence: what to do. The detail of a run quotes its evidence first.
ADVICE: dict[FailureKind, str] = {
    FailureKind.hung: HUNG,
    FailureKind.time_limit: TIME_LIMIT,
    FailureKind.node_failure: NODE_FAILURE,
    FailureKind.out_of_memory: OUT_OF_MEMORY,
    FailureKind.import_error: IMPORT_ERROR,
    FailureKind.collective_timeout: COLLECTIVE_TIMEOUT,
    FailureKind.launcher_error: LAUNCHER_ERROR,
    FailureKind.program_error: PROGRAM_ERROR,
}

# The conditions in the order they are tried: Slurm's own verdicts first; memory before a collective's timeout and an
# import error before it (a rank that died of either leaves the others waiting); a launcher that never started the
# program before a traceback (a container runtime's "FATAL:" reads like one); srun's and torchrun's words about a
# program that failed after its own traceback.
CHECKS: tuple[tuple[FailureKind, Callable[[Ending], str | None]], ...] = (
    (FailureKind.time_limit, time_limit),
    (FailureKind.node_failure, node_failure),
    (FailureKind.out_of_memory, out_of_memory),
    (FailureKind.import_error, import_error),
    (FailureKind.collective_timeout, collective_timeout),
    (FailureKind.launcher_error, launcher_not_started),
    (FailureKind.program_error, program_error),
    (FailureKind.launcher_error, launcher_around),
    (FailureKind.program_error, program_exit),
)


def classify(ending: Ending) -> Verdict | None:
    """The kind of a failed run's end and its evidence; None for an end that is not a failure (FAILED_STATES)."""
    if ending.state not in FAILED_STATES:
        return None
    for kind, check in CHECKS:
        evidence = check(ending)
        if evidence is not None:
            return Verdict(kind, evidence)
    # Nothing at all: no exit code, no word. The job ended before the program could say anything.
    return Verdict(FailureKind.launcher_error, "the job failed before its program printed anything or exited")
