"""A run's records stored with their verdicts and its summary: nothing is stored twice, and which records count
after starts and resumes is the same however the records arrive."""

from __future__ import annotations

import random

import pytest
from sqlalchemy.exc import IntegrityError

from contract.records import (
    EndRecord,
    InferenceRecord,
    MemoryRecord,
    ResumeRecord,
    TimingRecord,
    format_record,
    parse_metric_line,
)
from server.models import Run, RunSummary
from server.services.comparison import epoch_histories
from server.services.ingestion.counting import PLACED_KINDS, counting, place_of
from server.services.ingestion.storing import store_record
from tests.factories import experiment_row, run_row
from tests.server.services.ingestion.output import START, append, cycle, epoch_line, resume_line, stored


def test_worker_error_reaches_the_run_message(session, run):
    append(run, format_record(EndRecord(status="failed", total_time_s=1.0, error="RuntimeError: boom")) + "\n")
    cycle(session, run)
    assert run.message == "the worker reported: RuntimeError: boom"


def test_a_line_cannot_be_stored_twice(session, run):
    """Even if an offset were lost, the database refuses the duplicate instead of counting it twice."""
    append(run, epoch_line(1) + "\n")
    cycle(session, run)
    run.log_offset = 0
    with pytest.raises(IntegrityError):
        cycle(session, run)


def test_resumed_run_counts_each_epoch_once(session, run):
    """Killed after epoch 3 but checkpointed after 2: the requeued job repeats epoch 3, which then counts once."""
    append(run, f"{START}\n{epoch_line(1, 5.0)}\n{epoch_line(2, 2.0)}\n{epoch_line(3, 9.0, memory=900)}\n")
    append(run, format_record(ResumeRecord(epoch=2)) + "\n" + epoch_line(3, 3.0) + "\n")
    cycle(session, run)
    summary = session.get(RunSummary, run.id)
    assert summary.epochs_done == 3
    assert summary.mean_epoch_time_s == pytest.approx(2.5)  # epochs 2 and 3 after the resume: (2 + 3) / 2
    assert summary.peak_memory_bytes == 100  # the superseded epoch's figure is gone
    assert [m.kind for m in stored(session, run)].count("epoch") == 4  # the history keeps every line


def test_a_restarted_worker_counts_from_its_checkpoint(session, run):
    """A requeued job prints start again, then resume: epochs after the checkpoint count once."""
    append(run, f"{START}\n{epoch_line(1)}\n{epoch_line(2)}\n{epoch_line(3)}\n")
    append(run, f"{START}\n{format_record(ResumeRecord(epoch=2))}\n{epoch_line(3, 3.0)}\n")
    cycle(session, run)
    assert session.get(RunSummary, run.id).epochs_done == 3


def test_an_epoch_whose_print_was_lost_comes_back_with_its_checkpoint(session, run):
    """Killed after saving epoch 3 but before its line reached the output: the next start prints it again."""
    append(run, f"{START}\n{epoch_line(1)}\n{epoch_line(2)}\n")
    append(run, f"{START}\n{epoch_line(3, 3.0)}\n{format_record(ResumeRecord(epoch=3))}\n{epoch_line(4, 4.0)}\n")
    cycle(session, run)
    summary = session.get(RunSummary, run.id)
    assert summary.epochs_done == 4
    assert summary.mean_epoch_time_s == pytest.approx((2.0 + 3.0 + 4.0) / 3)  # the first pays for warm-up
    assert [point.epoch for point in epoch_histories(session, [run.id])[run.id]] == [1, 2, 3, 4]


def test_a_resubmitted_run_without_checkpoint_starts_over(session, run):
    append(run, f"{START}\n{epoch_line(1)}\n{epoch_line(2)}\n")
    append(run, format_record(EndRecord(status="failed", total_time_s=1.0, error="boom")) + "\n")
    append(run, f"{START}\n{epoch_line(1, 7.0)}\n")
    cycle(session, run)
    summary = session.get(RunSummary, run.id)
    assert (summary.epochs_done, summary.first_epoch_time_s, summary.end_status) == (1, 7.0, None)


def history(session, run: Run) -> list[tuple[int, float]]:
    """The run's epochs as the compare endpoint gives them: (epoch, epoch time)."""
    return [(point.epoch, point.epoch_time_s) for point in epoch_histories(session, [run.id])[run.id]]


def verdicts(session, run: Run) -> list[tuple[str, int | None, bool]]:
    return [(m.kind, m.epoch, m.counts) for m in stored(session, run)]


