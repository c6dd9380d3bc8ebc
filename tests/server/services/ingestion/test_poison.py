"""Output no run can stop ingestion with (issue 30): a poison line (a non-finite figure, nesting deeper than any
parser's stack, an integer beyond 64 bits) is a counted parse problem with its reason kept on its run; whatever else
fails while one run is read stops that run's reading with an event saying where and why, and every other run is read
on in the same cycle, on the live batch path as on a run read alone; and a run that prints past the per-run limits
is read no further, with a flag saying so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlmodel import Session, col, select

from contract.records import parse_metric_line
from contract.rundir import OUTPUT_FILE
from contract.states import RunState
from server.models import Run, RunEvent, RunEventKind, utcnow
from server.services import flags
from server.services.ingestion import OutputLimits, ingest_runs, parsing
from tests.factories import experiment_row, run_row
from tests.server.services.ingestion.output import START, epoch_line, stored

EPOCH = {"v": 1, "kind": "epoch", "epoch": 1, "train_loss": 0.5, "epoch_time_s": 1.0}
# A fabric probe's measurement (contract.records.FabricRecord), honest: 1 KiB all-reduced over 2 ranks in 0.1 ms.
FABRIC = {"v": 1, "kind": "fabric", "tier": "intra_node", "ranks": 2, "backend": "gloo", "nodes": 1,
          "processes_per_node": 2, "collective": "all_reduce", "nbytes": 1024, "seconds": 1e-4, "iterations": 5,
          "algbw_bytes_per_s": 1.024e7, "busbw_bytes_per_s": 1.024e7}  # fmt: skip
FABRIC_FIT = {"v": 1, "kind": "fabric_fit", "tier": "inter_node", "ranks": 2, "backend": "nccl", "nodes": 2,
              "processes_per_node": 1, "alpha_s": 1e-5, "beta_bytes_per_s": 1e9, "points": 10}  # fmt: skip
POISON = {
    "fabric_infinite_time": json.dumps({**FABRIC, "seconds": float("inf")}),
    "fabric_size_beyond_bound": json.dumps({**FABRIC, "nbytes": 2**50}),
    "fabric_bandwidth_that_its_time_does_not_give": json.dumps({**FABRIC, "busbw_bytes_per_s": 1e15}),
    "fabric_fit_nan_latency": json.dumps({**FABRIC_FIT, "alpha_s": float("nan")}),
    "fabric_fit_of_an_unknown_tier": json.dumps({**FABRIC_FIT, "tier": "rack"}),
    # What Python's json.dumps writes for float("nan") by default.
    "nan_epoch_time": json.dumps(
        {"v": 1, "kind": "epoch", "epoch": 1, "train_loss": 0.5, "epoch_time_s": float("nan")}
    ),
    "deep_nesting": '{"v": 1, "kind": "epoch", "epoch": 1, "train_loss": 0.5, "epoch_time_s": 1.0, "x": '
    + "[" * 100_000
    + "]" * 100_000
    + "}",
    "integer_beyond_64_bits": json.dumps(
        {"v": 1, "kind": "epoch", "epoch": 2**63, "train_loss": 0.5, "epoch_time_s": 1.0}
    ),
    # FLOPs and a peak no model or device has: MFU would divide them (contract.records' bounds).
    "flops_beyond_any_model": json.dumps(
        {"v": 1, "kind": "epoch", "epoch": 1, "train_loss": 0.5, "epoch_time_s": 1.0, "model_flops_per_sample": 1e30}
    ),
    "peak_beyond_any_device": json.dumps(
        {
            "v": 1,
            "kind": "compute",
            "device": "cuda",
            "precision": "bf16",
            "measured_tflops": 1e9,
            "sizes": [8],
            "size_tflops": [1e9],
            "seconds": 1.0,
        }
    ),
}
REASONS = {
    "fabric_infinite_time": "seconds: inf is not a finite number",
    "fabric_size_beyond_bound": "nbytes: Input should be less than or equal to 68719476736",
    "fabric_bandwidth_that_its_time_does_not_give": "busbw_bytes_per_s 1e+15 is not what nbytes and seconds give",
    "fabric_fit_nan_latency": "alpha_s: nan is not a finite number",
    "fabric_fit_of_an_unknown_tier": "tier: Input should be 'intra_node' or 'inter_node'",
    "nan_epoch_time": "epoch_time_s: nan is not a finite number",
    "deep_nesting": "nested more than",
    "integer_beyond_64_bits": "epoch: the integer is beyond 64 bits",
    "flops_beyond_any_model": "epoch.model_flops_per_sample: Input should be less than or equal to 1000000000000000000",
    "peak_beyond_any_device": "compute.measured_tflops: Input should be less than or equal to 100000",
}


def two_runs(session: Session, tmp_path: Path, state: RunState, poisoned_text: str) -> tuple[Run, Run]:
    """A poisoned run and an ordinary one beside it, both under way or both ended."""
    experiment = experiment_row(session)
    made = []
    for position, text in enumerate([poisoned_text, f"{START}\n{epoch_line(1)}\n{epoch_line(2)}\n"]):
        directory = tmp_path / f"run{position}"
        directory.mkdir()
        (directory / OUTPUT_FILE).write_text(text)
        made.append(run_row(session, experiment, directory, state=state, position=position, started_at=utcnow()))
    return made[0], made[1]


@pytest.mark.parametrize("state", [RunState.running, RunState.completed])
@pytest.mark.parametrize("poison", sorted(POISON))
def test_a_poison_line_is_a_parse_problem_of_its_run_and_stops_no_other(engine, session, tmp_path, poison, state):
    """Through the monitor's entry point, on the live batch path (running) and a run read alone (completed): the
    poisoned run's good records are stored around its poison line, which is one parse problem whose reason is kept;
    the ordinary run is read whole in the same cycle."""
    text = f"{START}\n[METRIC] {POISON[poison]}\n{epoch_line(3)}\n"
    poisoned, ordinary = two_runs(session, tmp_path, state, text)

    ingest_runs(engine, lambda _run_id: None)

    for run in (poisoned, ordinary):
        session.refresh(run)
    assert [m.kind for m in stored(session, ordinary)] == ["start", "epoch", "epoch"]
    assert [m.kind for m in stored(session, poisoned)] == ["start", "epoch"]
    assert poisoned.parse_errors == 1
    assert poisoned.first_parse_error is not None
    assert poisoned.first_parse_error.startswith(f"unreadable metric line at byte {len(START) + 1}: ")
    assert REASONS[poison] in poisoned.first_parse_error
    assert poisoned.log_offset == len(text.encode())
    assert poisoned.ingest_stopped is None


def test_a_non_finite_loss_is_kept_where_the_database_holds_it_and_a_parse_problem_where_not(engine, session, run):
    """A diverged training's NaN loss: SQLite keeps it as printed (as before); PostgreSQL's json type cannot, so
    there it is a parse problem, never a failure of the run's reading."""
    Path(run.run_dir, OUTPUT_FILE).write_text('[METRIC] {"v":1,"kind":"step","epoch":1,"step":1,"train_loss":NaN}\n')
    run.state, run.started_at = RunState.running, utcnow()
    session.add(run)
    session.commit()
    ingest_runs(engine, lambda _run_id: None)
    session.refresh(run)
    kept = engine.dialect.name == "sqlite"
    assert (len(stored(session, run)), run.parse_errors, run.ingest_stopped) == (int(kept), int(not kept), None)


