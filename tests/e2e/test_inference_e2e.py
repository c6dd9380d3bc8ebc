"""Inference on the real local Slurm: train a tiny gpt, then generate from its checkpoint on one process and
tensor parallel over two, compiled and not; the text agrees across layouts and the figures arrive."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.factories import tiny_gpt_request

pytestmark = [pytest.mark.slurm, pytest.mark.torch]

FINAL = {"completed", "failed", "cancelled", "timeout", "node_fail", "out_of_memory", "submit_failed"}
PROMPTS = "def main(\nclass Foo:\n    return self.\nimport os\nfor i in range(\n"


def _finished(url: str, experiment_id: str, timeout_s: float, tmp_path: Path) -> list[dict[str, Any]]:
    """The experiment's runs once all have ended (and the monitor has read their output to the end)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        runs = httpx.get(f"{url}/api/runs", params={"experiment_id": experiment_id}, timeout=10).json()["data"]
        if all(run["state"] in FINAL and run["ingest_done"] for run in runs):
            break
        time.sleep(2)
    states = {run["state"] for run in runs}
    details = json.dumps(runs, indent=1) + (tmp_path / "server.log").read_text()[-3000:]
    for run in runs:
        if run["state"] != "completed":
            details += (Path(run["run_dir"]) / "output.log").read_text()[-3000:]
    assert states == {"completed"}, details
    return sorted(runs, key=lambda run: run["position"])


def _submit(url: str, request: dict[str, Any]) -> dict[str, Any]:
    response = httpx.post(f"{url}/api/experiments", json=request, timeout=60)
    assert response.status_code == 201, response.text
    experiment: dict[str, Any] = response.json()
    return experiment


def test_generation_agrees_across_layouts_and_compile_on_slurm(slurm_server, tmp_path):
    trained = _submit(slurm_server, tiny_gpt_request())
    (training_run,) = _finished(slurm_server, trained["id"], 600, tmp_path)

    inference = _submit(
        slurm_server,
        {
            "name": "layouts x compile",
            "base": {"kind": "inference", "model": "gpt", "max_new_tokens": 10, "global_batch_size": 3},
            "grid": {"strategy": ["single", "tp"], "gpus": [1, 2], "compile": [False, True]},
            "on_invalid": "skip",
            "inference": {"checkpoint_run": training_run["id"], "prompts": PROMPTS},
            # Two at a time: compiling on two shared cores is slow enough without four at once.
            "resources": {"time_limit": "00:20:00", "max_concurrent": 2},
        },
    )
    assert [(run["spec"]["strategy"], run["spec"]["gpus"], run["spec"]["compile"]) for run in inference["runs"]] == [
        ("single", 1, False),
        ("single", 1, True),
        ("tp", 2, False),
        ("tp", 2, True),
    ]
    runs = _finished(slurm_server, inference["id"], 1500, tmp_path)

    texts = []
    for run in runs:
        generations = httpx.get(f"{slurm_server}/api/runs/{run['id']}/generations", timeout=10).json()
        assert generations["complete"] and generations["count"] == 5
        texts.append([(row["prompt"], row["completion"]) for row in generations["data"]])
        assert all(len(completion) == 10 for _, completion in texts[-1])
    assert all(text == texts[0] for text in texts), texts  # greedy: the same text whatever the layout

    rows = httpx.get(f"{slurm_server}/api/experiments/{inference['id']}/inference", timeout=10).json()["data"]
    assert [(row["tp"], row["compile"]) for row in rows] == [(1, False), (1, True), (2, False), (2, True)]
    for row in rows:
        assert row["tokens_per_s"] > 0 and row["ttft_s"] > 0 and row["load_time_s"] > 0
        assert row["latency_p95_s"] >= row["latency_p50_s"] > 0
        assert len(row["memory_per_rank"]) == row["tp"] and min(row["memory_per_rank"]) > 0
        assert (row["compile_time_s"] is not None) == row["compile"]
    # The figures, for the record: beside the server's log in the test's directory.
    lines = [
        f"tp={row['tp']} compile={row['compile']}: {row['tokens_per_s']:.1f} tokens/s "
        f"(per request {row['request_tokens_per_s']:.1f}), TTFT {row['ttft_s'] * 1e3:.1f} ms, "
        f"latency p50 {row['latency_p50_s'] * 1e3:.2f} ms p95 {row['latency_p95_s'] * 1e3:.2f} ms, "
        f"memory/rank {[m // 2**20 for m in row['memory_per_rank']]} MiB, load {row['load_time_s']:.2f} s, "
        f"compile {row['compile_time_s']}"
        for row in rows
    ]
    (tmp_path / "inference-figures.txt").write_text("\n".join(lines) + "\n")
