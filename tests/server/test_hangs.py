"""The hang watchdog in the monitor's cycle, on the local scheduler's real processes: a job that stops printing is
flagged, its rank's stacks are read, and on_hang decides: cancel (it ends failed, hung) or keep (it runs on)."""

from __future__ import annotations

import sys
import time

from sqlmodel import Session, col, select

from contract.states import FailureKind, RunState
from server.models import Run, RunEvent, utcnow
from server.models.experiment import on_hang_of
from server.monitor import Monitor
from server.runstate import HUNG_MESSAGE, apply_status
from server.scheduler import JobStatus
from server.scheduler.local import LocalScheduler
from server.services.hangs import HangRules, records_arrived
from server.services.stalls import StallRule
from tests.factories import ROOT, experiment_request, experiment_row, run_row

# A floor of a second: the program prints every 0.2 s, then hangs in stuck().
RULES = HangRules(StallRule(factor=4, floor_s=1, ceiling_s=30), dump_wait_s=0.5)
PROGRAM = """
import sys, time
sys.path.insert(0, {root!r})
from contract import stacks
stacks.install({run_dir!r})
def stuck():
    time.sleep(600)
for step in range(1, 6):
    print('[METRIC] {{"v":1,"kind":"step","epoch":1,"step":%d,"train_loss":1.0}}' % step, flush=True)
    time.sleep(0.2)
stuck()
"""


def hanging_run(session, tmp_path, scheduler: LocalScheduler, **request) -> Run:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "hang.py").write_text(PROGRAM.format(root=str(ROOT), run_dir=str(run_dir)))
    script = run_dir / "job.sbatch"
    script.write_text(f"#!/bin/bash\n{sys.executable} hang.py\n")
    job_id = scheduler.submit(script, run_dir)
    experiment = experiment_row(session, request={"name": "hangs", **request})
    return run_row(session, experiment, run_dir, job_id=job_id, scheduler=scheduler.name)


def cycle_until(monitor: Monitor, engine, run_id: str, done, timeout_s: float = 60) -> Run:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        monitor.cycle()
        with Session(engine) as session:
            run = session.get(Run, run_id)
            if run is not None and done(run):
                return run
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout_s} s: {run}")


def event_kinds(engine, run_id: str) -> list[str]:
    with Session(engine) as session:
        return list(session.exec(select(RunEvent.kind).where(RunEvent.run_id == run_id).order_by(col(RunEvent.id))))


def test_a_hung_job_is_dumped_cancelled_and_ends_failed_hung(engine, session, tmp_path, local_scheduler):
    run = hanging_run(session, tmp_path, local_scheduler)
    monitor = Monitor(engine, local_scheduler, 0.1, hang_rules=RULES)
    done = cycle_until(monitor, engine, run.id, lambda run: run.state.is_final and run.ingest_done)
    assert (done.state, done.failure_kind) == (RunState.failed, FailureKind.hung), done
    assert done.failure_detail is not None
    assert done.failure_detail.startswith("every rank that answered (0) is at hang.py:7 in stuck"), done.failure_detail
    kinds = event_kinds(engine, run.id)
    assert kinds.index("stalled") < kinds.index("hang_cancelled") < len(kinds) - 1, kinds  # then its end
    assert "hung" in (done.message or "")


def test_keep_leaves_a_stalled_run_running_with_its_verdict(engine, session, tmp_path, local_scheduler):
    run = hanging_run(session, tmp_path, local_scheduler, on_hang="keep")
    monitor = Monitor(engine, local_scheduler, 0.1, hang_rules=RULES)
    try:
        judged = cycle_until(monitor, engine, run.id, lambda run: run.stall_judged)
        for _ in range(5):
            monitor.cycle()
        with Session(engine) as check:
            kept = check.get(Run, run.id)
        assert kept is not None and kept.state is RunState.running and kept.failure_kind is None
        assert kept.stalled_at is not None and kept.failure_detail == judged.failure_detail
        assert "stuck" in (kept.failure_detail or "")
        assert "hang_cancelled" not in event_kinds(engine, run.id)
    finally:
        local_scheduler.cancel(run.job_id or "")


def test_on_hang_is_kept_in_the_request_and_refused_by_name(client):
    refused = client.post("/api/experiments", json=experiment_request(on_hang="wait"))
    assert refused.status_code == 422
    assert any(error["loc"] == ["body", "on_hang"] for error in refused.json()["detail"]), refused.text
    kept = client.post("/api/experiments", json=experiment_request(on_hang="keep", grid={"gpus": [1]}))
    assert kept.status_code == 201, kept.text
    assert on_hang_of(kept.json()["request"]) == "keep"
    assert on_hang_of({"name": "from before on_hang"}) == "cancel"


def test_records_coming_again_end_a_kept_stall_but_not_a_cancelled_one():
    run = Run(experiment_id="e", position=0, scheduler="local", run_dir="/nowhere", spec={})
    run.stalled_at, run.stall_judged = utcnow(), True
    records_arrived(run, progressed=True)
    assert run.stalled_at is None
    assert not run.stall_judged
    assert run.record_arrivals is not None and len(run.record_arrivals) == 1
    run.stalled_at, run.stall_judged, run.failure_kind = utcnow(), True, FailureKind.hung
    records_arrived(run, progressed=True)  # cancelled already: its end is on the way, and says hung
    assert run.stalled_at is not None and run.stall_judged


def judged_hung(**fields: object) -> Run:
    """A running run the watchdog judged hung and is cancelling (on_hang: cancel)."""
    return Run.model_validate(
        {"experiment_id": "e", "position": 0, "scheduler": "local", "run_dir": "/nowhere", "spec": {},
         "state": RunState.running, "failure_kind": FailureKind.hung, **fields}
    )  # fmt: skip


def test_a_job_that_completes_before_the_watchdog_s_cancel_reaches_it_has_no_failure_kind():
    judged = judged_hung(failure_detail="rank 1 is at train.py:212 in stuck")
    apply_status(judged, JobStatus(RunState.completed, "COMPLETED", exit_code="0:0"))
    assert (judged.state, judged.failure_kind) == (RunState.completed, None)
    assert judged.failure_detail == "rank 1 is at train.py:212 in stuck"
    cancelled = judged_hung()
    apply_status(cancelled, JobStatus(RunState.cancelled, "CANCELLED", exit_code="0:15"))
    assert (cancelled.state, cancelled.failure_kind, cancelled.message) == (RunState.failed, "hung", HUNG_MESSAGE)


def test_a_run_starts_up_until_its_first_progress_record():
    # Start, compute and memory records seconds apart, then minutes compiling the first step: no pace from them.
    run = Run(experiment_id="e", position=0, scheduler="local", run_dir="/nowhere", spec={})
    records_arrived(run, progressed=False)
    records_arrived(run, progressed=False)
    assert not run.record_arrivals
    records_arrived(run, progressed=True)
    records_arrived(run, progressed=False)  # once it progresses, every record keeps its pace
    assert run.record_arrivals is not None and len(run.record_arrivals) == 2