@pytest.mark.parametrize("state", [RunState.running, RunState.completed])
def test_an_exception_reading_one_run_stops_that_run_with_an_event_and_the_others_go_on(
    engine, session, tmp_path, monkeypatch, state
):
    """Whatever no check foresaw (here the parser raising for one run's lines): that run's reading stops at the
    offset it had, with an event naming the byte and the reason; the other run's records are all stored in the same
    cycle, though on the live path both were read in one transaction; the next cycle reads the stopped run no more."""
    poisoned, ordinary = two_runs(session, tmp_path, state, f"{START}\n[METRIC] boom=1\n")
    parse = parse_metric_line

    def raising(line: str, **kwargs: bool):
        if "boom" in line:
            raise RuntimeError("the parser broke")
        return parse(line, **kwargs)

    monkeypatch.setattr(parsing, "parse_metric_line", raising)
    ingest_runs(engine, lambda _run_id: None)
    ingest_runs(engine, lambda _run_id: None)

    for run in (poisoned, ordinary):
        session.refresh(run)
    assert [m.kind for m in stored(session, ordinary)] == ["start", "epoch", "epoch"]
    assert stored(session, poisoned) == []
    assert poisoned.log_offset == 0
    assert poisoned.ingest_stopped is not None
    assert "from byte 0" in poisoned.ingest_stopped
    assert "RuntimeError: the parser broke" in poisoned.ingest_stopped
    assert poisoned.ingest_done is state.is_final  # an ended run's reading is over
    assert ordinary.ingest_stopped is None
    found = session.exec(select(RunEvent).where(RunEvent.run_id == poisoned.id)).all()
    assert [(event.kind, event.detail is not None and event.detail.startswith("at byte 0: ")) for event in found] == [
        (RunEventKind.ingest_stopped, True)
    ]


