"""A run's summary folded from its records, and the provenance of its latest start: plain objects, no database; then
the summary ingestion keeps for a run's output."""

from __future__ import annotations

import pytest

from contract.records import EndRecord, EpochRecord, InferenceRecord, StartRecord, StepRecord, format_record
from server.models import Run, RunSummary
from server.services.ingestion.summary import FOLDED_KINDS, apply_record, record_provenance, refold
from tests.server.services.ingestion.output import START, append, cycle, epoch_line

STARTED = StartRecord(world_size=4, nodes=1, device="cuda", strategy="ddp", image="worker:1", image_digest="sha256:1")


def epoch(number: int, time_s: float, memory: int | None = None) -> EpochRecord:
    return EpochRecord(
        epoch=number, train_loss=1.0 / number, val_loss=None, val_accuracy=None, epoch_time_s=time_s,
        samples_per_s=10.0 * number, peak_memory_bytes=memory, memory_kind="cuda" if memory else None,
    )  # fmt: skip


def test_a_start_sets_the_world_and_clears_how_an_earlier_attempt_ended():
    summary = RunSummary(run_id="r", total_time_s=3.0, end_status="failed")
    apply_record(summary, STARTED)
    assert (summary.world_size, summary.device, summary.total_time_s, summary.end_status) == (4, "cuda", None, None)


def test_epochs_fold_into_the_latest_figures_the_sum_and_the_peak():
    summary = RunSummary(run_id="r")
    for record in (epoch(1, 5.0, 300), epoch(2, 2.0, 100), epoch(3, 3.0)):
        apply_record(summary, record)
    assert (summary.epochs_done, summary.first_epoch_time_s, summary.epoch_time_sum_s) == (3, 5.0, 10.0)
    assert summary.last_train_loss == pytest.approx(1 / 3)
    assert summary.last_samples_per_s == 30.0
    assert (summary.peak_memory_bytes, summary.peak_memory_kind) == (300, "cuda")
    assert summary.mean_epoch_time_s == pytest.approx(2.5)


def test_an_end_and_the_inference_figures_are_folded_as_they_come():
    summary = RunSummary(run_id="r", peak_memory_bytes=900)
    apply_record(summary, EndRecord(status="completed", total_time_s=11.0))
    inference = InferenceRecord(
        tp=1, compile=False, precision="fp32", batch_size=1, requests=1, new_tokens=8, load_time_s=1.0, ttft_s=0.1,
        ttft_p50_s=0.1, tokens_per_s=80.0, request_tokens_per_s=80.0, latency_p50_s=0.01, latency_p95_s=0.02,
        generation_time_s=0.1, peak_memory_bytes=5, memory_kind="cpu",
    )  # fmt: skip
    apply_record(summary, inference)
    assert (summary.end_status, summary.total_time_s) == ("completed", 11.0)
    assert (summary.peak_memory_bytes, summary.peak_memory_kind) == (5, "cpu")  # the inference's own, not the max


def test_a_step_is_not_folded():
    summary = RunSummary(run_id="r")
    apply_record(summary, StepRecord(epoch=1, step=1, train_loss=0.5))
    assert summary == RunSummary(run_id="r")
    assert "step" not in FOLDED_KINDS


def test_a_refold_starts_over_from_the_epochs_given_in_epoch_order():
    summary = RunSummary(run_id="r", world_size=2)
    for record in (epoch(1, 5.0, 900), epoch(2, 9.0), epoch(3, 9.0)):
        apply_record(summary, record)
    refold(summary, [epoch(2, 2.0, 200), epoch(1, 5.0)])
    assert (summary.epochs_done, summary.first_epoch_time_s, summary.epoch_time_sum_s) == (2, 5.0, 7.0)
    assert (summary.last_train_loss, summary.peak_memory_bytes, summary.world_size) == (0.5, 200, 2)


def test_the_latest_start_tells_what_the_run_runs_in():
    run = Run(experiment_id="e", position=0, scheduler="slurm", spec={}, run_dir="/x", image="old", worker_version="0")
    record_provenance(run, STARTED)
    assert (run.image, run.image_digest, run.worker_version, run.torch_version) == ("worker:1", "sha256:1", None, None)


# ---- the summary ingestion keeps for a run's output -------------------------------------------------------------


def test_summary_follows_the_records(session, run):
    append(run, f"{START}\n{epoch_line(1, 5.0, 300)}\n{epoch_line(2, 2.0, 200)}\n{epoch_line(3, 3.0, 100)}\n")
    append(run, format_record(EndRecord(status="completed", total_time_s=11.0)) + "\n")
    cycle(session, run)
    summary = session.get(RunSummary, run.id)
    assert summary.world_size == 2
    assert summary.epochs_done == 3
    assert summary.mean_epoch_time_s == pytest.approx(2.5)  # the first, warm-up epoch left out
    assert summary.peak_memory_bytes == 300
    assert summary.last_val_accuracy == pytest.approx(0.53)
    assert (summary.end_status, summary.total_time_s) == ("completed", 11.0)
