"""Stopping at the target on the real local Slurm: a weak-scaling digits experiment with a linear learning-rate rule
and a warm-up, whose runs end completed at the epoch that reaches 90 % accuracy instead of their ten planned ones,
each with the rate it used in its spec, its checkpoint of that epoch, and an end record that says it stopped there;
and whose comparison rows take them as complete, stopped at the target."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.runs import output_of, wait_until_ended
from tests.e2e.test_lifecycle import metrics_of, submit

pytestmark = [pytest.mark.slurm, pytest.mark.torch]

PLANNED = 10
# The digits mlp passes 0.9 at its second epoch or so (chance is 0.1), far short of ten.
REQUEST: dict[str, Any] = {
    "name": "digits to 90 %, stopping there",
    "base": {"model": "mlp", "dataset": "digits", "strategy": "ddp", "epochs": PLANNED, "global_batch_size": 64,
             "lr": 0.05, "lr_scaling": "linear", "warmup_epochs": 1, "stop_at_target": True},
    "grid": {"gpus": [1, 2]},
    "scaling": "weak",
    "target": {"metric": "val_accuracy", "at_least": 0.9},
    "resources": {"nodes": 1, "time_limit": "00:05:00"},
}  # fmt: skip


def test_a_stop_at_target_run_ends_completed_at_the_target_with_its_checkpoint(slurm_server, tmp_path):
    experiment = submit(slurm_server, REQUEST)
    runs = experiment["runs"]
    # The rule scaled each run's rate from the grid's smallest global batch, and the spec keeps both.
    assert [(run["spec"]["global_batch_size"], run["spec"]["lr"]) for run in runs] == [(64, 0.05), (128, 0.1)]
    assert {(run["spec"]["reference_lr"], run["spec"]["reference_batch"]) for run in runs} == {(0.05, 64)}
    for run in runs:
        ended = wait_until_ended(slurm_server, run["id"], tmp_path / "server.log", timeout_s=420)
        assert (ended["state"], ended["exit_code"]) == ("completed", "0:0"), output_of(slurm_server, run["id"])
        records = metrics_of(slurm_server, run["id"])
        epochs = [record for record in records if record["kind"] == "epoch"]
        reached = epochs[-1]["epoch"]
        assert [epoch["epoch"] for epoch in epochs] == list(range(1, reached + 1))
        assert reached < PLANNED, epochs
        assert epochs[-1]["val_accuracy"] >= 0.9 > max([0.0] + [epoch["val_accuracy"] for epoch in epochs[:-1]])
        # The warm-up rises from the reference rate to the run's own over the first epoch, which then holds.
        assert 0.05 <= epochs[0]["lr"] <= run["spec"]["lr"]
        assert [epoch["lr"] for epoch in epochs[1:]] == pytest.approx([run["spec"]["lr"]] * (reached - 1))
        (end,) = [record for record in records if record["kind"] == "end"]
        assert (end["status"], end["stopped_at_target"], end["target_epoch"]) == ("completed", True, reached)
        output = output_of(slurm_server, run["id"])
        assert f"target val_accuracy >= 0.9 reached at epoch {reached} of {PLANNED}: stopping" in output
        # The trained model is kept, where an inference run would load it.
        checkpoints = Path(ended["run_dir"]) / "checkpoints"
        assert sorted(path.name for path in checkpoints.iterdir()) == [f"epoch-{reached}"]
    # The comparison takes a run stopped at its target as complete, and times it to the target.
    rows = httpx.get(f"{slurm_server}/api/experiments/{experiment['id']}/compare", timeout=30).json()["data"]
    for row in rows:
        assert (row["stopped_at_target"], row["target_reached"]) == (True, True), row
        assert row["epochs_to_target"] == row["epochs_done"] < PLANNED
        assert row["time_to_target_s"] > 0
        assert not {"incomplete", "target_not_reached", "unequal_work"} & {flag["code"] for flag in row["flags"]}
