"""The worker as users start it: real processes, gloo, records on stdout."""

from __future__ import annotations

from typing import Any

import pytest

from contract.records import EndRecord, EpochRecord, StartRecord
from contract.rundir import TEST_ONLY_STEP_DELAY_MAX_S, TEST_ONLY_STEP_DELAY_VAR
from tests.worker.launch import run_worker
from worker.train import delay_per_step

pytestmark = pytest.mark.torch


def test_ddp_on_two_processes_trains_like_one(tmp_path):
    """Same global batch, same samples per step: DDP's averaged gradients give the single process's losses."""
    fields: dict[str, Any] = {"epochs": 2, "global_batch_size": 64, "strategy": "ddp"}
    single, pair = run_worker(tmp_path, 1, **fields), run_worker(tmp_path, 2, **fields)
    assert (single.returncode, pair.returncode) == (0, 0), pair.stderr
    one, two = single.records, pair.records

    assert isinstance(two[0], StartRecord)
    assert (two[0].world_size, two[0].backend, two[0].device) == (2, "gloo", "cpu")
    epochs_1 = [r for r in one if isinstance(r, EpochRecord)]
    epochs_2 = [r for r in two if isinstance(r, EpochRecord)]
    assert [r.epoch for r in epochs_2] == [1, 2]
    # Two ranks sum float32 gradients in another order than one process does; over two epochs that
    # drifts the losses by a few 1e-5 relative (3.3e-5 seen in CI). A wrong average or a different
    # sample order moves them by percents, so 2e-4 still tells them apart.
    for a, b in zip(epochs_1, epochs_2, strict=True):
        assert b.train_loss == pytest.approx(a.train_loss, rel=2e-4)
        assert b.val_loss == pytest.approx(a.val_loss, rel=2e-4)
        assert b.val_accuracy == pytest.approx(a.val_accuracy, abs=0.01)  # a borderline sample may flip
    first, last = epochs_2[0], epochs_2[-1]
    assert last.train_loss < first.train_loss
    assert (last.val_accuracy or 0) > 0.5  # ten classes: chance is 0.1
    # The tensors' peak (a small mlp and its data: a few MB) under the resident set, which holds the runtime.
    assert first.memory_kind == "cpu_tensors"
    assert 0 < (first.peak_memory_bytes or 0) < 10 * 2**20 < (first.peak_rss_bytes or 0)
    assert (first.samples_per_s or 0) > 0
    end = two[-1]
    assert isinstance(end, EndRecord)
    assert end == EndRecord(status="completed", total_time_s=end.total_time_s)


def test_launch_that_does_not_match_the_spec_fails_with_a_reason(tmp_path):
    run = run_worker(tmp_path, 1, gpus=2, global_batch_size=64)
    records = run.records
    assert run.returncode != 0
    assert "the spec asks for 2 processes (data 2 x tensor 1 x pipeline 1) but 1 were launched" in run.stderr
    assert isinstance(records[-1], EndRecord)
    assert records[-1].status == "failed"


def test_the_test_only_step_delay_is_read_bounded_and_off_unless_set(monkeypatch):
    """The end-to-end regression test slows a run with it; anything but a number in (0, max] leaves it off."""
    monkeypatch.delenv(TEST_ONLY_STEP_DELAY_VAR, raising=False)
    assert delay_per_step() == 0.0
    for given, read in (("0.5", 0.5), ("nonsense", 0.0), ("-1", 0.0), ("inf", 0.0), ("nan", 0.0)):
        monkeypatch.setenv(TEST_ONLY_STEP_DELAY_VAR, given)
        assert delay_per_step() == read, given
    monkeypatch.setenv(TEST_ONLY_STEP_DELAY_VAR, str(TEST_ONLY_STEP_DELAY_MAX_S + 1))
    assert delay_per_step() == 0.0
