"""A run's states: which the scheduler is asked about, how the scheduler's view moves a run, and who may do what.

The state names are the contract's (contract/states.py); the rules over them are the server's, written here once:
the API refuses, the pages hide their buttons and the services act by the same functions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from contract.states import FINAL_STATES, FailureKind, RunState
from server.errors import NotAllowed
from server.models import Run, RunEventKind, User, utcnow
from server.runtimes import Runtime, runtime_for
from server.scheduler import JobStatus, states

# States the scheduler is asked about each monitor cycle.
LIVE_STATES = frozenset({RunState.submitted, RunState.pending, RunState.running})
# Final states a run can be submitted again from (a completed run is cloned instead).
RESUBMITTABLE_STATES = FINAL_STATES - {RunState.completed}
# Final states of a run that failed at running: each gets a failure kind once its output is read, and "rerun the
# failed" repeats them. Not submit_failed (it never ran),
# cancelled (stopped by hand) or preempted (Slurm requeues it): nothing about their specs failed; resubmit them.
FAILED_STATES = frozenset({RunState.failed, RunState.out_of_memory, RunState.timeout, RunState.node_fail})
# Final states Slurm may still take back by requeueing the job (--requeue): the monitor keeps asking a while.
REQUEUEABLE_STATES = frozenset({RunState.preempted, RunState.node_fail})


# ---- who may do what ---------------------------------------------------------------------------------------------


def may_change(user: User | None, owner: str | None) -> bool:
    """Everyone signed in may look; only the owner or an admin may cancel, resubmit, run again or delete."""
    return user is not None and (user.is_admin or (owner is not None and owner == user.name))


def require_owner(user: User, owner: str | None, what: str) -> None:
    """NotAllowed unless the user may change the thing."""
    if not may_change(user, owner):
        whose = f"{owner}'s" if owner else "from before there were users, so an admin's"
        raise NotAllowed(f"{what} is {whose} to change: only its owner or an admin may")


def may_run_programs(user: User, runs_as_user: bool, for_all_as_service_account: bool) -> bool:
    """Whether the user may run a program (kind program: any command). Where jobs run as their users, a program can
    do no more than its user could at a shell: everyone may. Where every job runs as the service's own account, a
    program could do anything that account can (open the database, make its user an admin): admins only, unless the
    operator made everyone equal to that account (SCALELAB_PROGRAMS_FOR_ALL_AS_SERVICE_ACCOUNT)."""
    return runs_as_user or for_all_as_service_account or user.is_admin


PROGRAMS_ADMIN_ONLY_WHY = (
    "here every job runs as the service's own account, not as its user, so a program could do anything that "
    "account can (read every experiment, change the database): only admins may run programs. Ask an admin to run "
    "it, or run scalelab's built-in worker (kind train); the operator can let jobs run as their users (the "
    "slurmrestd scheduler), where everyone may run programs"
)


def why_no_programs(user: User, runs_as_user: bool, for_all_as_service_account: bool) -> str | None:
    """Why the user may not run a program, in words that say what to do instead; None where they may."""
    if may_run_programs(user, runs_as_user, for_all_as_service_account):
        return None
    return f"{user.name} may not run a program: {PROGRAMS_ADMIN_ONLY_WHY}"


def why_not_cancel(run: Run) -> str | None:
    if run.state.is_final:
        return f"run {run.id} has already ended ({run.state}); there is nothing to cancel"
    return None


def why_not_resubmit(run: Run) -> str | None:
    if run.origin == "imported":
        return f"run {run.id} was imported from a log: it cannot run again"
    if run.state not in RESUBMITTABLE_STATES:
        why = "it is still live: cancel it first" if not run.state.is_final else "it completed: clone it instead"
        return f"run {run.id} cannot be resubmitted: {why}"
    return None


def why_not_rerun(run: Run, runtime: Runtime | None) -> str | None:
    """Why the run cannot be run again pinned to its image's digest (the digest's form is checked on submitting)."""
    if run.origin == "imported":
        return f"run {run.id} was imported from a log: it cannot run again"
    if run.image is None or run.image_digest is None:
        return f"run {run.id} did not record the digest of an image it ran in: it cannot be pinned"
    if runtime is None:
        return f"run {run.id}'s cluster profile {run.profile} is no longer offered: it cannot run again there"
    if not runtime_for(runtime).pinnable:
        return (
            f"run {run.id}'s cluster profile runs the worker with runtime {runtime}, whose image the batch script "
            "does not name: it cannot be pinned to a digest"
        )
    return None


def failed_not_rerun(runs: Sequence[Run]) -> list[Run]:
    """The experiment's runs (all of them, given as `runs`) that "rerun the failed" repeats unless told which: those
    that failed at running and have no rerun yet (asking again reruns what still failed: the reruns that did)."""
    repeated = {run.rerun_of for run in runs if run.rerun_of}
    return [run for run in runs if run.state in FAILED_STATES and run.origin != "imported" and run.id not in repeated]


def why_not_delete(run: Run) -> str | None:
    if not run.state.is_final:
        return f"run {run.id} is {run.state}: cancel it first"
    return None


# ---- transitions -------------------------------------------------------------------------------------------------


class SchedulerView(Protocol):
    """What a run keeps of the scheduler's view of its job: a Run, or a row of those columns alone."""

    state: RunState
    scheduler_state: str | None
    scheduler_reason: str | None


