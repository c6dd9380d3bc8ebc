"""The one way the service opens a file a job wrote: every reader of a run's files (its output, the log page, the
failure message, generations, checkpoints, scripts) goes through here.

A run's directory is written by its job, and on a shared instance by the job's own user: a stranger. What it holds
may be a link to a file the service can read and its user cannot (another run's output, /etc/shadow), a FIFO that
blocks whoever opens it, a device that never ends, or a file swapped for a link between a check and an open. So:

- the run's directory is opened without following a link (its parent, the runs directory, is the operator's);
- the file is opened relative to that open directory, without following a link and without blocking (a FIFO opens
  at once, and is then refused);
- what is checked is the OPEN descriptor (fstat): a regular file, owned by the run's owner where jobs run as their
  users. A swap after the check cannot change what the descriptor reads;
- every read is bounded by its caller, and never more than MAX_READ_BYTES.

Anything else is `Unreadable`, whose message says what was found, for the run's user. This module knows nothing of
the server or the database: the callers say which run, whose, and what to do about a refusal.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

# No caller reads more than this at once (the largest: an inference run's generations, 16 MiB).
MAX_READ_BYTES = 32 * 1024 * 1024

# The owner of a run whose user has no account on this host: no file has this uid, so none of the run's is read.
NOBODY = -1

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class Unreadable(ValueError):
    """A file of a run that is not a regular file of the run's own directory, or not its owner's; the message says
    what it is instead."""


def _kind(mode: int) -> str:
    """What a file is, in words."""
    for test, name in (
        (stat.S_ISREG, "a file"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a device"),
        (stat.S_ISBLK, "a device"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISLNK, "a link"),
    ):
        if test(mode):
            return name
    return "a special file"


def _what(name: str, directory: int, failed: OSError) -> str:
    """What the entry that could not be opened is: said from its own metadata, never followed."""
    try:
        return _kind(os.stat(name, dir_fd=directory, follow_symlinks=False).st_mode)
    except OSError:
        return f"unreadable ({failed.strerror})"


def _refusal(name: str, why: str) -> Unreadable:
    return Unreadable(f"{name} of this run is not a file in its directory: it is {why}")


def _check_owner(name: str, info: os.stat_result, owner_uid: int | None) -> None:
    if owner_uid is not None and info.st_uid != owner_uid:
        whose = "who has no account on this host" if owner_uid == NOBODY else f"uid {owner_uid}"
        raise Unreadable(
            f"{name} of this run is not a file in its directory: it belongs to uid {info.st_uid}, not to the run's "
            f"owner ({whose})"
        )


@contextlib.contextmanager
def open_dir(run_dir: Path | str, owner_uid: int | None = None, below: str | None = None) -> Iterator[int | None]:
    """The run's directory, open (a descriptor), or None where it does not exist (yet); `below`: a directory in it,
    opened the same way, instead. Neither may be a link; where `owner_uid` is given, both must be that user's.

    The run directory's parent (the runs directory) is opened as its path says: it is the operator's, and only the
    components below it are the job's."""
    run_dir = Path(run_dir)
    names = [run_dir.name, *([below] if below else [])]
    with contextlib.ExitStack() as stack:
        try:
            parent = os.open(run_dir.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except (FileNotFoundError, NotADirectoryError):
            yield None
            return
        stack.callback(os.close, parent)
        at = parent
        for name in names:
            shown = "the run's directory" if at == parent else f"{name} (a directory)"
            try:
                fd = os.open(name, _DIR_FLAGS, dir_fd=at)
            except FileNotFoundError:
                yield None
                return
            except OSError as exc:
                # O_DIRECTORY is checked first: a link to a directory fails as "not a directory", like any other
                # file; what it is, is only said (never followed).
                raise Unreadable(f"{shown} is {_what(name, at, exc)}, not a directory of its own") from None
            stack.callback(os.close, fd)
            _check_owner(shown, os.fstat(fd), owner_uid)
            at = fd
        yield at


@dataclass(frozen=True)
class RunFile:
    """A regular file of a run, open: what its descriptor says it is, and bounded reads of it."""

    fd: int
    size: int
    identity: str  # "device:inode": which file this is, whatever its name says later

    def read(self, offset: int, limit: int) -> bytes:
        """At most `limit` bytes from `offset` (fewer at the end of the file)."""
        if limit > MAX_READ_BYTES:
            raise ValueError(f"a read of a run's file takes at most {MAX_READ_BYTES} bytes, not {limit}")
        return os.pread(self.fd, limit, offset) if limit > 0 else b""


def identity_of(info: os.stat_result) -> str:
    return f"{info.st_dev}:{info.st_ino}"


@contextlib.contextmanager
def open_file(
    run_dir: Path | str, name: str, owner_uid: int | None = None, below: str | None = None
) -> Iterator[RunFile | None]:
    """The run's file `name` (in its directory `below`, if given), open; None where it or the run's directory does
    not exist (yet). Raises Unreadable for anything but a regular file of the run's directory (and its owner's,
    where `owner_uid` is given)."""
    with open_dir(run_dir, owner_uid, below) as directory:
        if directory is None:
            yield None
            return
        try:
            fd = os.open(name, _FILE_FLAGS, dir_fd=directory)
        except FileNotFoundError:
            yield None
            return
        except OSError as exc:
            # A link (ELOOP), a socket (ENXIO), or a file the service may not read (EACCES).
            what = _what(name, directory, exc)
            if what == "a file":
                raise Unreadable(f"{name} of this run cannot be opened: {exc.strerror}") from None
            raise _refusal(name, what) from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise _refusal(name, _kind(info.st_mode))
            _check_owner(name, info, owner_uid)
            yield RunFile(fd, info.st_size, identity_of(info))
        finally:
            os.close(fd)


def read_file(run_dir: Path | str, name: str, limit: int, owner_uid: int | None = None) -> bytes | None:
    """At most `limit` bytes from the start of the run's file; None where it does not exist (yet)."""
    with open_file(run_dir, name, owner_uid) as found:
        return None if found is None else found.read(0, limit)


def directories_in(run_dir: Path | str, below: str, owner_uid: int | None = None) -> list[str]:
    """The names of the directories (not links) in the run's directory `below`; none where it does not exist."""
    with open_dir(run_dir, owner_uid, below) as directory:
        if directory is None:
            return []
        with os.scandir(directory) as entries:
            return [entry.name for entry in entries if entry.is_dir(follow_symlinks=False)]
