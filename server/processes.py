"""Processes of this host, by their ids."""

from __future__ import annotations

import os
from pathlib import Path


def _stat_fields(stat_file: Path) -> list[str]:
    """A /proc stat line's fields after the command name, which may hold spaces: state, ppid, pgrp, session, ..."""
    return stat_file.read_text().rpartition(")")[2].split()


def _of_session(session: int) -> dict[int, tuple[int, int]]:
    """The processes of a session: each one's parent and process group, by its id."""
    found: dict[int, tuple[int, int]] = {}
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = _stat_fields(stat_file)
        except OSError:  # ended meanwhile
            continue
        if len(fields) > 3 and fields[3] == str(session):
            found[int(stat_file.parent.name)] = (int(fields[1]), int(fields[2]))
    return found


def process_groups_of_session(session: int) -> set[int]:
    """The process groups of the processes in a session: what a signal must reach to stop all of a job that leads
    its own session, since a launcher in it (`timeout`) puts its command in a group of its own."""
    return {group for _, group in _of_session(session).values()}


def childless_of_session(session: int) -> set[int]:
    """The processes of a session that have no child of their own: a local job's training processes, below the
    shells and launchers (`timeout`, torchrun) that started them."""
    processes = _of_session(session)
    return set(processes) - {parent for parent, _ in processes.values()}


def process_runs(pid: int) -> bool:
    """Whether a process of that id runs on this host: not ended, and not a zombie waiting to be reaped (a killed
    uvicorn worker stays one until its parent notices)."""
    try:
        state = _stat_fields(Path(f"/proc/{pid}/stat"))[0:1]
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return state not in (["Z"], ["X"])
