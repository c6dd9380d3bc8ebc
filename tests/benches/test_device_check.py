"""The device check's CPU smoke test, as CI runs it: `benches/device_check --device cpu --quick` prints one table
with a row for every case, measured or skipped with its reason, and no failure."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from benches import device_check

SCRIPT = Path(__file__).resolve().parents[2] / "benches" / "device_check"
pytestmark = pytest.mark.torch


def test_help_says_what_it_checks():
    done = subprocess.run([str(SCRIPT), "--help"], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0 and "--quick" in done.stdout and "--device" in done.stdout


def test_the_quick_cpu_check_prints_every_case(tmp_path):
    done = subprocess.run(
        [str(SCRIPT), "--device", "cpu", "--quick", "--tmp", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={"PATH": "/usr/bin:/bin", "SCALELAB_WORKER_PYTHON": sys.executable},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = {line.split("  ")[0].strip(): line for line in done.stdout.splitlines() if "  " in line}
    cases = [f"{model} {variant}" for model in device_check.MODELS for variant in device_check.VARIANTS]
    for case in ["matmul peak fp32", "matmul peak bf16", *cases, "gpt inference", "cnn worker vs course loop"]:
        assert case in rows, f"no row for {case}:\n{done.stdout}"
    assert "TFLOP/s" in rows["matmul peak fp32"] and "no datasheet" in rows["matmul peak fp32"]
    for measured in ("mlp fp32", "mlp bf16", "gpt fp32", "gpt bf16"):
        # samples/s, MFU against the measured peak within (0, 100 %], memory and the estimate with their ratio.
        mfu = re.search(r"\s([0-9.]+)%\s", rows[measured])
        assert mfu is not None and 0 < float(mfu.group(1)) <= 100, rows[measured]
        assert rows[measured].count("MiB") == 2 and "FLOPs/sample" in rows[measured]
    assert "skipped: fp16 (GradScaler) runs on a GPU only" in rows["gpt fp16"]
    assert "skipped: not in --quick" in rows["resnet18 fp32"]
    assert "tokens/s" in rows["gpt inference"]
    assert re.search(r"device check: \d+ rows, 0 failed", done.stdout)
