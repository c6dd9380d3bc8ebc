"""Starting the worker as users do, with torchrun, and reading its records."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contract.records import MetricRecord, StepRecord, parse_metric_line
from contract.spec import RunKind
from tests.factories import spec


@dataclass
class WorkerRun:
    returncode: int
    records: list[MetricRecord]
    stderr: str

    def of_kind(self, kind: str) -> list[Any]:
        return [record for record in self.records if record.kind == kind]

    def step_losses(self) -> list[float]:
        return [record.train_loss for record in self.records if isinstance(record, StepRecord)]


def worker_command(run_dir: Path, processes: int, **fields: Any) -> list[str]:
    """Write the spec into the run directory (checkpoints go beside it) and return the torchrun command."""
    run_dir.mkdir(parents=True, exist_ok=True)
    spec_path = run_dir / "spec.json"
    run_spec = spec(**{"gpus": processes, **fields})
    spec_path.write_text(run_spec.model_dump_json())
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={processes}"]
    command = "infer" if run_spec.kind is RunKind.inference else "train"
    return [*launcher, "-m", "worker", command, "--spec", str(spec_path)]


def parse_records(stdout: str) -> list[MetricRecord]:
    return [r for r in map(parse_metric_line, stdout.splitlines()) if r is not None]


def run_worker(
    tmp_path: Path,
    processes: int,
    timeout_s: float = 300,
    run_dir: Path | None = None,
    env: dict[str, str] | None = None,
    **fields: Any,
) -> WorkerRun:
    """One run in a fresh directory under tmp_path, unless run_dir names one (to resume in it)."""
    if run_dir is None:
        run_dir = Path(tempfile.mkdtemp(prefix="run-", dir=tmp_path))
    result = subprocess.run(
        worker_command(run_dir, processes, **fields),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
        env={**os.environ, **(env or {})},
    )
    return WorkerRun(result.returncode, parse_records(result.stdout), result.stderr)