def test_a_run_restarted_and_resumed_keeps_the_history_and_summary_it_had(session, run):
    """Start, epochs 1-3, a new start, resume from epoch 2, epochs 3-4: the second epoch 3 takes the first's place."""
    append(run, f"{START}\n{epoch_line(1, 5.0, 100)}\n{epoch_line(2, 2.0, 200)}\n{epoch_line(3, 9.0, 900)}\n")
    append(run, f"{START}\n{resume_line(2)}\n{epoch_line(3, 3.0, 300)}\n{epoch_line(4, 4.0, 400)}\n")
    cycle(session, run)
    assert history(session, run) == [(1, 5.0), (2, 2.0), (3, 3.0), (4, 4.0)]
    summary = session.get(RunSummary, run.id)
    assert summary.epochs_done == 4
    assert summary.mean_epoch_time_s == pytest.approx((2.0 + 3.0 + 4.0) / 3)
    assert (summary.first_epoch_time_s, summary.epoch_time_sum_s) == (5.0, 14.0)
    assert summary.peak_memory_bytes == 400  # epoch 3's first print (900) no longer counts
    assert (summary.last_train_loss, summary.last_val_accuracy) == (pytest.approx(1 / 4), pytest.approx(0.54))
    assert verdicts(session, run) == [
        ("start", None, True), ("epoch", 1, True), ("epoch", 2, True), ("epoch", 3, False),
        ("start", None, True), ("resume", 2, True), ("epoch", 3, True), ("epoch", 4, True),
    ]  # fmt: skip


def test_a_restart_without_resume_drops_every_epoch(session, run):
    append(run, f"{START}\n{epoch_line(1, 5.0)}\n{epoch_line(2, 2.0)}\n{START}\n")
    cycle(session, run)
    assert history(session, run) == []
    summary = session.get(RunSummary, run.id)
    assert (summary.epochs_done, summary.first_epoch_time_s, summary.peak_memory_bytes) == (0, None, None)
    assert summary.mean_epoch_time_s is None
    append(run, epoch_line(1, 7.0) + "\n")  # the new attempt's first epoch, a cycle later
    cycle(session, run)
    assert history(session, run) == [(1, 7.0)]
    assert [counts for kind, _, counts in verdicts(session, run) if kind == "epoch"] == [False, False, True]
    assert session.get(RunSummary, run.id).epochs_done == 1


def test_a_repeated_epoch_record_replaces_the_earlier_one(session, run):
    """The same epoch printed twice with no start between: the later print is the epoch, in history and summary."""
    append(run, f"{START}\n{epoch_line(1, 5.0)}\n{epoch_line(2, 9.0, 900)}\n{epoch_line(2, 3.0, 300)}\n")
    cycle(session, run)
    assert history(session, run) == [(1, 5.0), (2, 3.0)]
    summary = session.get(RunSummary, run.id)
    assert (summary.epochs_done, summary.mean_epoch_time_s, summary.peak_memory_bytes) == (2, 3.0, 300)
    assert [counts for kind, _, counts in verdicts(session, run) if kind == "epoch"] == [True, False, True]


def test_a_resume_brings_back_epochs_printed_before_the_last_start(session, run):
    """Two starts between an epoch and the resume that needs it, each in a cycle of its own: what counts is read
    back from the database, not only from the records of the cycle."""
    for text in (
        f"{START}\n{epoch_line(1, 5.0)}\n{epoch_line(2, 2.0)}\n",
        f"{START}\n{epoch_line(1, 6.0)}\n",  # a new attempt without a checkpoint, killed during epoch 2
        f"{START}\n",  # killed before its first epoch
        f"{resume_line(1)}\n{epoch_line(2, 3.0)}\n",  # epoch 1's checkpoint: the second attempt's epoch 1
    ):
        append(run, text)
        cycle(session, run)
    assert history(session, run) == [(1, 6.0), (2, 3.0)]
    assert [counts for kind, _, counts in verdicts(session, run) if kind == "epoch"] == [False, False, True, True]
    summary = session.get(RunSummary, run.id)
    assert (summary.epochs_done, summary.first_epoch_time_s, summary.epoch_time_sum_s) == (2, 6.0, 9.0)


def test_a_resume_drops_the_epochs_after_its_checkpoint_within_one_attempt(session, run):
    """A resume with no start before it (a restart whose start line was lost) still drops the later epochs."""
    append(run, f"{START}\n{epoch_line(1, 5.0)}\n{epoch_line(2, 2.0)}\n{epoch_line(3, 9.0)}\n{resume_line(1)}\n")
    cycle(session, run)
    assert history(session, run) == [(1, 5.0)]
    assert session.get(RunSummary, run.id).epochs_done == 1


def test_the_summary_folds_the_epochs_in_epoch_order(session, run):
    """An epoch printed after a later one (a log pieced together) is not the run's last epoch: the summary's last
    figures are those of the last epoch of the history."""
    append(run, f"{START}\n{epoch_line(2, 2.0)}\n{epoch_line(1, 5.0)}\n")
    cycle(session, run)
    assert history(session, run) == [(1, 5.0), (2, 2.0)]
    summary = session.get(RunSummary, run.id)
    assert (summary.first_epoch_time_s, summary.last_train_loss) == (5.0, pytest.approx(1 / 2))
    assert summary.mean_epoch_time_s == 2.0


def timing(epoch: int, rank: int, step_s: float) -> TimingRecord:
    return TimingRecord(
        epoch=epoch,
        rank=rank,
        steps=10,
        step_s=step_s,
        data_s=0.0,
        compute_s=step_s,
        optimizer_s=0.0,
        comm_s=0.0,
        method="test",
    )


