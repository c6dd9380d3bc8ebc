"""Every thread's Python stack on demand, for your own training program: what scalelab's hang watchdog reads.

When a run prints no metric record for much longer than its own pace, scalelab asks every rank of the job for its
stacks (Slurm signals each task with SIGUSR2) and names the rank that is not where the others are. A program
answers once it has called `install()`, on every rank, before `torch.distributed.init_process_group`::

    from contract import stacks

    stacks.install()  # every rank: SIGUSR2 appends this rank's stacks to <run dir>/stacks/rank-N.txt

The dump is written by Python's faulthandler from C, so it comes even while the main thread is blocked inside a
collective (an all-reduce waiting for a peer), where a Python signal handler would never run. Standard library
only, like contract.metrics. Without a run directory (SCALELAB_RUN_DIR, which scalelab's batch script sets, or the
`run_dir` given) nothing is installed, so the program runs unchanged elsewhere.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
from pathlib import Path
from typing import IO

from contract.metrics import rank as own_rank
from contract.rundir import RUN_DIR_VAR, STACKS_DIR, STACKS_SIGNAL, stacks_name

# The open dump file: faulthandler writes to its descriptor, which must stay open for the process's life.
_installed: IO[str] | None = None


def install(run_dir: str | os.PathLike[str] | None = None, rank: int | None = None) -> Path | None:
    """Dump every thread's stack to this rank's file in the run directory on SIGUSR2; the file, or None where no
    run directory is known or its file cannot be made there (nothing installed, said on stderr). `rank`: this
    process's (default: RANK, else SLURM_PROCID, else 0). Installing again replaces the file; the signal's earlier
    handler is not called (a plain SIGUSR2 would kill)."""
    global _installed
    where = run_dir if run_dir is not None else os.environ.get(RUN_DIR_VAR)
    if not where:
        return None
    folder = Path(where) / STACKS_DIR
    path = folder / stacks_name(own_rank() if rank is None else rank)
    try:
        folder.mkdir(exist_ok=True)
        # Appended: a second stall's dump follows the first's, and the reader takes the last.
        dump = path.open("a", encoding="utf-8")
    except OSError as exc:
        # A run directory this process may not write (a container's user mapped to another uid): the run goes on
        # without stacks, and the watchdog, finding no file for this rank, cancels a hang without signalling it.
        sys.stderr.write(f"scalelab: no stacks on SIG{STACKS_SIGNAL} for this rank: {path}: {exc.strerror}\n")
        return None
    faulthandler.register(getattr(signal, f"SIG{STACKS_SIGNAL}"), file=dump, all_threads=True, chain=False)
    if _installed is not None:
        _installed.close()
    _installed = dump
    return path
