"""The probe a program's batch script runs before and after the launch: which code ran, and what the run wrote.

Standard library only: the batch script carries this file's text and runs it with whatever Python the node has
(server/render.py), outside any container. It never fails the job: whatever it cannot tell it leaves out, and the
server then says "unknown". Everything it prints is one `[METRIC] {json}` line per record (contract.records reads
them as any job's output: a stranger's text, validated and bounded there); file names never reach a shell.

    start WORKDIR [--script NAME] [--state FILE]: the code record (the named script's sha256, the workdir's top-level
        files', git's revision and dirty state); with --state, the workdir's listing is kept in FILE and its newest
        files printed as a workdir record (phase start): what the run found there.
    end WORKDIR --state FILE: the files created or changed since that listing (phase end): what the run wrote.

The listing never follows links, skips .git and Python's bytecode caches (which any import rewrites), and stops at
MAX_DEPTH, MAX_ENTRIES or DEADLINE_S, saying so (complete: false).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import time

PREFIX = "[METRIC]"  # contract.metrics.PREFIX (this file imports nothing of scalelab's)
MAX_DEPTH = 4  # directory levels below the workdir that are listed
MAX_ENTRIES = 5000  # directory entries looked at, in all
MAX_SHOWN = 32  # files named in one workdir record
MAX_TOP_FILES = 64  # top-level files hashed
MAX_HASHED_BYTES = 16 * 2**20  # one file's bytes hashed; a larger file is named with its size alone
MAX_TOTAL_BYTES = 64 * 2**20  # bytes hashed in all
MAX_NAME_CHARS = 512
DEADLINE_S = 5.0  # each phase's listing and hashing together
GIT_TIMEOUT_S = 10.0
SKIPPED_DIRS = frozenset({".git", "__pycache__", ".ipynb_checkpoints"})
SKIPPED_SUFFIXES = (".pyc", ".pyo")


def shown_name(name: str) -> str:
    """A file name as the record carries it: bytes that are not UTF-8 and control characters as '?', bounded."""
    text = name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    text = "".join("?" if ord(char) < 32 or ord(char) == 127 else char for char in text)
    return text if len(text) <= MAX_NAME_CHARS else text[: MAX_NAME_CHARS - 3] + "..."


def listing(workdir: str, deadline: float) -> tuple[dict[str, list[int]], bool]:
    """Every regular file under `workdir` within the bounds, by its path relative to it: [mtime_ns, bytes]; and
    whether the whole tree was listed."""
    found: dict[str, list[int]] = {}
    pending: list[tuple[str, str, int]] = [(workdir, "", 1)]
    looked, complete = 0, True
    while pending:
        directory, prefix, depth = pending.pop()
        try:
            entries = os.scandir(directory)
        except OSError:
            complete = False
            continue
        with entries:
            for entry in entries:
                looked += 1
                if looked > MAX_ENTRIES or time.monotonic() > deadline:
                    return found, False
                try:
                    # Never through a link: lstat's view of the entry itself.
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    complete = False
                    continue
                relative = prefix + entry.name
                if stat.S_ISDIR(info.st_mode):
                    if entry.name in SKIPPED_DIRS:
                        continue
                    if depth >= MAX_DEPTH:
                        complete = False
                        continue
                    pending.append((entry.path, relative + "/", depth + 1))
                elif stat.S_ISREG(info.st_mode) and not entry.name.endswith(SKIPPED_SUFFIXES):
                    found[relative] = [info.st_mtime_ns, info.st_size]
    return found, complete


def _file(name: str, mtime_ns: int, size: int) -> dict[str, object]:
    return {"name": shown_name(name), "mtime_ns": mtime_ns, "bytes": size}


def newest(files: dict[str, list[int]]) -> list[dict[str, object]]:
    """The MAX_SHOWN most recently modified files, newest first."""
    ordered = sorted(files.items(), key=lambda item: (-item[1][0], item[0]))[:MAX_SHOWN]
    return [_file(name, mtime, size) for name, (mtime, size) in ordered]


def written(before: dict[str, list[int]], after: dict[str, list[int]], complete: bool) -> list[dict[str, object]]:
    """The files created or changed between two listings (a different mtime or size), newest first, bounded. Where
    the first listing stopped at a bound, a file it did not reach counts only if it is newer than all it did: an
    old file beyond the bound is not taken for one the run wrote."""
    newest_before = max((seen[0] for seen in before.values()), default=-1)
    changed = {
        name: seen
        for name, seen in after.items()
        if before.get(name) != seen and (complete or name in before or seen[0] > newest_before)
    }
    return [{**entry, "created": entry["name"] not in before} for entry in newest(changed)]


def sha256_of(path: str, budget: list[int], follow: bool) -> tuple[str | None, int | None]:
    """A regular file's sha256 and size (None for the hash beyond the bounds); (None, None) for anything else.
    Opened without blocking (a FIFO would wait for a writer), checked to be a regular file once open."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | (0 if follow else getattr(os, "O_NOFOLLOW", 0))
    try:
        descriptor = os.open(path, flags)
    except OSError:
        return None, None
    with os.fdopen(descriptor, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            return None, None
        if info.st_size > MAX_HASHED_BYTES or info.st_size > budget[0]:
            return None, info.st_size
        digest = hashlib.sha256()
        try:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
        except OSError:
            return None, info.st_size
        budget[0] -= info.st_size
        return digest.hexdigest(), info.st_size


def top_files(workdir: str, budget: list[int], deadline: float) -> tuple[list[dict[str, object]], int]:
    """The workdir's own regular files (not links), by name, each with its sha256 where within the bounds; and how
    many more there were."""
    try:
        with os.scandir(workdir) as entries:
            names = sorted(
                entry.name
                for entry in entries
                if entry.is_file(follow_symlinks=False) and not entry.name.endswith(SKIPPED_SUFFIXES)
            )
    except OSError:
        return [], 0
    files = []
    for name in names[:MAX_TOP_FILES]:
        digest, size = (
            (None, None) if time.monotonic() > deadline else sha256_of(os.path.join(workdir, name), budget, False)
        )
        files.append({"name": shown_name(name), **({"sha256": digest} if digest else {}), "bytes": size or 0})
    return files, max(len(names) - MAX_TOP_FILES, 0)


def _git(workdir: str, *words: str) -> str | None:
    git = shutil.which("git")
    if git is None:
        return None
    # No optional locks: `git status` would otherwise refresh the index, writing into the user's repository.
    environment = {**os.environ, "GIT_OPTIONAL_LOCKS": "0", "GIT_TERMINAL_PROMPT": "0"}
    try:
        done = subprocess.run(
            [git, "-C", workdir, *words],
            capture_output=True,
            timeout=GIT_TIMEOUT_S,
            env=environment,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.decode("utf-8", "replace") if done.returncode == 0 else None


def git_state(workdir: str) -> dict[str, object]:
    """The repository's revision and whether its work tree differs from it; why not, where git cannot tell."""
    if shutil.which("git") is None:
        return {"git": "no git on the node"}
    revision = _git(workdir, "rev-parse", "--verify", "HEAD")
    if revision is None:
        return {"git": "not a git repository (or git refused it)"}
    status = _git(workdir, "status", "--porcelain", "--untracked-files=no")
    state: dict[str, object] = {"git_revision": revision.strip()}
    if status is not None:
        state["git_dirty"] = bool(status.strip())
    return state


def code_record(workdir: str, script: str | None, deadline: float) -> dict[str, object]:
    budget = [MAX_TOTAL_BYTES]
    record: dict[str, object] = {"v": 1, "kind": "code"}
    if script is not None:
        # The script the command names is hashed even through a link: its content is what ran.
        digest, size = sha256_of(os.path.join(workdir, script), budget, True)
        if size is None:
            record["script_error"] = "not a readable regular file"
        record["script"] = {"name": shown_name(script), **({"sha256": digest} if digest else {}), "bytes": size or 0}
    files, more = top_files(workdir, budget, deadline)
    record.update({"files": files, "files_more": more, **git_state(workdir)})
    return record


def emit(record: dict[str, object]) -> None:
    sys.stdout.write(f"{PREFIX} {json.dumps(record, separators=(',', ':'), ensure_ascii=True)}\n")
    sys.stdout.flush()


def main(arguments: list[str]) -> int:
    phase, workdir, *rest = arguments
    options = dict(zip(rest[::2], rest[1::2], strict=False))
    state, deadline = options.get("--state"), time.monotonic() + DEADLINE_S
    if phase == "start":
        emit(code_record(workdir, options.get("--script"), deadline))
        if state is not None:
            files, complete = listing(workdir, time.monotonic() + DEADLINE_S)
            with open(state, "w", encoding="utf-8") as kept:
                json.dump({"files": files, "complete": complete}, kept)
            emit({"v": 1, "kind": "workdir", "phase": "start", "files": newest(files), "complete": complete})
    elif phase == "end" and state is not None:
        try:
            with open(state, encoding="utf-8") as kept:
                before = json.load(kept)
            before_files, before_complete = dict(before["files"]), bool(before["complete"])
        except (OSError, ValueError, KeyError, TypeError):
            return 0  # no listing at the start: what the run wrote stays unknown
        files, complete = listing(workdir, deadline)
        emit(
            {
                "v": 1,
                "kind": "workdir",
                "phase": "end",
                "files": written(before_files, files, before_complete),
                "complete": complete,
            }
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
