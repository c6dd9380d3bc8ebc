"""Notifications end to end on the real two-node Slurm: a user who chose to hear when an experiment ends submits a
tiny one (an mlp on synthetic data, one run); when it really ends, the server's own delivery loop sends the line
to a local SMTP server and a local webhook receiver, and the deliveries say so."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import slurm2_server_in
from tests.e2e.runs import output_of, wait_until_ended
from tests.e2e.test_lifecycle import submit
from tests.notify_receivers import smtp_server, webhook_receiver

pytestmark = [pytest.mark.slurm, pytest.mark.torch]

REQUEST = {
    "name": "notify e2e",
    "base": {"model": "mlp", "dataset": "synthetic", "strategy": "ddp", "epochs": 1, "global_batch_size": 16,
             "steps_per_epoch": 2},
    "grid": {"gpus": [1]},
    "resources": {"nodes": 1, "time_limit": "00:05:00"},
}  # fmt: skip


def test_a_user_hears_when_an_experiment_really_ends(slurm2_env: dict[str, str], tmp_path: Path) -> None:
    with smtp_server() as smtp, webhook_receiver() as receiver:
        env = {
            "SCALELAB_SMTP_HOST": "127.0.0.1",
            "SCALELAB_SMTP_PORT": str(smtp.server_address[1]),
            "SCALELAB_WEBHOOK_ALLOW": "127.0.0.1",
            "SCALELAB_WEBHOOK_ALLOW_PRIVATE": "true",
            "SCALELAB_WEBHOOK_ALLOW_HTTP": "true",
        }
        with slurm2_server_in(tmp_path, slurm2_env, **env) as server:
            chosen = {"events": ["experiment_ended"], "email": "me@example.org", "webhook_url": receiver.url}
            answer = httpx.put(f"{server}/api/notifications/settings", json=chosen, timeout=60)
            assert answer.status_code == 200, answer.text
            experiment = submit(server, REQUEST)
            (run,) = experiment["runs"]
            ended = wait_until_ended(server, run["id"], tmp_path / "server.log", timeout_s=600)
            assert ended["state"] == "completed", output_of(server, run["id"])
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and not (receiver.bodies and smtp.received):
                time.sleep(0.5)
            line = f"experiment notify e2e ({experiment['id']}) completed: 1 completed of 1 runs"
            assert receiver.bodies == [{"text": line}]
            ((recipients, message),) = smtp.received
            assert recipients == ["me@example.org"] and message["Subject"] == line
            listed = httpx.get(f"{server}/api/notifications/deliveries", timeout=60).json()
            assert sorted((row["channel"], row["state"]) for row in listed["data"]) == [
                ("email", "delivered"),
                ("webhook", "delivered"),
            ]
