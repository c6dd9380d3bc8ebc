"""The run spec's bounds and the metric line format, both sides of the contract."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from contract.records import (
    EndRecord,
    EpochRecord,
    LegacyRecord,
    MetricParseError,
    StartRecord,
    format_record,
    parse_metric_line,
)
from contract.spec import STRATEGIES_BY_MODEL, Model, RunSpec, Strategy


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"gpus": 0}, "gpus", "greater than or equal to 1"),
        ({"epochs": -1}, "epochs", "greater than or equal to 1"),
        ({"lr": 0}, "lr", "greater than 0"),
        ({"strategy": "zero"}, "strategy", "'single', 'ddp', 'fsdp', 'tp', 'pp' or 'fsdp_tp'"),
        ({"model": "bert"}, "model", "'mlp'"),
        ({"global_batch_size": "many"}, "global_batch_size", "valid integer"),
        ({"colour": "red"}, "colour", "Extra inputs"),
    ],
)
def test_bad_field_is_named(fields, field, words):
    with pytest.raises(ValidationError) as caught:
        RunSpec.model_validate(fields)
    error = caught.value.errors()[0]
    assert error["loc"] == (field,)
    assert words in error["msg"]


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"gpus": 3, "global_batch_size": 64}, "global_batch_size (64) must be divisible by gpus (3)"),
        ({"gpus": 3, "nodes": 2, "global_batch_size": 6}, "gpus (3) must be a multiple of nodes (2)"),
        ({"gpus": 2, "strategy": "single"}, "strategy 'single' runs one process"),
        (
            {"gpus": 2, "strategy": "ddp", "grad_accum_steps": 3, "global_batch_size": 64},
            "divisible by 6 (data-parallel",
        ),
        ({"model": "resnet18", "strategy": "tp", "gpus": 2}, "does not fit model 'resnet18': convolutions"),
        ({"model": "mlp", "strategy": "fsdp_tp", "gpus": 4, "tp_degree": 2}, "2-D parallelism is for gpt"),
        (
            {"model": "gpt", "dataset": "digits"},
            "model 'gpt' does not read data set 'digits'; it reads: synthetic, text",
        ),
        ({"model": "gpt", "strategy": "ddp", "tp_degree": 2}, "tp_degree applies to strategies tp and fsdp_tp"),
        ({"model": "gpt", "strategy": "tp", "gpus": 4, "tp_degree": 2}, "for tp_degree 2 with data parallelism"),
        ({"model": "gpt", "strategy": "fsdp_tp", "gpus": 4, "tp_degree": 3}, "needs a tp_degree that divides gpus (4)"),
        ({"strategy": "pp", "gpus": 2, "global_batch_size": 30, "microbatches": 4}, "divisible by microbatches (4)"),
        ({"model": "gpt", "width": 100, "heads": 3}, "width (100) must be divisible by heads (3)"),
        ({"strategy": "pp", "gpus": 2, "precision": "fp16"}, "fp16 does not fit pp"),
    ],
)
def test_inconsistent_degrees_are_explained(fields, words):
    with pytest.raises(ValidationError, match=r"(?s).*" + words.replace("(", r"\(").replace(")", r"\)")):
        RunSpec.model_validate(fields)


@pytest.mark.parametrize(
    ("fields", "degrees"),
    [
        ({"strategy": "ddp", "gpus": 4}, (4, 1, 1)),
        ({"strategy": "fsdp", "gpus": 4}, (4, 1, 1)),
        ({"model": "gpt", "strategy": "tp", "gpus": 4}, (1, 4, 1)),
        ({"model": "gpt", "strategy": "fsdp_tp", "gpus": 8, "tp_degree": 2}, (4, 2, 1)),
        ({"strategy": "pp", "gpus": 2}, (1, 1, 2)),
    ],
)
def test_parallel_degrees(fields, degrees):
    spec = RunSpec.model_validate({"global_batch_size": 64, **fields})
    assert (spec.dp_degree, spec.tp, spec.pp) == degrees


def test_gpus_per_node():
    assert RunSpec(gpus=8, nodes=2, global_batch_size=64).gpus_per_node == 4


@pytest.mark.parametrize(
    "record",
    [
        StartRecord(
            world_size=4, nodes=1, device="cpu", backend="gloo", strategy="ddp", torch_version="2.x", hostname="n1"
        ),
        EpochRecord(epoch=3, train_loss=0.5, val_loss=0.6, val_accuracy=0.9, epoch_time_s=1.5, peak_memory_bytes=10),
        EndRecord(status="failed", total_time_s=3.0, error="boom"),
    ],
)
def test_records_round_trip(record):
    line = format_record(record)
    assert line.startswith("[METRIC] {")
    assert "\n" not in line
    assert parse_metric_line(line + "\n") == record


def test_non_metric_lines_are_ignored():
    assert parse_metric_line("epoch 1/2: train loss 0.3\n") is None
    assert parse_metric_line("") is None


def test_newer_fields_are_kept():
    line = '[METRIC] {"v": 1, "kind": "end", "status": "completed", "total_time_s": 1, "gpu": "A100"}'
    record = parse_metric_line(line)
    assert record is not None
    assert record.model_dump()["gpu"] == "A100"


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ('[METRIC] {"v": 1, "kind": "epoch", "epoch": 1', "invalid JSON"),
        ('[METRIC] {"v": 2, "kind": "end"}', "unsupported record version 2"),
        ('[METRIC] {"kind": "end"}', "unsupported record version None"),
        ('[METRIC] {"v": 1, "kind": "epoch", "epoch": "one", "train_loss": 1, "epoch_time_s": 1}', "epoch"),
        ('[METRIC] {"v": 1, "kind": "teapot"}', "kind"),
        ("[METRIC] [1, 2]", "not key=value"),
        ("[METRIC] ", "empty metric line"),
        ("[METRIC] epoch=1 loss", "not key=value"),
    ],
)
def test_broken_metric_lines_raise(line, words):
    with pytest.raises(MetricParseError, match=words):
        parse_metric_line(line)


def test_legacy_epoch_line_becomes_an_epoch_record():
    record = parse_metric_line("[METRIC] epoch=2 loss=0.42 val_acc=0.91 time=12.5 throughput=800 gpus=4")
    assert isinstance(record, EpochRecord)
    assert (record.epoch, record.train_loss, record.val_accuracy, record.epoch_time_s, record.samples_per_s) == (
        2,
        0.42,
        0.91,
        12.5,
        800,
    )
    assert record.model_dump()["gpus"] == 4


def test_legacy_line_without_epoch_keeps_its_values():
    record = parse_metric_line("[METRIC] total_time=93.1 strategy=ddp")
    assert record == LegacyRecord(values={"total_time": 93.1, "strategy": "ddp"})


REFUSED = [(model, strategy) for model in Model for strategy in Strategy if strategy not in STRATEGIES_BY_MODEL[model]]


@pytest.mark.parametrize(("model", "strategy"), REFUSED)
def test_every_refused_strategy_says_why(model, strategy):
    with pytest.raises(ValidationError) as caught:
        RunSpec.model_validate(
            {"model": model, "strategy": strategy, "gpus": 4, "tp_degree": 2, "global_batch_size": 64}
        )
    message = caught.value.errors()[0]["msg"]
    assert f"strategy '{strategy}' does not fit model '{model}': " in message
    assert len(message.split(": ", 2)[-1]) > 20  # a reason follows, not just the verdict


TARGET = {"metric": "val_accuracy", "at_least": 0.9}


def test_stop_at_target_needs_a_target_and_the_worker_reports_its_quality_figures_only():
    with pytest.raises(ValidationError, match="stop_at_target needs the experiment's target"):
        RunSpec(stop_at_target=True)
    aimed = RunSpec(target=TARGET, stop_at_target=True).target
    assert aimed is not None and aimed.reached(0.91)
    with pytest.raises(ValidationError, match="does not report it"):
        RunSpec(target={"metric": "grad_norm", "at_least": 1.0})


def test_a_program_may_aim_at_its_own_metric_but_not_stop_at_it():
    program = {"command": ["python", "train.py"], "workdir": "/home/alice/proj"}
    spec = RunSpec(kind="program", program=program, target={"metric": "grad_norm", "at_most": 1.0})
    assert spec.target is not None and spec.target.describe() == "grad_norm <= 1"
    with pytest.raises(ValidationError, match="stop_at_target"):
        RunSpec(kind="program", program=program, target=TARGET, stop_at_target=True)


def test_a_learning_rate_rule_needs_its_reference_and_the_rate_it_gives():
    with pytest.raises(ValidationError, match="needs reference_lr and reference_batch"):
        RunSpec(lr_scaling="linear")
    fine = RunSpec(lr_scaling="linear", reference_lr=0.05, reference_batch=32, global_batch_size=64, lr=0.1)
    assert fine.lr == 0.1
    with pytest.raises(ValidationError, match="is not what lr_scaling linear gives"):
        RunSpec(lr_scaling="linear", reference_lr=0.05, reference_batch=32, global_batch_size=64, lr=0.05)
    with pytest.raises(ValidationError, match="go with an lr_scaling rule"):
        RunSpec(reference_lr=0.05)


def test_a_target_is_for_training():
    with pytest.raises(ValidationError, match="a target is for training runs"):
        RunSpec(kind="inference", model="gpt", dataset="text", checkpoint="/runs/trained", target=TARGET)
