"""Slurm jobs that never start: an `sbatch` that adds --hold, and cancelling the held jobs once they are counted.

The submission benchmark, the load benchmark and the tests that submit many jobs to the shared Slurm use them, so
that what they submit neither loads the cores nor outlives them.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

SLURM_TIMEOUT_S = 60.0
# States a job may still be in before Slurm has let it go.
LIVE_STATES = frozenset({"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING"})


class SlurmCommandFailed(RuntimeError):
    """A Slurm command failed; the message holds what it said."""


def hold_wrapper(bin_dir: Path, calls: Path | None = None) -> dict[str, str]:
    """An `sbatch` first on PATH that adds --hold (and, given `calls`, notes each call's arguments there); the
    environment that uses it.

    sbatch 22.05 reads no environment variable for --hold, and scalelab's command line is not ours to change here;
    held jobs never start, so they load neither the cores nor the controller.
    """
    real = shutil.which("sbatch")
    if real is None:
        raise SlurmCommandFailed("sbatch is not on PATH")
    bin_dir.mkdir(parents=True, exist_ok=True)
    wrapper = bin_dir / "sbatch"
    note = f'echo "$*" >>{shlex.quote(str(calls))}\n' if calls is not None else ""
    wrapper.write_text(f'#!/bin/sh\n{note}exec {shlex.quote(real)} --hold "$@"\n')
    wrapper.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}


def queue(job_ids: Sequence[str] = ()) -> list[tuple[str, str, str]]:
    """(id, name, state) of these jobs, or of every job slurmctld remembers; forgotten ones are left out."""
    argv = ["squeue", "--noheader", "--states=all", "--format=%i|%j|%T"]
    if job_ids:
        # Only ours: the controller is shared, and may remember thousands of other jobs.
        argv.append(f"--jobs={','.join(job_ids)}")
    result = subprocess.run(argv, capture_output=True, text=True, timeout=SLURM_TIMEOUT_S, check=False)
    if result.returncode != 0 and not (job_ids and "Invalid job id" in result.stderr):
        raise SlurmCommandFailed(f"squeue failed: {result.stderr.strip()}")
    rows = (line.split("|", 2) for line in result.stdout.splitlines() if line.count("|") == 2)
    return [(i, n, s) for i, n, s in rows]


def cancel(job_ids: Sequence[str]) -> None:
    """Cancel these jobs and wait until Slurm has let every one of them go."""
    if not job_ids:
        return
    # scancel takes many ids at once; chunks keep the command line within bounds for thousands of jobs.
    for start in range(0, len(job_ids), 500):
        chunk = list(job_ids[start : start + 500])
        subprocess.run(["scancel", *chunk], capture_output=True, timeout=SLURM_TIMEOUT_S, check=False)
    deadline = time.monotonic() + SLURM_TIMEOUT_S
    while True:
        live = [
            job
            for start in range(0, len(job_ids), 500)
            for job in queue(job_ids[start : start + 500])
            if job[2] in LIVE_STATES
        ]
        if not live:
            return
        if time.monotonic() > deadline:
            raise SlurmCommandFailed(f"{len(live)} jobs still live {SLURM_TIMEOUT_S:.0f} s after scancel")
        time.sleep(0.2)


def cancel_jobs_of_runs(runs_dir: Path) -> None:
    """Cancel any live job of the runs under `runs_dir` (named scalelab-<run id>), e.g. ones an error left behind."""
    names = {f"scalelab-{run_dir.name}" for run_dir in runs_dir.iterdir()} if runs_dir.is_dir() else set()
    if names:
        cancel([job_id for job_id, name, state in queue() if name in names and state in LIVE_STATES])
