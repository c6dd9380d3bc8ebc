"""What every benchmark shares: launching under torchrun, reading metric records, printing tables."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contract.records import EndRecord, EpochRecord, MemoryRecord, MetricRecord, StartRecord, parse_metric_line

REPO = Path(__file__).resolve().parent.parent
# Generous: a run takes well under a minute alone, but other work on the machine can slow it several times.
TIMEOUT_S = 900.0


class BenchError(RuntimeError):
    """A run under the benchmark failed; the message says which and how."""


@dataclass
class Launch:
    records: list[MetricRecord]
    wall_s: float

    def epochs(self) -> list[EpochRecord]:
        # Keyed by epoch: a record printed again after a resume supersedes the earlier one.
        by_epoch = {r.epoch: r for r in self.records if isinstance(r, EpochRecord)}
        return [by_epoch[e] for e in sorted(by_epoch)]

    def memory(self, epoch: int = 1) -> list[MemoryRecord]:
        rows = [r for r in self.records if isinstance(r, MemoryRecord) and r.epoch == epoch]
        return sorted(rows, key=lambda r: r.rank)

    def start(self) -> StartRecord | None:
        return next((r for r in self.records if isinstance(r, StartRecord)), None)


def torchrun(
    program: Sequence[str], processes: int, *, label: str, env: dict[str, str] | None = None, cwd: Path = REPO
) -> Launch:
    """Run `torchrun --standalone` with `processes` ranks; the metric records rank 0 printed.

    `program` is what follows torchrun's own options: a script and its arguments, or `-m module ...`.
    """
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={processes}"]
    # The repository on the path, so that a script launched by file name can import worker (and benches).
    full_env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    started = time.perf_counter()
    try:
        result = subprocess.run(
            [*command, *program],
            cwd=cwd,
            env={**full_env, **(env or {})},
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise BenchError(f"{label}: no result after {TIMEOUT_S:.0f} s") from exc
    wall = time.perf_counter() - started
    records = [r for r in map(parse_metric_line, result.stdout.splitlines()) if r is not None]
    failed = next((r for r in records if isinstance(r, EndRecord) and r.status != "completed"), None)
    if result.returncode != 0 or failed is not None:
        why = failed.error if failed is not None and failed.error else f"exit status {result.returncode}"
        # The ranks' own messages, without torchrun's banner: the lines that say what went wrong.
        tail = [line for line in result.stderr.splitlines() if line.strip() and not line.startswith(("W1", "I1"))]
        raise BenchError(f"{label} failed: {why}\n    " + "\n    ".join(tail[-15:]))
    return Launch(records, wall)


@contextlib.contextmanager
def work_dir(given: Path | None) -> Iterator[Path]:
    """The directory for data and run directories: the one given (kept), else a temporary one (removed).

    Results are printed, never stored, so nothing a benchmark makes needs to outlive it.
    """
    if given is not None:
        given.mkdir(parents=True, exist_ok=True)
        yield given
        return
    with tempfile.TemporaryDirectory(prefix="scalelab-bench-") as tmp:
        yield Path(tmp)


def worker_run(spec: dict[str, Any], run_dir: Path, *, label: str, env: dict[str, str] | None = None) -> Launch:
    """`python -m worker train --spec spec.json` under torchrun, as the batch script runs it (there with srun)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    spec_path = run_dir / "spec.json"
    spec_path.write_text(json.dumps(spec))
    return torchrun(["-m", "worker", "train", "--spec", str(spec_path)], int(spec["gpus"]), label=label, env=env)


def timed_throughput(epochs: list[EpochRecord], skip: int = 1) -> float:
    """Samples per second over the epochs after the first `skip` (warm-up): all samples over all time."""
    timed = epochs[skip:]
    if not timed or any(e.samples_per_s is None for e in timed):
        raise BenchError("no timed epoch with a throughput: run more epochs than are skipped")
    samples = sum((e.samples_per_s or 0.0) * e.epoch_time_s for e in timed)
    return samples / sum(e.epoch_time_s for e in timed)


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def mib(n_bytes: float) -> str:
    return f"{n_bytes / 2**20:,.0f} MiB"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain text table: the first column left-aligned, the figures right-aligned."""
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        parts = [
            str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  ".join(parts).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(header), rule, *(line(row) for row in rows)])


def load_average() -> str:
    """The 1-minute load against the cores: other work on the machine skews every throughput measured."""
    one, _, _ = os.getloadavg()
    cores = len(os.sched_getaffinity(0))
    return f"load average {one:.1f} on {cores} cores" + (" (busy: figures are less reliable)" if one > cores else "")


def slurm_is_up() -> bool:
    """Whether the local Slurm answers and has a node that can run jobs (scripts/slurm-local up)."""
    if not shutil.which("sinfo"):
        return False
    try:
        result = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return result.returncode == 0 and any(state in result.stdout for state in ("idle", "mix", "alloc"))


class NoScheduler:
    """A scheduler that runs nothing: it numbers each submission as a job and knows no job's state, so that the
    benchmark's runs are followed by their output only (the workload is the database's)."""

    name = "bench"
    submit_concurrency = 1
    runs_as_user = False
    uses_slurm = True  # its scripts are rendered as Slurm's would be

    def __init__(self) -> None:
        self.submitted = 0

    def submit(self, script: Path, run_dir: Path, user: str | None) -> str:
        self.submitted += 1
        return str(self.submitted)

    def poll(self, jobs: Sequence[Any]) -> dict[Any, Any]:
        return {}

    def cancel(self, job_id: str, user: str | None) -> None:
        return None

    def signal(self, job_id: str, signal_name: str, user: str | None = None) -> None:
        pass

    def ping(self) -> None:
        return None

    def jobs_of(self, run_ids: Sequence[str], arrays: Any = None) -> dict[str, str]:
        return {}

    def accounting(self, jobs: Sequence[Any]) -> dict[str, Any]:
        return {}