def status_unchanged(run: SchedulerView, status: JobStatus) -> bool:
    """Whether the scheduler says what the run already holds: nothing to apply."""
    return (run.state, run.scheduler_state, run.scheduler_reason) == (status.state, status.raw_state, status.reason)


HUNG_MESSAGE = (
    "hung: it printed no record for longer than its bound, and was cancelled once every rank's stacks were read "
    "(on_hang: cancel); its failure detail says which rank was where"
)


def apply_status(run: Run, status: JobStatus) -> RunEventKind | None:
    """Move the run to the scheduler's view of its job; the event to record, or None if nothing changed."""
    if status_unchanged(run, status):
        return None
    # Slurm took the job back (preemption, node failure, scontrol requeue, or the job itself after saving at its
    # time limit): it runs again and its output is read on.
    requeued = (run.state.is_final or run.state is RunState.running) and status.state is RunState.pending
    if run.state.is_final and not status.state.is_final:
        run.ended_at = run.exit_code = None
        run.failure_kind = run.failure_detail = None  # it runs again: how it ends is to be seen
        run.ingest_done = False
    if status.state is RunState.running and run.started_at is None:
        run.started_at = utcnow()
    if status.state.is_final and not run.state.is_final:
        run.ended_at = utcnow()
        run.exit_code = status.exit_code
        run.message = states.end_message(status.state, status.reason) or run.message
    run.state, run.scheduler_state, run.scheduler_reason = status.state, status.raw_state, status.reason
    if status.state is RunState.cancelled and run.failure_kind == FailureKind.hung:
        # The hang watchdog cancelled it (on_hang: cancel): it failed, hung, and was not cancelled by anyone.
        run.state = RunState.failed
        run.message = HUNG_MESSAGE
    elif status.state is RunState.completed and run.failure_kind == FailureKind.hung:
        # It ended on its own before the watchdog's cancel reached it: it did not fail, so it has no failure kind;
        # the verdict stays beside its stacks (as for on_hang: keep), and its events say it was judged hung.
        run.failure_kind = None
    return RunEventKind.requeued if requeued or status.raw_state.startswith("REQUEUE") else RunEventKind.state


def end_unknown(run: Run, message: str) -> RunEventKind:
    """End a live run whose job the scheduler no longer knows at all: failed, since nothing says it completed; the
    scheduler's last state and reason stay as it last said them."""
    run.state = RunState.failed
    run.ended_at = utcnow()
    run.message = message
    return RunEventKind.state
