"""The experiment page's "Rerun the failed" form: offered to whoever may change the experiment, with the kinds of
its failed runs not rerun yet; to nobody else, and not once every failed run has its rerun."""

from __future__ import annotations

from typing import Any

from sqlmodel import Session

from contract.states import FailureKind, RunState
from server.services import users
from tests.conftest import bearer
from tests.factories import experiment_row, run_row


def test_the_form_offers_the_kinds_of_the_failed_runs_to_the_owner_alone(client, session: Session, tmp_path):
    users.add_user(session, "alice")
    alice, bob = bearer(users.issue_token(session, "alice")), bearer(users.add_user(session, "bob"))
    experiment = experiment_row(session, owner="alice", sharing="everyone")
    oom: dict[str, Any] = {"state": RunState.out_of_memory, "failure_kind": FailureKind.out_of_memory, "owner": "alice"}
    first = run_row(session, experiment, tmp_path / "a", **oom)
    second = run_row(session, experiment, tmp_path / "b", position=1, **oom)
    unclassified = run_row(session, experiment, tmp_path / "c", position=2, state=RunState.failed, owner="alice")
    run_row(session, experiment, tmp_path / "d", position=3, state=RunState.completed, owner="alice")

    page = client.get(f"/experiments/{experiment.id}", headers=alice).text
    assert 'id="rerun-form"' in page and "js/reruns.js" in page
    assert 'value="out_of_memory"> out_of_memory (2)' in page
    assert "not yet classified (1)" in page
    assert 'id="rerun-form"' not in client.get(f"/experiments/{experiment.id}", headers=bob).text

    # A failed run with a rerun is offered no more; once each has one, neither is the form.
    run_row(session, experiment, tmp_path / "e", position=4, state=RunState.completed, rerun_of=first.id)
    assert "out_of_memory (1)" in client.get(f"/experiments/{experiment.id}", headers=alice).text
    for position, run in enumerate((second, unclassified), start=5):
        run_row(session, experiment, tmp_path / str(position), position=position, state=RunState.completed,
                rerun_of=run.id)  # fmt: skip
    assert 'id="rerun-form"' not in client.get(f"/experiments/{experiment.id}", headers=alice).text
