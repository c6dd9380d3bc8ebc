"""The batch script of one run: a pure function of the run spec and where and how it runs."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from server.rundir import OUTPUT_FILE, SPEC_FILE
from worker.spec import RunSpec

# #SBATCH lines are parsed by sbatch, not by a shell: only values of this alphabet may go there.
_DIRECTIVE_VALUE = re.compile(r"^[A-Za-z0-9_./:+-]+$")


@dataclass(frozen=True)
class BatchJob:
    """Where and how a run's processes start."""

    run_id: str
    run_dir: Path
    time_limit: str
    worker_python: Path
    launcher: Literal["srun", "local"] = "srun"
    partition: str | None = None


def _directive(option: str, value: object) -> str:
    text = str(value)
    if not _DIRECTIVE_VALUE.match(text):
        raise ValueError(f"unsafe value for #SBATCH --{option}: {text!r}")
    return f"#SBATCH --{option}={text}"


def _seconds(time_limit: str) -> int:
    days, _, clock = time_limit.rpartition("-")
    hours, minutes, seconds = (int(part) for part in clock.split(":"))
    return int(days or 0) * 86400 + hours * 3600 + minutes * 60 + seconds


def _worker_args(spec_path: Path) -> list[str]:
    return ["-m", "worker", "train", "--spec", str(spec_path)]


def render_script(spec: RunSpec, job: BatchJob) -> str:
    """Every value is typed and quoted; nothing the user typed as free text reaches the script."""
    spec_path = job.run_dir / SPEC_FILE
    directives = [
        _directive("job-name", f"scalelab-{job.run_id}"),
        _directive("nodes", spec.nodes),
        _directive("ntasks-per-node", spec.gpus_per_node),
        _directive("time", job.time_limit),
        _directive("output", job.run_dir / OUTPUT_FILE),
        # A requeued job appends, so the byte offsets the server stored stay valid.
        _directive("open-mode", "append"),
    ]
    if job.partition:
        directives.append(_directive("partition", job.partition))
    worker = shlex.join([str(job.worker_python), *_worker_args(spec_path)])
    if job.launcher == "srun":
        launch = [
            "# torch.distributed meets at the allocation's first host, on a port that differs per job.",
            'mapfile -t hosts < <(scontrol show hostnames "$SLURM_JOB_NODELIST")',
            'export MASTER_ADDR="${hosts[0]}"',
            "export MASTER_PORT=$((20000 + SLURM_JOB_ID % 40000))",
            "",
            f"srun --kill-on-bad-exit=1 --ntasks-per-node={spec.gpus_per_node} {worker}",
        ]
    else:
        torchrun = [str(job.worker_python), "-m", "torch.distributed.run", "--standalone"]
        command = ["timeout", str(_seconds(job.time_limit)), *torchrun, f"--nproc-per-node={spec.gpus}"]
        launch = [
            "# No Slurm here: torchrun starts the processes on this machine; timeout enforces the time limit.",
            f"exec {shlex.join([*command, *_worker_args(spec_path)])}",
        ]
    lines = [
        "#!/bin/bash",
        f"# scalelab run {job.run_id}: rendered by scalelab; to change it, submit a new run.",
        *directives,
        "set -euo pipefail",
        "export PYTHONUNBUFFERED=1",
        "",
        *launch,
    ]
    return "\n".join(lines) + "\n"
