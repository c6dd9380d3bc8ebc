"""The metric helper a user's program imports: every line it prints is one the server reads back as the record meant,
only rank 0 prints, bad values are refused naming the field, and it needs nothing but the standard library."""

from __future__ import annotations

import json
import math
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from contract import metrics
from contract.records import EndRecord, EpochRecord, StartRecord, parse_metric_line

METRICS_FILE = Path(metrics.__file__)
# The module as an untyped program calls it, with values of the wrong type.
untyped: Any = metrics
LAUNCH_VARIABLES = ("RANK", "SLURM_PROCID", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "SLURM_NTASKS", "SLURM_NNODES")


@pytest.fixture(autouse=True)
def no_launch(monkeypatch):
    """As a process started by hand: none of the launchers' variables (the tests set those they need)."""
    for name in (*LAUNCH_VARIABLES, "SCALELAB_STRATEGY", "SCALELAB_IMAGE", "SCALELAB_IMAGE_DIGEST"):
        monkeypatch.delenv(name, raising=False)


def printed(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return capsys.readouterr().out.splitlines()


def test_an_epoch_line_is_the_epoch_record_with_the_programs_own_metrics(capsys):
    line = metrics.epoch(3, 0.5, 2.25, val_loss=0.6, val_accuracy=0.9, peak_memory_bytes=2**30, grad_norm=1.5, k=2)
    assert printed(capsys) == [line]
    record = parse_metric_line(line or "")
    assert isinstance(record, EpochRecord)
    assert (record.epoch, record.train_loss, record.epoch_time_s) == (3, 0.5, 2.25)
    assert (record.val_loss, record.val_accuracy, record.peak_memory_bytes) == (0.6, 0.9, 2**30)
    assert record.samples_per_s is None and "samples_per_s" not in (line or "")  # left out, not null
    assert record.model_extra == {"grad_norm": 1.5, "k": 2}


def test_a_programs_flops_per_sample_are_the_epoch_records_own_fields(capsys):
    """What the server's MFU reads from a program: declared fields, bounded as the record bounds them."""
    line = metrics.epoch(1, 0.5, 2.0, samples_per_s=100.0, model_flops_per_sample=3e9, hardware_flops_per_sample=4e9)
    record = parse_metric_line(line or "")
    assert isinstance(record, EpochRecord)
    assert (record.model_flops_per_sample, record.hardware_flops_per_sample) == (3e9, 4e9)
    assert not record.model_extra


def test_lines_are_compact_json_after_the_prefix(capsys):
    line = metrics.epoch(1, 0.25, 1.0)
    assert line == '[METRIC] {"v":1,"kind":"epoch","epoch":1,"train_loss":0.25,"epoch_time_s":1.0}'


def test_a_start_line_fills_in_the_launch_from_the_environment(capsys, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    monkeypatch.setenv("SCALELAB_STRATEGY", "fsdp")
    monkeypatch.setenv("SCALELAB_IMAGE", "registry.example/train:1")
    record = parse_metric_line(metrics.start(device="cuda", backend="nccl", torch_version="2.5.1") or "")
    assert isinstance(record, StartRecord)
    assert (record.world_size, record.nodes, record.strategy) == (8, 2, "fsdp")
    assert (record.device, record.backend, record.torch_version) == ("cuda", "nccl", "2.5.1")
    assert (record.hostname, record.image, record.image_digest) == (
        socket.gethostname(),
        "registry.example/train:1",
        None,
    )


def test_a_start_line_outside_any_launch_is_one_process_and_the_programs_own_fields_win(capsys):
    record = parse_metric_line(metrics.start(strategy="tp", nodes=3, world_size=6) or "")
    assert isinstance(record, StartRecord)
    assert (record.world_size, record.nodes, record.strategy) == (6, 3, "tp")
    alone = parse_metric_line(metrics.start() or "")
    assert isinstance(alone, StartRecord) and (alone.world_size, alone.nodes, alone.strategy) == (1, 1, "single")


def test_any_record_kind_the_server_reads(capsys):
    record = parse_metric_line(metrics.record("end", status="completed", total_time_s=12.5, error=None) or "")
    assert isinstance(record, EndRecord) and (record.status, record.total_time_s, record.error) == (
        "completed",
        12.5,
        None,
    )


@pytest.mark.parametrize(("variables", "prints"), [
    ({"RANK": "1"}, False),
    ({"RANK": "0", "SLURM_PROCID": "3"}, True),  # torchrun's rank is the process's; Slurm's is its task's
    ({"SLURM_PROCID": "2"}, False),
    ({"SLURM_PROCID": "0"}, True),
    ({}, True),
])  # fmt: skip
def test_only_rank_0_prints(capsys, monkeypatch, variables, prints):
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    line = metrics.epoch(1, 0.5, 1.0, grad_norm=2.0)
    assert (line is not None) == prints
    assert printed(capsys) == ([line] if prints else [])


def test_other_ranks_check_their_values_too(monkeypatch):
    # A mistake shows on every rank alike, not only where the line is printed.
    monkeypatch.setenv("RANK", "1")
    with pytest.raises(ValueError, match="train_loss"):
        metrics.epoch(1, math.nan, 1.0)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: metrics.epoch(1, math.nan, 1.0), "train_loss: nan is not a finite number"),
        (lambda: metrics.epoch(1, 0.5, math.inf), "epoch_time_s: inf is not a finite number"),
        (lambda: untyped.epoch(1, 0.5, 1.0, val_loss="low"), "val_loss: 'low' is not a number"),
        (lambda: untyped.epoch(1, 0.5, 1.0, peak_memory_bytes=1.5), "peak_memory_bytes: 1.5 is not a whole number"),
        (lambda: metrics.epoch(1, 0.5, 1.0, grad_norm=-math.inf), "grad_norm: -inf is not a finite number"),
        (lambda: metrics.epoch(1, 0.5, 1.0, converged=True), "converged: True is not a number"),
        (lambda: untyped.epoch(1, 0.5, 1.0, **{"Grad-Norm": 1.0}), "Grad-Norm: a custom metric's name is lowercase"),
        (lambda: metrics.epoch(1, 0.5, 1.0, v=2.0), "v: a custom metric's name"),
        (lambda: metrics.epoch(True, 0.5, 1.0), "epoch: True is not an epoch number"),
        (lambda: metrics.epoch(-1, 0.5, 1.0), "epoch: -1 is not an epoch number"),
        (lambda: metrics.record("epoch", kind="end"), "kind: every record sets it itself"),
        (lambda: metrics.record("end", total_time_s=math.nan), "total_time_s: nan cannot go into a metric record"),
        (lambda: metrics.record("end", error=object()), "error: <object object"),
        (lambda: metrics.record("End"), "kind 'End': a lowercase name"),
    ],
)
def test_bad_values_are_refused_naming_the_field(capsys, call, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("+", r"\+")):
        call()
    assert printed(capsys) == []


def test_it_needs_nothing_but_the_standard_library(tmp_path):
    """Copied alone next to a program and imported in an isolated interpreter, it imports only the standard library
    (scalelab's own packages and their dependencies, pydantic above all, are not there for a user's program)."""
    (tmp_path / "metrics.py").write_text(METRICS_FILE.read_text())
    check = (
        "import sys; sys.path.insert(0, '.'); before = set(sys.modules)\n"
        "import metrics; metrics.epoch(1, 0.5, 1.0, grad_norm=2.0)\n"
        "added = {name.split('.')[0] for name in set(sys.modules) - before} - {'metrics'}\n"
        "print(sorted(name for name in added if name not in sys.stdlib_module_names))"
    )
    result = subprocess.run(
        [sys.executable, "-I", "-c", check], cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    line, imported = result.stdout.splitlines()
    assert imported == "[]"
    assert json.loads(line.removeprefix("[METRIC] "))["grad_norm"] == 2.0
