"""Time to accuracy on the real local Slurm: the digits MLP on 1 and 2 processes with a validation-accuracy target it
reaches in its first epochs (0.88 after one, 0.95 after two on one process with this seed), whose compare rows say
when each run reached it and after how much training, and whose scaling scores the points by time to target with
an effective speed-up."""

from __future__ import annotations

import httpx
import pytest

from tests.e2e.runs import wait_until_ended
from tests.e2e.test_lifecycle import submit

pytestmark = [pytest.mark.slurm]

TARGET = {"metric": "val_accuracy", "at_least": 0.9}


def test_a_target_experiment_reports_time_to_target_and_effective_speedup(slurm_server, tmp_path):
    experiment = submit(
        slurm_server,
        {
            "name": "digits to 90 %",
            "base": {"model": "mlp", "dataset": "digits", "epochs": 6, "global_batch_size": 64, "lr": 0.05},
            "grid": {"strategy": ["ddp"], "gpus": [1, 2]},
            "target": TARGET,
            "isolation": "shared",
            "resources": {"nodes": 1, "time_limit": "00:10:00"},
        },
    )
    for run in experiment["runs"]:
        assert run["spec"]["target"] == {**TARGET, "at_most": None}
        wait_until_ended(slurm_server, run["id"], tmp_path / "server.log")
    rows = httpx.get(f"{slurm_server}/api/compare", params={"experiment_id": experiment["id"]}, timeout=30).json()
    for row in rows["data"]:
        assert row["state"] == "completed", row
        assert row["target_reached"] is True and 1 <= row["epochs_to_target"] <= 6
        assert row["time_to_target_s"] > 0  # the sum of its epochs' times to it: checked against its history below
        assert row["effective_speedup"] is not None and row["statistical_efficiency"] is not None
        assert not row["stopped_at_target"]
        assert "target_not_reached" not in {flag["code"] for flag in row["flags"]}
    histories = httpx.get(
        f"{slurm_server}/api/compare", params={"experiment_id": experiment["id"], "history": "true"}, timeout=30
    ).json()["histories"]
    for row in rows["data"]:
        epochs = histories[row["run_id"]][: row["epochs_to_target"]]
        assert epochs[-1]["val_accuracy"] >= 0.9 and all(epoch["val_accuracy"] < 0.9 for epoch in epochs[:-1])
        assert row["time_to_target_s"] == pytest.approx(sum(epoch["epoch_time_s"] for epoch in epochs))

    (series,) = httpx.get(f"{slurm_server}/api/experiments/{experiment['id']}/scaling", timeout=30).json()["series"]
    ttt = series["time_to_target"]
    assert ttt["target"]["metric"] == "val_accuracy" and ttt["baseline_gpus"] == 1
    assert [(point["gpus"], point["runs"], point["reached"], point["scoring"]) for point in ttt["points"]] == [
        (1, 1, 1, "mean"),
        (2, 1, 1, "mean"),
    ]
    two = ttt["points"][1]
    assert two["effective_speedup"] > 0 and two["throughput_speedup"] > 0 and two["statistical_efficiency"] > 0
    # Epochs of well under a second are too short to time (too_short): where the baseline's are, the answer is
    # withheld and says why; on a busy machine they may be long enough, and the answer names the target.
    assert "val_accuracy >= 0.9" in ttt["summary"] or ttt["summary"].startswith("No answer: the baseline")
    report = httpx.get(f"{slurm_server}/api/experiments/{experiment['id']}/report.html", timeout=60).text
    assert "<h4>Time to val_accuracy &gt;= 0.9</h4>" in report and report.count("1 of 1 reached") == 2
