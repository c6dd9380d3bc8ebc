"""The example program (examples/programs/train_ddp.py) as a user runs it before scalelab: alone, and under torchrun
with scalelab's helper out of reach, where it formats its metric lines itself; both must read as the same records."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from contract.records import EpochRecord, parse_metric_line
from tests.factories import ROOT

pytestmark = pytest.mark.torch

EXAMPLE = ROOT / "examples" / "programs"
# contract.metrics made unimportable, as in a copy of the script on a machine without scalelab.
WITHOUT_HELPER = (
    "import runpy, sys; sys.modules['contract.metrics'] = None; runpy.run_path('train_ddp.py', run_name='__main__')"
)


def epochs_printed(command: list[str]) -> tuple[list[EpochRecord], str]:
    env = {name: value for name, value in os.environ.items() if name not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    result = subprocess.run(command, cwd=EXAMPLE, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    records = [parse_metric_line(line) for line in result.stdout.splitlines()]
    epochs = [record for record in records if isinstance(record, EpochRecord)]
    assert len(epochs) == len([record for record in records if record is not None]), result.stdout
    return epochs, result.stdout


def check(epochs: list[EpochRecord]) -> None:
    assert [record.epoch for record in epochs] == [1, 2]
    for record in epochs:
        assert record.val_loss is not None and record.samples_per_s and record.peak_memory_bytes
        # The program's own metric stays with the record, as a number, for the dashboard.
        assert record.model_extra is not None and record.model_extra["grad_norm"] > 0
    assert epochs[-1].val_accuracy is not None and epochs[-1].val_accuracy > 0.8
    assert epochs[-1].train_loss < epochs[0].train_loss


def test_alone_it_trains_and_reports_each_epoch():
    epochs, output = epochs_printed([sys.executable, "train_ddp.py", "--epochs", "2"])
    check(epochs)
    assert "training on 1 process(es)" in output


def test_under_torchrun_without_scalelab_rank_0_alone_prints_the_same_records():
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "--no-python",
               sys.executable, "-c", WITHOUT_HELPER, "--epochs", "2"]  # fmt: skip
    epochs, output = epochs_printed(command)
    check(epochs)  # once per epoch: rank 1 printed nothing
    assert "training on 2 process(es)" in output
