"""Processes of this host, by their ids."""

from __future__ import annotations

import os
from pathlib import Path


def process_runs(pid: int) -> bool:
    """Whether a process of that id runs on this host: not ended, and not a zombie waiting to be reaped (a killed
    uvicorn worker stays one until its parent notices)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
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
    state = stat.rpartition(")")[2].split()[0:1]  # the field after the command name, which may hold spaces
    return state not in (["Z"], ["X"])
