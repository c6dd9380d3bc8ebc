"""The time-to-accuracy benchmark on a small grid: its table has a line per rule and GPU count, with throughput
speed-up beside effective speed-up, and the server's CPU time per scaling request. No timing is asserted."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from benches.time_to_accuracy import EXAMPLE, HEADER

REPO = Path(__file__).resolve().parent.parent.parent
TIMEOUT_S = 900  # generous: a server, and four runs one after the other on a shared machine


def test_the_benchmark_prints_throughput_beside_effective_speedup_for_each_rule_and_count(tmp_path):
    request = json.loads(EXAMPLE.read_text())
    request["base"].update(epochs=4, width=256)  # the worker's own width: seconds, not minutes
    request["grid"]["gpus"] = [1, 2]
    small = tmp_path / "request.json"
    small.write_text(json.dumps(request))
    result = subprocess.run(
        [sys.executable, "-m", "benches.time_to_accuracy", "--repeats", "1", "--request", str(small),
         "--tmp", str(tmp_path / "work")],
        cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT_S, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    assert all(column in out for column in HEADER)
    lines = [line for line in out.splitlines() if re.match(r"ddp, lr_scaling=\w+ +\d", line)]
    assert len(lines) == 4, out  # linear and sqrt, at 1 and 2 GPUs
    baseline = [line for line in lines if line.split()[2] == "1"]
    assert len(baseline) == 2 and all(" 1.00 " in line for line in baseline), out  # each rule's own baseline
    assert "ms server CPU per request" in out
