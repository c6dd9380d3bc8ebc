"""Which code a program's run started: the code record its batch script's probe printed (contract/workdir_probe.py),
and whether the script its command names is the same now, where the server can read it; in sentences for the run
page, the report and "run again"."""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Collection, Iterable
from pathlib import Path

from sqlmodel import Session

from contract.program import ProgramSpec, named_file_at
from contract.records import CodeRecord
from contract.workdir_probe import MAX_HASHED_BYTES
from server.models import CodeChange, Run, RunCode
from server.profiles import HOME_ROOT, ClusterProfile, within
from server.services.kept_records import records_by_run

UNKNOWN = "unknown: its batch script noted no code (no Python ran the probe on the node, or the run is older)"


def code_records(session: Session, run_ids: Collection[str]) -> dict[str, CodeRecord]:
    """Each run's latest code record (a requeued job notes its code again, at each start)."""
    return {run_id: kept[-1] for run_id, kept in records_by_run(session, run_ids, "code", CodeRecord).items()}


def short(digest: str | None) -> str:
    """A sha256 as people compare it: its first 12 hex digits."""
    return digest[:12] if digest else "not taken"


def summary(record: CodeRecord | None) -> str:
    """Which code ran, in a sentence: the script's sha256, the top-level files', git's revision and state."""
    if record is None:
        return UNKNOWN
    parts = []
    if record.script is not None:
        parts.append(f"{record.script.name} sha256 {short(record.script.sha256)}")
    hashed = sum(1 for file in record.files if file.sha256)
    more = f" ({record.files_more} more not hashed)" if record.files_more else ""
    parts.append(f"{hashed} of the workdir's top-level files hashed{more}")
    if record.git_revision is not None:
        state = {True: ", with changes not committed", False: ", clean", None: ""}[record.git_dirty]
        parts.append(f"git revision {record.git_revision[:12]}{state}")
    else:
        parts.append(f"git: {record.git or 'unknown'}")
    return "; ".join(parts)


def _readable_roots(profile: ClusterProfile | None) -> list[Path]:
    # A home root is the job's user's, which the server does not resolve here: a file there is not read.
    return [Path(root) for root in (profile.program_roots if profile else []) if root != HOME_ROOT]


def current_sha256(program: ProgramSpec, roots: Iterable[Path]) -> tuple[str | None, str]:
    """The sha256 of the script the command names as it is now, and else why the server cannot tell: it reads it
    only under the profile's program roots, a regular file within the bound the probe hashes."""
    at = named_file_at(program.command)
    if at is None:
        return None, "the command names no file"
    path = Path(program.workdir) / program.command[at]
    if not within(path, list(roots)):
        return None, f"{path} is not under a program root the server reads"
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        return None, f"the server cannot read {path} ({exc.strerror})"
    with os.fdopen(descriptor, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_HASHED_BYTES:
            return None, f"{path} is not a regular file of at most {MAX_HASHED_BYTES} bytes"
        digest = hashlib.sha256()
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest(), ""


def run_code(run: Run, record: CodeRecord | None, profile: ClusterProfile | None) -> RunCode:
    """Which code the run started, and whether its script is the same now."""
    program = run.spec.get("program") if run.spec.get("kind") == "program" else None
    code = record.model_dump(mode="json", exclude_none=True) if record else None
    if program is None:
        note = "the built-in worker runs the code of the image or release it names"
        return RunCode(run_id=run.id, noted=False, now=CodeChange.unknown, summary=note, note=note)
    then = record.script.sha256 if record is not None and record.script is not None else None
    now, why = current_sha256(ProgramSpec.model_validate(program), _readable_roots(profile))
    if then is None or now is None:
        why = why if then is not None else "its script's sha256 was not noted"
        change, note = CodeChange.unknown, f"cannot tell whether its code changed since: {why}"
    elif then == now:
        change, note = CodeChange.same, f"its script is as it ran (sha256 {short(now)}); its other files may differ"
    else:
        change = CodeChange.changed
        note = (
            f"its script changed since it ran (sha256 {short(then)} then, {short(now)} now): running it again runs "
            "the new code"
        )
    return RunCode(run_id=run.id, noted=record is not None, code=code, now=change, summary=summary(record), note=note)


def against_original(record: CodeRecord | None, original: CodeRecord | None, now: RunCode) -> str:
    """How a run again's code compares with the run it repeats: by their noted sha256 once both noted it, else
    (the new run has not started) by the original's against the file as it is now."""
    ours = record.script.sha256 if record is not None and record.script is not None else None
    theirs = original.script.sha256 if original is not None and original.script is not None else None
    if ours is not None and theirs is not None:
        if ours == theirs:
            return f"the same script (sha256 {short(ours)})"
        return f"its script differs from the one that run started (sha256 {short(ours)}, not {short(theirs)})"
    return now.note
