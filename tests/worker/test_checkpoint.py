"""Checkpoint, stop, resume: the resumed run continues exactly where the uninterrupted one went."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from contract.records import EndRecord, EpochRecord, ResumeRecord
from contract.spec import RunSpec
from tests.worker.launch import parse_records, run_worker, worker_command

pytestmark = pytest.mark.torch

FIELDS: dict[str, Any] = {
    "model": "mlp",
    "strategy": "fsdp",
    "global_batch_size": 32,
    "steps_per_epoch": 10,
    "step_log_every": 1,
}


def epochs_of(records) -> list[EpochRecord]:
    return [record for record in records if isinstance(record, EpochRecord)]


def test_resume_reproduces_the_uninterrupted_run(tmp_path):
    straight = run_worker(tmp_path, 2, epochs=3, **FIELDS)
    assert straight.returncode == 0, straight.stderr[-2000:]

    run_dir = tmp_path / "resumed"
    first = run_worker(tmp_path, 2, run_dir=run_dir, epochs=1, checkpoint_every=1, **FIELDS)
    assert first.returncode == 0, first.stderr[-2000:]
    assert (run_dir / "checkpoints" / "epoch-1").is_dir()
    rest = run_worker(tmp_path, 2, run_dir=run_dir, epochs=3, checkpoint_every=1, **FIELDS)
    assert rest.returncode == 0, rest.stderr[-2000:]

    assert rest.of_kind("resume") == [ResumeRecord(epoch=1)]
    # The checkpoint's own epoch is printed again before the resume record, in case its first print was lost.
    reprinted, *trained = epochs_of(rest.records)
    assert reprinted == epochs_of(first.records)[0]
    assert rest.records.index(reprinted) < rest.records.index(ResumeRecord(epoch=1))
    assert [record.epoch for record in trained] == [2, 3]
    expected = straight.step_losses()
    assert first.step_losses() + rest.step_losses() == pytest.approx(expected, rel=1e-6)
    assert [e.val_loss for e in trained] == pytest.approx(
        [e.val_loss for e in epochs_of(straight.records)][1:], rel=1e-6
    )


def test_signal_checkpoints_and_stops_then_the_next_start_resumes(tmp_path):
    """What Slurm does before a time limit (--signal=USR1@...): the worker saves, stops, and a requeue resumes."""
    run_dir = tmp_path / "signalled"
    command = worker_command(run_dir, 2, epochs=50, **FIELDS)
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None
    for line in process.stdout:
        if '"kind":"epoch"' in line:
            break
    ranks = subprocess.run(["pgrep", "-P", str(process.pid)], capture_output=True, text=True).stdout.split()
    for pid in ranks:  # Slurm signals every task; torchrun itself would die of USR1
        subprocess.run(["kill", f"-{signal.SIGUSR1.value}", pid], check=True)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode != 0
    records = parse_records(stdout)
    end = records[-1]
    assert isinstance(end, EndRecord) and end.status == "interrupted", stderr[-2000:]
    saved = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert len(saved) == 1 and saved[0].startswith("epoch-")
    stopped_after = int(saved[0].removeprefix("epoch-"))

    resumed = subprocess.run(
        worker_command(run_dir, 2, epochs=stopped_after + 1, **FIELDS), capture_output=True, text=True, timeout=300
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    records = parse_records(resumed.stdout)
    assert ResumeRecord(epoch=stopped_after) in records
    assert [record.epoch for record in epochs_of(records)] == [stopped_after, stopped_after + 1]


def test_a_signal_during_start_up_is_kept_until_the_first_epoch_ends(tmp_path):
    """Slurm may signal while torch is still importing: the worker must not die of it, but save and stop."""
    run_dir = tmp_path / "early"
    run_dir.mkdir()
    spec = RunSpec.model_validate({**FIELDS, "strategy": "single", "gpus": 1, "epochs": 50})
    (run_dir / "spec.json").write_text(spec.model_dump_json())
    process = subprocess.Popen(
        [sys.executable, "-m", "worker", "train", "--spec", str(run_dir / "spec.json")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    catches_usr1 = 1 << (signal.SIGUSR1 - 1)
    deadline = time.monotonic() + 30
    while not int(_status_field(process.pid, "SigCgt"), 16) & catches_usr1:  # the handler is in place
        assert time.monotonic() < deadline and process.poll() is None
        time.sleep(0.01)
    assert "torch" not in Path(f"/proc/{process.pid}/maps").read_text()  # torch is not even loaded yet
    process.send_signal(signal.SIGUSR1)
    stdout, stderr = process.communicate(timeout=300)
    assert process.returncode == 75, stderr[-2000:]
    records = parse_records(stdout)
    assert [record.epoch for record in epochs_of(records)] == [1]
    assert isinstance(records[-1], EndRecord) and records[-1].status == "interrupted"
    assert (run_dir / "checkpoints" / "epoch-1").is_dir()


def _status_field(pid: int, name: str) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key == name:
            return value.strip()
    raise KeyError(name)
