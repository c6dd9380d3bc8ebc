"""Run directories as the server makes and reads them (their names are the contract's: contract/rundir.py)."""

from __future__ import annotations

import codecs
import logging
import os
import shutil
from pathlib import Path

from contract.rundir import CHECKPOINTS_DIR, GENERATIONS_FILE, OUTPUT_FILE, SCRIPT_FILE, checkpoint_epoch
from server.errors import StorageFailed

log = logging.getLogger(__name__)


def write_new(path: Path, text: str, mode: int = 0o644) -> None:
    """A file of a run being created: nobody reads its directory before the run's row is committed, so it needs
    neither a rename nor a sync (sbatch reads the script as it submits); both were half of a large sweep's time."""
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode), "w", encoding="utf-8") as handle:
        handle.write(text)


def path(runs_dir: Path, run_id: str) -> Path:
    return runs_dir / run_id


def create(runs_dir: Path, run_id: str) -> Path:
    """A new, empty directory for one run; refuses to reuse one."""
    runs_dir.mkdir(parents=True, exist_ok=True)
    run_dir = path(runs_dir, run_id)
    run_dir.mkdir()
    return run_dir


class OutputUnavailable(ValueError):
    """The run's output is not a readable file of its own directory."""


def read_output(run_dir: Path, offset: int, limit: int) -> tuple[bytes, int]:
    """Up to `limit` bytes of the run's output from `offset`, cut at a character boundary; and the file's size.

    A missing output (the job has not started) reads as empty.
    """
    output = run_dir / OUTPUT_FILE
    # The job writes this file: a link there must not let the server read files outside the run's directory.
    if output.is_symlink() or not output.resolve().is_relative_to(run_dir.resolve()):
        raise OutputUnavailable(f"{OUTPUT_FILE} of this run is not a file in its directory")
    try:
        with output.open("rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if offset > size:
                return b"", size  # the caller says so; seeking that far could fail in the file system
            handle.seek(offset)
            data = handle.read(limit)
    except FileNotFoundError:
        return b"", 0
    except IsADirectoryError:
        raise OutputUnavailable(f"{OUTPUT_FILE} of this run is not a file") from None
    return data[: _whole_characters(data)], size


# generations.jsonl of the largest inference run: 256 prompts of 4096 characters and 4096 new tokens each.
MAX_GENERATIONS_BYTES = 16 * 1024 * 1024


def read_generations(run_dir: Path) -> bytes:
    """An inference run's generations file (empty while the run has not written it)."""
    generations = run_dir / GENERATIONS_FILE
    if generations.is_symlink() or not generations.resolve().is_relative_to(run_dir.resolve()):
        raise OutputUnavailable(f"{GENERATIONS_FILE} of this run is not a file in its directory")
    try:
        with generations.open("rb") as handle:
            data = handle.read(MAX_GENERATIONS_BYTES + 1)
    except FileNotFoundError:
        return b""
    except IsADirectoryError:
        raise OutputUnavailable(f"{GENERATIONS_FILE} of this run is not a file") from None
    if len(data) > MAX_GENERATIONS_BYTES:
        raise OutputUnavailable(f"{GENERATIONS_FILE} of this run is larger than {MAX_GENERATIONS_BYTES} bytes")
    return data


def _whole_characters(data: bytes) -> int:
    """How many leading bytes hold whole UTF-8 characters (all of them if none does: the bytes are not UTF-8)."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    decoder.decode(data, final=False)
    pending = len(decoder.getstate()[0])
    return len(data) - pending if pending < len(data) else len(data)


def remove(run_dir: Path) -> None:
    shutil.rmtree(run_dir, ignore_errors=True)


def unwritable(runs_dir: Path, exc: OSError, outcome: str) -> StorageFailed:
    """What to tell the user when the run directories cannot be written (the operator's log says where)."""
    log.error("cannot write run directories under %s: %s", runs_dir, exc)
    return StorageFailed(
        f"cannot write the run directories ({exc.strerror}); {outcome}. "
        "Ask the operator to check the runs directory's space and permissions."
    )


# A batch script is a few kilobytes; a page shows no more than this of one.
MAX_SCRIPT_BYTES = 256 * 1024


def read_script(run_dir: Path) -> str | None:
    """The run's batch script as written at submission; None if it cannot be read as a file of its directory."""
    script = run_dir / SCRIPT_FILE
    if script.is_symlink() or not script.resolve().is_relative_to(run_dir.resolve()):
        return None
    try:
        with script.open("rb") as handle:
            return handle.read(MAX_SCRIPT_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return None


def checkpoint_epochs(run_dir: Path) -> list[int]:
    """Epochs of the complete checkpoints in the run's directory (the worker renames one into place when done)."""
    directory = run_dir / CHECKPOINTS_DIR
    try:
        names = [entry.name for entry in directory.iterdir() if entry.is_dir() and not entry.is_symlink()]
    except OSError:
        return []
    return sorted(epoch for name in names if (epoch := checkpoint_epoch(name)) is not None)
