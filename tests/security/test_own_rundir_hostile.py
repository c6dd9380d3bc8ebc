"""The hostile corpus through a script that makes its own run directory: the spec and the prompts travel inside
the script (quoted here-documents), so every value in them must arrive as written and run nothing.

The spec's fields are validated long before a script is rendered; here each value goes into a string field of the
spec without validation (`model_copy`), so that the script's own quoting is what is tested, not the validation.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from server.render import render_script
from tests.factories import spec
from tests.hostile import HOSTILE, json_safe
from tests.server.test_own_rundirs import job_lines, own_job

# Values aimed at the here-documents themselves: their delimiters, alone on a line or not.
AT_THE_DOCUMENTS = [
    "SCALELAB_SPEC",
    "SCALELAB_PROMPTS",
    "x\nSCALELAB_SPEC\ntouch CANARY\n",
    "x\nSCALELAB_PROMPTS\ntouch CANARY\nSCALELAB_PROMPTS",
    "'SCALELAB_SPEC'\n$(touch CANARY)\n`touch CANARY`",
    "\\\ntouch CANARY",
]


def _texts(canary: Path) -> list[str]:
    corpus = [item.with_canary(canary) for item in HOSTILE if isinstance(item.value, str) and json_safe(item.value)]
    return corpus + [value.replace("CANARY", str(canary)) for value in AT_THE_DOCUMENTS]


def _stub_worker(directory: Path) -> Path:
    """Stands for the worker's Python: says where it runs, and that it ran."""
    stub = directory / "worker"
    stub.write_text('#!/bin/bash\necho "worker ran in $PWD with $#"\n')
    stub.chmod(0o755)
    return stub


def test_hostile_spec_values_and_prompts_arrive_as_written_and_run_nothing(tmp_path):
    canary = tmp_path / "canary"
    worker = _stub_worker(tmp_path)
    texts = _texts(canary)
    assert len(texts) > 50
    (tmp_path / "runs").mkdir()
    for number, value in enumerate(texts):
        run_dir = tmp_path / "runs" / f"run{number}"
        hostile = spec().model_copy(update={"checkpoint": value})  # unvalidated: the script's quoting is tested
        job = own_job(run_dir, worker, prompts=value)
        script = tmp_path / f"run{number}.sbatch"
        script.write_text(render_script(hostile, job))
        result = subprocess.run(
            ["bash", str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=30, check=False
        )
        assert result.returncode == 0, (value, result.stderr)
        assert not canary.exists(), f"{value!r} ran a command"
        assert json.loads((run_dir / "spec.json").read_text())["checkpoint"] == value
        assert (run_dir / "prompts.txt").read_bytes() == value.encode("utf-8")
        assert job_lines((run_dir / "output.log").read_text())[-1] == f"worker ran in {run_dir} with 9"
        assert sorted(path.name for path in run_dir.iterdir()) == ["output.log", "prompts.txt", "spec.json"]
