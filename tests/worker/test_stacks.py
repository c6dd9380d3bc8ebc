"""The worker's answer to the hang watchdog: SIGUSR2 makes every rank dump its stacks to a file of its own, and the
run goes on."""

from __future__ import annotations

import signal
import subprocess

import pytest

from contract.records import EndRecord
from contract.rundir import STACKS_DIR, stacks_name
from tests.worker.launch import parse_records, worker_command

pytestmark = pytest.mark.torch


def test_usr2_dumps_each_ranks_stacks_and_the_run_continues(tmp_path):
    run_dir = tmp_path / "run"
    fields = {"model": "mlp", "global_batch_size": 32, "steps_per_epoch": 10, "step_log_every": 1}
    process = subprocess.Popen(
        worker_command(run_dir, 2, epochs=2, **fields), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    for line in process.stdout:
        if '"kind":"step"' in line:
            break
    ranks = subprocess.run(["pgrep", "-P", str(process.pid)], capture_output=True, text=True).stdout.split()
    assert len(ranks) == 2
    for pid in ranks:  # as Slurm signals every task of the step (torchrun itself would die of USR2)
        subprocess.run(["kill", f"-{signal.SIGUSR2.value}", pid], check=True)
    rest, stderr = process.communicate(timeout=300)
    assert process.returncode == 0, stderr[-3000:]
    end = parse_records(rest)[-1]
    assert isinstance(end, EndRecord) and end.status == "completed", stderr[-3000:]
    for rank in (0, 1):
        dump = (run_dir / STACKS_DIR / stacks_name(rank)).read_text()
        assert "(most recent call first)" in dump, dump
        assert "worker/" in dump, dump  # the main thread's frames in the worker's own code
