"""Following a run through a real server's API until it has ended and been read, for the end-to-end tests."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx

FINAL = {"completed", "failed", "cancelled", "timeout", "node_fail", "out_of_memory", "submit_failed"}


def wait_until_ended(url: str, run_id: str, log: Path, timeout_s: float = 600) -> dict[str, Any]:
    """The run once it is final and its output read to the end; else fail with the server log's tail."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        run: dict[str, Any] = httpx.get(f"{url}/api/runs/{run_id}", timeout=10).json()
        # The monitor reads the last records a cycle after it sees the end.
        if run["state"] in FINAL and run["ingest_done"]:
            return run
        time.sleep(1)
    raise AssertionError(f"run {run_id} did not end: {run}\n{log.read_text()[-3000:]}")


def output_of(url: str, run_id: str) -> str:
    return str(httpx.get(f"{url}/api/runs/{run_id}/log", timeout=10).json()["text"])
