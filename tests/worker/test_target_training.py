"""Time to accuracy in the worker, real processes on gloo: the warm-up's rate at every optimizer step (a resumed run
continuing it), and stop_at_target ending a run at the epoch that reaches the target, its checkpoint kept."""

from __future__ import annotations

from typing import Any

import pytest

from contract.records import EndRecord, EpochRecord, StepRecord
from contract.target import warmup_lr
from tests.worker.launch import run_worker

pytestmark = pytest.mark.torch

STEPS = 4  # optimizer steps per epoch
# A linear rule's run at twice the reference batch: 0.05 at 32 samples makes 0.1 at 64, reached over 2 epochs.
WARMUP: dict[str, Any] = {
    "model": "mlp",
    "strategy": "ddp",
    "global_batch_size": 64,
    "steps_per_epoch": STEPS,
    "step_log_every": 1,
    "lr_scaling": "linear",
    "reference_lr": 0.05,
    "reference_batch": 32,
    "lr": 0.1,
    "warmup_epochs": 2,
}


def step_rates(records) -> dict[int, float | None]:
    return {record.step: record.lr for record in records if isinstance(record, StepRecord)}


def epochs_of(records) -> list[EpochRecord]:
    return [record for record in records if isinstance(record, EpochRecord)]


def test_the_rate_rises_step_by_step_over_the_warmup_and_a_resumed_run_continues_it(tmp_path):
    straight = run_worker(tmp_path, 2, epochs=3, **WARMUP)
    assert straight.returncode == 0, straight.stderr[-2000:]
    # Step s (from 1) is optimizer step s-1 of the rule: 0.05, 0.05625, ... 0.09375 over 8 steps, then 0.1.
    expected = {step: warmup_lr(0.05, 0.1, step - 1, 2 * STEPS) for step in range(1, 3 * STEPS + 1)}
    assert step_rates(straight.records) == pytest.approx(expected, rel=1e-12)
    assert expected[1] == 0.05 and expected[5] == pytest.approx(0.075) and expected[9] == expected[12] == 0.1
    # Each epoch says the rate of its last step, so the warm-up shows in the run's history.
    assert [epoch.lr for epoch in epochs_of(straight.records)] == pytest.approx(  # type: ignore[attr-defined]
        [expected[STEPS], expected[2 * STEPS], 0.1], rel=1e-12
    )

    run_dir = tmp_path / "resumed"
    first = run_worker(tmp_path, 2, run_dir=run_dir, epochs=1, checkpoint_every=1, **WARMUP)
    assert first.returncode == 0, first.stderr[-2000:]
    rest = run_worker(tmp_path, 2, run_dir=run_dir, epochs=3, **WARMUP)
    assert rest.returncode == 0, rest.stderr[-2000:]
    assert step_rates(first.records) == pytest.approx({s: expected[s] for s in range(1, STEPS + 1)}, rel=1e-12)
    # Resumed after epoch 1: the warm-up goes on from its fifth step, not from its first.
    assert step_rates(rest.records) == pytest.approx({s: expected[s] for s in range(STEPS + 1, 13)}, rel=1e-12)


def test_without_a_rule_the_warmup_leaves_the_rate_as_it_is(tmp_path):
    run = run_worker(tmp_path, 1, epochs=2, steps_per_epoch=STEPS, step_log_every=1, lr=0.07, warmup_epochs=2)
    assert run.returncode == 0, run.stderr[-2000:]
    assert set(step_rates(run.records).values()) == {0.07}


# The synthetic data's mlp passes 0.3 accuracy within its first epochs (chance is 0.1); it never gets its validation
# loss to 1e-6.
REACHABLE = {"metric": "val_accuracy", "at_least": 0.3}
UNREACHABLE = {"metric": "val_loss", "at_most": 1e-6}
PLANNED = 8


def test_a_reached_target_stops_the_run_at_that_epoch_with_its_checkpoint(tmp_path):
    run_dir = tmp_path / "stops"
    fields: dict[str, Any] = {"epochs": PLANNED, "target": REACHABLE, "stop_at_target": True}
    run = run_worker(tmp_path, 2, run_dir=run_dir, **fields)
    assert run.returncode == 0, run.stderr[-2000:]
    epochs = epochs_of(run.records)
    reached = epochs[-1].epoch
    assert reached < PLANNED, epochs
    assert [epoch.epoch for epoch in epochs] == list(range(1, reached + 1))
    # The first epoch at the target is the last one trained.
    assert (epochs[-1].val_accuracy or 0) >= 0.3
    assert all((epoch.val_accuracy or 0) < 0.3 for epoch in epochs[:-1])
    assert sorted(path.name for path in (run_dir / "checkpoints").iterdir()) == [f"epoch-{reached}"]
    end = run.records[-1]
    assert isinstance(end, EndRecord)
    assert (end.status, end.stopped_at_target, end.target_epoch) == ("completed", True, reached)

    # Started again in its directory (a requeue after the stop), the run trains no further.
    again = run_worker(tmp_path, 2, run_dir=run_dir, **fields)
    assert again.returncode == 0, again.stderr[-2000:]
    assert [epoch.epoch for epoch in epochs_of(again.records)] == [reached]  # the checkpoint's, printed again
    assert not [record for record in again.records if isinstance(record, StepRecord)]
    end = again.records[-1]
    assert isinstance(end, EndRecord)
    assert (end.status, end.stopped_at_target, end.target_epoch) == ("completed", True, reached)


def test_an_unreached_target_runs_every_planned_epoch(tmp_path):
    run_dir = tmp_path / "runs-on"
    run = run_worker(tmp_path, 1, run_dir=run_dir, epochs=3, target=UNREACHABLE, stop_at_target=True)
    assert run.returncode == 0, run.stderr[-2000:]
    assert [epoch.epoch for epoch in epochs_of(run.records)] == [1, 2, 3]
    assert not (run_dir / "checkpoints").exists()
    end = run.records[-1]
    assert isinstance(end, EndRecord)
    assert (end.status, end.stopped_at_target, end.target_epoch) == ("completed", None, None)


def test_a_target_without_stop_at_target_changes_nothing(tmp_path):
    run = run_worker(tmp_path, 1, epochs=3, target=REACHABLE)
    assert run.returncode == 0, run.stderr[-2000:]
    assert [epoch.epoch for epoch in epochs_of(run.records)] == [1, 2, 3]
    assert (epochs_of(run.records)[0].val_accuracy or 0) >= 0.3  # reached at once, and trained on
    end = run.records[-1]
    assert isinstance(end, EndRecord) and end.stopped_at_target is None
