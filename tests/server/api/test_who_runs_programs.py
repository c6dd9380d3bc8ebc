"""Who may run a program (any command) follows who the job runs as: where every job runs as the service's own
account, a program could do anything that account can (open the database and make its user an admin), so only admins
may, unless the operator lets everyone; where jobs run as their users (slurmrestd), everyone may. Submitting, the
preview, cloning and resubmitting all keep to it; the page's form and the CLI say why (tests/browser, tests/client).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session

from contract.states import RunState
from server.config import Settings
from server.models import Run
from server.scheduler.local import LocalScheduler
from server.services import users
from tests.conftest import bearer, local_client, make_client
from tests.server.api.test_inference import JobsAsTheirUsers
from tests.server.api.test_programs import EXAMPLE_PROFILES, program_request

ADMIN_ONLY = "programs_admin_only"  # contract.errors.PROGRAMS_ADMIN_ONLY, as a client reads it


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "programs" / "proj").mkdir(parents=True)
    (tmp_path / "programs" / "proj" / "train.py").write_text("")  # the server looks for the script it names
    return tmp_path / "programs"


def programs(settings: Settings, root: Path, **changes: Any) -> Settings:
    return settings.model_copy(update={"program_roots": [root], "profiles_dir": EXAMPLE_PROFILES, **changes})


@pytest.fixture
def service_account(settings: Settings, root: Path) -> Iterator[TestClient]:
    """Scalelab's own accounts on a scheduler that runs every job as the service (here: the local one)."""
    quick = programs(settings, root)
    with local_client(quick) as client:
        yield client


def add(client: TestClient, name: str, **options: Any) -> dict[str, str]:
    with Session(client.app.state.engine) as session:  # type: ignore[attr-defined]
        return bearer(users.add_user(session, name, **options))


def refused_kind(response: Any) -> str:
    """The refusal's message, once checked to be the one at base.kind that a client acts on."""
    assert response.status_code == 422, response.text
    [problem] = response.json()["detail"]
    assert (tuple(problem["loc"]), problem["type"]) == (("body", "base", "kind"), ADMIN_ONLY)
    message: str = problem["msg"]
    return message


def test_where_jobs_run_as_the_service_only_an_admin_runs_a_program(service_account, root):
    bob = add(service_account, "bob")
    for path in ("/api/experiments", "/api/experiments/preview"):
        why = refused_kind(service_account.post(path, json=program_request(root), headers=bob))
        assert why.startswith("bob may not run a program: here every job runs as the service's own account")
        assert "only admins may run programs" in why and "slurmrestd" in why
    assert service_account.get("/api/runs").json()["count"] == 0  # nothing was made
    # The built-in worker stays everyone's; an admin runs programs.
    worker = {"name": "bob's", "grid": {"gpus": [1]}}
    assert service_account.post("/api/experiments/preview", json=worker, headers=bob).status_code == 200
    assert service_account.post("/api/experiments", json=program_request(root)).status_code == 201


def test_the_operator_may_let_everyone_and_the_server_says_so_at_start(settings, root, caplog):
    everyone = programs(settings, root, programs_for_all_as_service_account=True)
    scheduler = LocalScheduler(everyone.runs_dir / ".local-jobs")
    with caplog.at_level(logging.WARNING, logger="server.main"), make_client(everyone, scheduler) as client:
        bob = add(client, "bob")
        assert client.post("/api/experiments", json=program_request(root), headers=bob).status_code == 201
    [warning] = [record.getMessage() for record in caplog.records if "PROGRAMS_FOR_ALL" in record.getMessage()]
    assert "every user is as trusted as an admin" in warning


def test_where_jobs_run_as_their_users_everyone_runs_programs(settings, root):
    quick = programs(settings, root)
    quick.runs_dir.mkdir()
    quick.runs_dir.chmod(0o3733)  # as a shared instance's runs directory must be (the server checks at start)
    with make_client(quick, JobsAsTheirUsers(quick.runs_dir / ".local-jobs")) as client:
        bob = add(client, "bob")
        response = client.post("/api/experiments/preview", json=program_request(root), headers=bob)
        assert response.status_code == 200, response.text


def test_no_clone_resubmit_or_admins_hand_runs_a_plain_users_program_again(settings, root):
    """Runs made while the operator let everyone, or an admin's shared program: none runs again as a plain user's."""
    everyone = programs(settings, root, programs_for_all_as_service_account=True)
    with local_client(everyone) as client:
        bob, erin = add(client, "bob"), add(client, "erin")
        bobs = client.post("/api/experiments", json=program_request(root), headers=bob).json()
    admins_only = programs(settings, root)
    with local_client(admins_only) as client:
        with Session(client.app.state.engine) as session:  # type: ignore[attr-defined]
            for made in bobs["runs"]:
                run = session.get(Run, made["id"])
                assert run is not None
                run.state, run.job_id = RunState.failed, None
                session.add(run)
            session.commit()
        run_id = bobs["runs"][0]["id"]
        for headers in (bob, client.headers):  # the program's files are bob's, whoever asks
            for path in (f"/api/runs/{run_id}/resubmit", f"/api/experiments/{bobs['id']}/resubmit"):
                refused = client.post(path, headers=headers)
                assert refused.status_code == 403, refused.text
                assert refused.json()["reason"] == ADMIN_ONLY
                assert refused.json()["detail"].startswith("bob may not run a program")
        clone = client.post(f"/api/experiments/{bobs['id']}/clone", json={"name": "again"}, headers=bob)
        refused_kind(clone)
        # An admin's program, shared with everyone, is no way around it either.
        admins = client.post("/api/experiments", json=program_request(root)).json()
        assert client.put(f"/api/experiments/{admins['id']}/sharing", json={"with": "everyone"}).status_code == 200
        refused_kind(client.post(f"/api/experiments/{admins['id']}/clone", json={"name": "mine"}, headers=erin))
        assert client.post(f"/api/runs/{admins['runs'][0]['id']}/resubmit", headers=erin).status_code == 403
        assert client.get("/api/runs", headers=bob).json()["count"] == len(bobs["runs"]) + len(admins["runs"])
