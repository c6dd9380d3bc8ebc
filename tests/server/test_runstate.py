"""The run state machine: how the scheduler's view moves a run, and who may do what to a run."""

from __future__ import annotations

from contract.states import RunState
from server.models import RunEventKind, User
from server.runstate import apply_status, may_change, why_not_cancel, why_not_delete, why_not_rerun, why_not_resubmit
from server.runtimes import Runtime
from server.scheduler import JobStatus
from tests.factories import experiment_row, run_row


def test_a_job_slurm_takes_back_runs_again_and_is_read_on(session, tmp_path):
    run = run_row(session, experiment_row(session), tmp_path, state=RunState.running, job_id="42")
    assert apply_status(run, JobStatus(RunState.preempted, "PREEMPTED", exit_code="0:15")) is RunEventKind.state
    run.ingest_done = True
    assert bool(run.ended_at) and run.state.is_final
    assert apply_status(run, JobStatus(RunState.pending, "PENDING", "BeginTime")) is RunEventKind.requeued
    assert run.state is RunState.pending
    assert (run.ended_at, run.exit_code, run.ingest_done) == (None, None, False)
    assert apply_status(run, JobStatus(RunState.pending, "PENDING", "BeginTime")) is None  # nothing changed


def test_runs_slurm_ended_say_what_happened_and_what_to_do(session, tmp_path):
    """The statuses as the real two-node cluster gives them (tests/e2e/test_slurm_states.py makes each happen)."""
    expected = {
        JobStatus(RunState.out_of_memory, "OUT_OF_MEMORY", "OutOfMemory", "0:125"): "more memory",
        JobStatus(RunState.node_fail, "NODE_FAIL", "NodeDown", "0:0"): "A node of the job failed",
        JobStatus(RunState.timeout, "TIMEOUT", "TimeLimit", "0:0"): "longer resources.time_limit",
    }
    for position, (status, words) in enumerate(expected.items()):
        run = run_row(
            session, experiment_row(session), tmp_path, state=RunState.running, job_id=str(position), position=position
        )
        assert apply_status(run, status)
        assert run.message is not None and words in run.message and "Resubmit it" in run.message
        assert run.message.endswith(f"(Slurm's reason: {status.reason})")
    failed = run_row(session, experiment_row(session), tmp_path, state=RunState.running, job_id="9", message="kept")
    assert apply_status(failed, JobStatus(RunState.failed, "FAILED", None, "1:0"))
    assert failed.message == "kept"  # a failure's message is the worker's own, from its end record


def test_only_the_owner_or_an_admin_may_change_a_run():
    alice, admin = User(name="alice"), User(name="root", is_admin=True)
    assert may_change(alice, "alice") and may_change(admin, "alice") and may_change(admin, None)
    assert not may_change(alice, "bob") and not may_change(alice, None) and not may_change(None, "alice")


def test_each_action_says_why_a_run_in_a_state_refuses_it(session, tmp_path):
    experiment = experiment_row(session)
    live = run_row(session, experiment, tmp_path / "a", state=RunState.running, job_id="1")
    failed = run_row(session, experiment, tmp_path / "b", state=RunState.failed, job_id="2", position=1)
    done = run_row(session, experiment, tmp_path / "c", state=RunState.completed, job_id="3", position=2)
    assert why_not_cancel(live) is None and why_not_delete(live) == f"run {live.id} is running: cancel it first"
    assert "already ended" in (why_not_cancel(failed) or "") and why_not_delete(failed) is None
    assert why_not_resubmit(failed) is None
    assert "cancel it first" in (why_not_resubmit(live) or "") and "clone it instead" in (why_not_resubmit(done) or "")
    failed.origin = "imported"
    assert "imported from a log" in (why_not_resubmit(failed) or "")


def test_a_run_is_pinned_again_only_with_a_digest_on_a_runtime_that_names_its_image(session, tmp_path):
    run = run_row(session, experiment_row(session), tmp_path, state=RunState.completed, job_id="1", profile="p")
    assert "did not record the digest" in (why_not_rerun(run, Runtime.podman) or "")
    run.image, run.image_digest = "localhost/scalelab-worker:0.1.0", "sha256:" + "0" * 64
    assert why_not_rerun(run, Runtime.podman) is None and why_not_rerun(run, Runtime.apptainer) is None
    assert "does not name" in (why_not_rerun(run, Runtime.cscs) or "")
    assert "no longer offered" in (why_not_rerun(run, None) or "")
