"""The runs that waited for a training run that ended without completing: ended by the monitor with the training's
end in words (Slurm's commands are stand-ins, the subprocess boundary), and the words themselves."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlmodel import Session

from contract.states import FailureKind, RunState
from server.models import Run, utcnow, waiting_for_training
from server.scheduler.slurm import SlurmScheduler
from server.services.dependencies import ended_words, nothing_to_infer
from server.services.dependents import end_dependents
from server.web.templating import reason_text
from tests.factories import experiment_row, run_row, spec
from tests.server.api.test_inference_after import FakeSlurm


def _pair(session: Session, tmp_path: Any, training_state: RunState, dependent_state: RunState, **dependent: Any):
    training = run_row(session, experiment_row(session, "training"), tmp_path / "t", run_spec=spec(model="gpt"),
                       state=training_state, job_id="4242", ended_at=utcnow())  # fmt: skip
    values = {"job_id": "4243", "after_run": training.id, "after_job": "4242", **dependent}
    run = run_row(session, experiment_row(session, "inference"), tmp_path / "i", run_spec=spec(), state=dependent_state,
                  **values)  # fmt: skip
    return training, run


def _ended(engine: Any, slurm: FakeSlurm, run: Run) -> Run:
    end_dependents(engine, SlurmScheduler(slurm))
    with Session(engine) as session:
        found = session.get(Run, run.id)
        assert found is not None
        return found


def test_a_dependent_slurm_cancelled_gets_the_trainings_end(engine, session, tmp_path):
    training, run = _pair(session, tmp_path, RunState.out_of_memory, RunState.cancelled, scheduler_reason="Dependency")
    slurm = FakeSlurm()
    ended = _ended(engine, slurm, run)
    assert ended.message == (
        f"training run {training.id} failed (out of memory): nothing to infer from; "
        f"resubmit training run {training.id}, then clone this experiment"
    )
    assert slurm.calls == []  # Slurm ended it already
    assert reason_text(ended) == ended.message


def test_a_dependent_still_pending_is_cancelled_once_with_the_reason(engine, session, tmp_path):
    training, run = _pair(session, tmp_path, RunState.cancelled, RunState.pending, scheduler_reason="Dependency")
    slurm = FakeSlurm()
    ended = _ended(engine, slurm, run)
    assert slurm.named("scancel") == [["scancel", "4243"]]
    assert ended.message is not None and f"training run {training.id} was cancelled: nothing to infer" in ended.message
    # Until the poll sees the job cancelled, the next cycles do not cancel it again.
    _ended(engine, slurm, run)
    assert len(slurm.named("scancel")) == 1


def test_a_dependent_held_for_a_slot_is_cancelled_without_a_job(engine, session, tmp_path):
    _training, run = _pair(session, tmp_path, RunState.timeout, RunState.created, job_id=None, waiting=True,
                           message="waiting for a slot")  # fmt: skip
    slurm = FakeSlurm()
    ended = _ended(engine, slurm, run)
    assert (ended.state, slurm.calls) == (RunState.cancelled, [])
    assert ended.message is not None and "reached its time limit: nothing to infer from" in ended.message


@pytest.mark.parametrize("training_state", [RunState.running, RunState.completed, RunState.pending])
def test_nothing_happens_while_the_training_runs_or_once_it_completed(engine, session, tmp_path, training_state):
    _training, run = _pair(session, tmp_path, training_state, RunState.pending, scheduler_reason="Dependency")
    slurm = FakeSlurm()
    assert (_ended(engine, slurm, run).message, slurm.calls) == (None, [])


def test_a_training_slurm_may_still_requeue_is_given_time(engine, session, tmp_path):
    training, run = _pair(session, tmp_path, RunState.node_fail, RunState.pending, scheduler_reason="Dependency")
    slurm = FakeSlurm()
    assert (_ended(engine, slurm, run).message, slurm.calls) == (None, [])
    training.ended_at = utcnow() - timedelta(minutes=11)
    session.add(training)
    session.commit()
    assert "failed (a node failed)" in (_ended(engine, slurm, run).message or "")


def test_a_run_cancelled_by_its_user_keeps_its_own_end(engine, session, tmp_path):
    _training, run = _pair(session, tmp_path, RunState.failed, RunState.cancelled, scheduler_reason="None")
    assert _ended(engine, FakeSlurm(), run).message is None


def test_the_words():
    run = Run(id="abc", experiment_id="e", position=0, scheduler="slurm", run_dir="/x", spec={}, state=RunState.failed)
    assert ended_words(run) == "failed"
    run.failure_kind = FailureKind.collective_timeout
    assert nothing_to_infer(run).startswith("training run abc failed (collective timeout): nothing to infer from")
    assert waiting_for_training(RunState.pending, "Dependency", "abc") == "waiting for training run abc to end"
    assert waiting_for_training(RunState.submitted, None, "abc") == "waiting for training run abc to end"
    assert waiting_for_training(RunState.pending, "Priority", "abc") is None  # the training completed: Slurm's own
    assert waiting_for_training(RunState.running, None, "abc") is None
    assert waiting_for_training(RunState.pending, "Dependency", None) is None