@pytest.mark.parametrize(
    ("kind", "figure", "printed"),
    [
        ("memory", "peak_allocated_bytes", lambda e, r: MemoryRecord(epoch=e, rank=r, peak_allocated_bytes=10 * e + r,
                                                                     memory_kind="cpu")),
        ("timing", "step_s", lambda e, r: timing(e, r, 10 * e + r)),
    ],
)  # fmt: skip
def test_per_rank_records_follow_the_rule_by_epoch_and_rank(session, run, kind, figure, printed):
    lines = [format_record(printed(e, r)) for e in (1, 2) for r in (0, 1)]
    append(run, "\n".join([START, *lines, START, resume_line(1), lines[2]]) + "\n")
    cycle(session, run)
    kept = [m.record[figure] for m in stored(session, run) if m.kind == kind and m.counts]
    # Epoch 1 of both ranks comes back with the checkpoint; of epoch 2 only the new print of rank 0 counts.
    assert kept == [10, 11, 20]


INFERENCE = format_record(
    InferenceRecord(
        tp=1, compile=False, precision="fp32", batch_size=1, requests=1, new_tokens=8, load_time_s=1.0, ttft_s=0.1,
        ttft_p50_s=0.1, tokens_per_s=80.0, request_tokens_per_s=80.0, latency_p50_s=0.01, latency_p95_s=0.02,
        generation_time_s=0.1, peak_memory_bytes=1, memory_kind="cpu",
    )
)  # fmt: skip


def rule_line(kind: str, epoch: int, rank: int) -> str:
    """A line of each kind the rule reads, for the random histories below."""
    if kind == "memory":
        return format_record(MemoryRecord(epoch=epoch, rank=rank, peak_allocated_bytes=1, memory_kind="cpu"))
    lines = {"start": START, "resume": resume_line(epoch), "inference": INFERENCE}
    return lines.get(kind) or epoch_line(epoch, epoch + 0.5)


def expected_history(rule_records: list[tuple[str, int, int]]) -> list[int]:
    """The brief's rule as a reader would replay it: the index of the record that counts for each epoch, in order."""
    latest: dict[int, int] = {}
    current: dict[int, int] = {}
    for index, (kind, epoch, _) in enumerate(rule_records):
        if kind == "start":
            current = {}
        elif kind == "resume":
            current = {e: i for e, i in latest.items() if e <= epoch}
        elif kind == "epoch":
            latest[epoch] = current[epoch] = index
    return [current[epoch] for epoch in sorted(current)]


@pytest.mark.parametrize("seed", range(12))
def test_the_verdicts_do_not_depend_on_how_the_records_arrive(session, tmp_path, seed):
    """Random histories of starts, resumes, epochs, memory and inference records, stored three ways: the whole
    output in one cycle, in cycles of random lengths, and one record at a time in one transaction (as a log import
    stores them). Each way gives the verdicts of the rule replayed over the whole history, the history the brief's
    rule gives, and the summary of the epochs that count."""
    rng = random.Random(seed)
    records: list[tuple[str, int, int]] = [("start", 0, 0)]
    for _ in range(rng.randrange(4, 40)):
        kind = rng.choice(["start", "resume", "epoch", "epoch", "epoch", "memory", "memory", "inference"])
        records.append((kind, rng.randrange(0 if kind == "resume" else 1, 6), rng.randrange(2)))
    lines = [rule_line(*record) + "\n" for record in records]
    want = expected_history(records)
    experiment = experiment_row(session)

    def made(name: str) -> Run:
        (tmp_path / name).mkdir()
        return run_row(session, experiment, tmp_path / name)

    whole, in_cycles, one_by_one = made("whole"), made("cycles"), made("records")
    append(whole, "".join(lines))
    cycle(session, whole)
    cut = 0
    while cut < len(lines):
        cut, start = cut + rng.randrange(1, 6), cut
        append(in_cycles, "".join(lines[start:cut]))
        cycle(session, in_cycles)
    summary = RunSummary(run_id=one_by_one.id)
    offset = 0
    for line in lines:
        record = parse_metric_line(line)
        assert record is not None
        store_record(session, one_by_one, summary, offset, record)
        offset += len(line)
    session.add(summary)
    session.commit()

    for each in (whole, in_cycles, one_by_one):
        metrics = stored(session, each)
        placed = [metric for metric in metrics if metric.kind in PLACED_KINDS]
        replayed = counting((m.offset, place_of(m.kind, m.epoch, m.record)) for m in metrics)
        assert {metric.offset for metric in placed if metric.counts} == replayed
        assert {metrics[i].offset for i in want} == {m.offset for m in placed if m.kind == "epoch" and m.counts}
        assert [point.epoch for point in epoch_histories(session, [each.id])[each.id]] == [records[i][1] for i in want]
        summary = session.get(RunSummary, each.id)
        assert summary.epochs_done == len(want)
        assert summary.epoch_time_sum_s == pytest.approx(sum(records[i][1] + 0.5 for i in want))
        assert summary.first_epoch_time_s == (records[want[0]][1] + 0.5 if want else None)
        assert summary.last_train_loss == (pytest.approx(1 / records[want[-1]][1]) if want else None)