def test_a_run_past_the_limit_of_records_is_read_no_further_with_a_flag(engine, session, tmp_path):
    """The limit counts records stored: the records before it are stored, the offset stops at the first one not,
    an event says where, the run raises the flag whose sentence names the limit and what to do, and the next cycle
    reads nothing more of it, though it prints on."""
    lines = [START, *(epoch_line(epoch) for epoch in range(1, 6))]
    run, ordinary = two_runs(session, tmp_path, RunState.running, "\n".join(lines) + "\n")
    limits = OutputLimits(records=3, output_bytes=2**40)

    ingest_runs(engine, lambda _run_id: None, limits)
    with Path(run.run_dir, OUTPUT_FILE).open("a") as handle:
        handle.write(epoch_line(6) + "\n")
    ingest_runs(engine, lambda _run_id: None, limits)

    session.refresh(run)
    assert [m.kind for m in stored(session, run)] == ["start", "epoch", "epoch"]
    assert run.records_read == 3
    assert run.log_offset == len(("\n".join(lines[:3]) + "\n").encode())
    assert run.ingest_stopped == flags.records_limit(3)
    assert flags.check_ingest_stopped(run.ingest_stopped) == flags.ingest_stopped(flags.records_limit(3))
    assert "SCALELAB_MAX_RECORDS_PER_RUN" in flags.ingest_stopped(run.ingest_stopped).message
    assert [m.kind for m in stored(session, ordinary)] == ["start", "epoch", "epoch"]
    events = session.exec(select(RunEvent.kind).where(RunEvent.run_id == run.id)).all()
    assert events == [RunEventKind.ingest_stopped]


def test_a_run_past_the_limit_of_output_bytes_is_read_no_further(engine, session, tmp_path):
    run, ordinary = two_runs(session, tmp_path, RunState.completed, f"{START}\n{epoch_line(1)}\n{epoch_line(2)}\n")
    limits = OutputLimits(records=10**6, output_bytes=1)

    ingest_runs(engine, lambda _run_id: None, limits)  # one read, then the limit
    ingest_runs(engine, lambda _run_id: None, limits)

    session.refresh(run)
    assert run.ingest_stopped == flags.output_bytes_limit(1)
    assert run.ingest_done  # ended: its reading is over
    assert session.exec(select(col(Run.ingest_done)).where(Run.id == ordinary.id)).one()
