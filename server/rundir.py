"""The run directory: the only channel between the server and a job (compute nodes share its file system)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

SPEC_FILE = "spec.json"
SCRIPT_FILE = "job.sbatch"
OUTPUT_FILE = "output.log"


def write_atomic(path: Path, text: str, mode: int = 0o644) -> None:
    """Readers never see a half-written file: write beside it, then rename over."""
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    tmp.chmod(mode)
    tmp.replace(path)


def create(runs_dir: Path, run_id: str) -> Path:
    """A new, empty directory for one run; refuses to reuse one."""
    runs_dir.mkdir(parents=True, exist_ok=True)
    run_dir = runs_dir / run_id
    run_dir.mkdir()
    return run_dir


def remove(run_dir: Path) -> None:
    shutil.rmtree(run_dir, ignore_errors=True)
