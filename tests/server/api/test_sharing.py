"""Who sees which experiment: its owner and the admins; a Unix group's members or everyone once its owner shares it,
read-only; nobody else, through any route, which answers as for an experiment or run that does not exist."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.routing import iter_route_contexts
from fastapi.testclient import TestClient
from sqlmodel import Session

from server.config import Settings
from server.models import User
from server.scheduler.local import LocalScheduler
from server.services import users
from tests.conftest import local_client
from tests.factories import experiment_request
from tests.server.api.test_pam_signin import pam_settings, token_by_password
from tests.unix_users import OTHER_GROUP, STUDY_GROUP

pytestmark = pytest.mark.usefixtures("unix_people")
TRUE = Path(shutil.which("true") or "/bin/true")
MISSING_EXPERIMENT, MISSING_RUN = "0000000000", "0000000001"


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    quick = pam_settings(settings, worker_python=TRUE)
    with local_client(quick) as client:
        yield client


def as_user(client: TestClient, name: str) -> dict[str, str]:
    code, token = token_by_password(client, name)
    assert code == 201, token
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def people(client: TestClient) -> dict[str, dict[str, str]]:
    return {name: as_user(client, f"sl-{name}") for name in ("alice", "bob", "erin")}


@pytest.fixture
def alices(client: TestClient, people: dict[str, dict[str, str]]) -> dict:
    created = client.post("/api/experiments", json=experiment_request(name="alice's"), headers=people["alice"])
    assert created.status_code == 201, created.text
    body: dict = created.json()
    assert body["sharing"] == "private" and body["sharing_group"] is None
    return body


def share(client: TestClient, experiment: str, headers: dict[str, str], **body: str) -> dict:
    answer = client.put(f"/api/experiments/{experiment}/sharing", json=body, headers=headers)
    assert answer.status_code == 200, answer.text
    shared: dict = answer.json()
    return shared


def id_routes(client: TestClient, method: str) -> list[str]:
    """Every route of the app with `method` whose path names an experiment or a run (FastAPI's route contexts: the
    routes of included routers with their prefixes)."""
    found = []
    for route in iter_route_contexts(client.app.routes):  # type: ignore[attr-defined]
        path = route.path or ""
        if method in (route.methods or ()) and re.search(r"\{(experiment_id|run_id)\}", path):
            found.append(path)
    return found


def fill(path: str, experiment: str, run: str) -> str:
    return path.replace("{experiment_id}", experiment).replace("{run_id}", run)


def answer_of(client: TestClient, method: str, path: str, headers: dict[str, str], ids: tuple[str, str]) -> tuple:
    """Status and body, with the ids put back as placeholders: what may differ between one id and another."""
    body = {"PUT": {"with": "everyone"}, "POST": {}}.get(method)  # bodies that are valid where a route takes one
    response = client.request(method, path, headers=headers, json=body)
    text = response.text.replace(ids[0], "EXPERIMENT").replace(ids[1], "RUN")
    return response.status_code, text


def test_every_route_naming_an_unshared_experiment_or_its_run_answers_as_for_none(client, people, alices):
    experiment, run = alices["id"], alices["runs"][0]["id"]
    walked = 0
    for method in ("GET", "POST", "PUT", "DELETE"):
        for path in id_routes(client, method):
            theirs = answer_of(client, method, fill(path, experiment, run), people["bob"], (experiment, run))
            none = answer_of(
                client, method, fill(path, MISSING_EXPERIMENT, MISSING_RUN), people["bob"],
                (MISSING_EXPERIMENT, MISSING_RUN),
            )  # fmt: skip
            assert theirs[0] == 404, (method, path, theirs)
            assert theirs == none, (method, path)
            walked += 1
    gets = id_routes(client, "GET")
    for expected in (
        "/api/experiments/{experiment_id}",
        "/api/runs/{run_id}/log",
        "/api/runs/{run_id}/metrics",
        "/api/experiments/{experiment_id}/report.html",
        "/experiments/{experiment_id}",
        "/runs/{run_id}",
    ):
        assert expected in gets, expected
    assert walked >= 20
    # Lists and selections leave it out, or name it as one that does not exist.
    bob = people["bob"]
    assert experiment not in {item["id"] for item in client.get("/api/experiments", headers=bob).json()["data"]}
    assert client.get(f"/api/runs?experiment_id={experiment}", headers=bob).json()["count"] == 0
    assert client.get("/api/runs", headers=bob).json()["count"] == 0
    for path in ("/api/compare", "/api/compare.csv", "/api/scaling"):
        for query in (f"experiment_id={experiment}", f"run_id={run}"):
            refused = client.get(f"{path}?{query}", headers=bob)
            assert refused.status_code == 422 and "no " in refused.text, (path, query)
    assert run not in client.get(f"/runs?experiment={experiment}", headers=bob).text
    assert "sl-alice" not in client.get("/runs", headers=bob).text  # not even as an owner to filter by
    assert "alice&#39;s" not in client.get("/", headers=bob).text
    assert "No such runs: " + run in client.get(f"/compare?run={run}", headers=bob).text
    assert "alice" not in client.get(f"/experiments/new?from={experiment}", headers=bob).text
    # The owner and an admin see it all.
    for headers in (people["alice"], client.headers):
        assert client.get(f"/api/experiments/{experiment}", headers=headers).status_code == 200
        assert client.get(f"/api/runs?experiment_id={experiment}", headers=headers).json()["count"] == 3


def test_shared_with_a_group_its_members_see_it_read_only_until_it_is_private_again(client, people, alices):
    experiment, run = alices["id"], alices["runs"][0]["id"]
    alice, bob, erin = people["alice"], people["bob"], people["erin"]
    shared = share(client, experiment, alice, **{"with": "group", "group": STUDY_GROUP})
    assert shared["sharing"] == "group" and shared["sharing_group"] == STUDY_GROUP
    # bob is in the group: he sees it, its runs, their course and its report.
    for path in (
        f"/api/experiments/{experiment}",
        f"/api/experiments/{experiment}/compare",
        f"/api/experiments/{experiment}/report.html",
        f"/api/runs/{run}",
        f"/api/runs/{run}/events",
        f"/api/runs/{run}/metrics",
        f"/experiments/{experiment}",
        f"/runs/{run}",
    ):
        assert client.get(path, headers=bob).status_code == 200, path
    assert experiment in {item["id"] for item in client.get("/api/experiments", headers=bob).json()["data"]}
    assert client.get(f"/api/compare?experiment_id={experiment}", headers=bob).status_code == 200
    # Read-only: he changes nothing, sharing included; the page offers him no sharing form.
    for method, path in (
        ("POST", f"/api/runs/{run}/cancel"),
        ("POST", f"/api/experiments/{experiment}/cancel"),
        ("DELETE", f"/api/experiments/{experiment}"),
    ):
        assert client.request(method, path, headers=bob).status_code == 403, path
    assert (
        client.put(f"/api/experiments/{experiment}/sharing", json={"with": "everyone"}, headers=bob).status_code == 403
    )
    page = client.get(f"/experiments/{experiment}", headers=bob).text
    assert STUDY_GROUP in page and 'id="sharing-form"' not in page
    assert 'id="sharing-form"' in client.get(f"/experiments/{experiment}", headers=alice).text
    # erin is not in the group.
    assert client.get(f"/api/experiments/{experiment}", headers=erin).status_code == 404
    # Private again: bob no longer sees it.
    share(client, experiment, alice, **{"with": "private"})
    assert client.get(f"/api/experiments/{experiment}", headers=bob).status_code == 404
    assert client.get(f"/api/runs/{run}/metrics", headers=bob).status_code == 404


def test_shared_with_everyone_everyone_signed_in_sees_it(client, people, alices):
    experiment = alices["id"]
    share(client, experiment, people["alice"], **{"with": "everyone"})
    assert client.get(f"/api/experiments/{experiment}", headers=people["erin"]).status_code == 200
    with Session(client.app.state.engine) as session:
        local = {"Authorization": f"Bearer {users.add_user(session, 'sl-localone')}"}
    assert client.get(f"/api/experiments/{experiment}", headers=local).status_code == 200
    assert client.get("/api/experiments", headers=local).json()["count"] == 1
    # Clones of a shared experiment are their new owner's, and private.
    clone = client.post(f"/api/experiments/{experiment}/clone", json={"name": "erin's"}, headers=people["erin"])
    assert clone.status_code == 201 and clone.json()["owner"] == "sl-erin" and clone.json()["sharing"] == "private"
    assert client.get(f"/api/experiments/{clone.json()['id']}", headers=people["alice"]).status_code == 404


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ({"with": "group"}, "name the Unix group"),
        ({"with": "group", "group": "sl-no-such-group"}, "there is no Unix group"),
        ({"with": "group", "group": OTHER_GROUP}, "you are not a member"),
        ({"with": "everyone", "group": STUDY_GROUP}, "a group goes only with"),
        ({"with": "group", "group": "$(touch x)"}, "String should match pattern"),
        ({"with": "the world"}, "Input should be"),
        ({"whom": "everyone"}, "Field required"),
    ],
)
def test_sharing_refuses_what_cannot_be_and_names_the_field(client, people, alices, body, why):
    answer = client.put(f"/api/experiments/{alices['id']}/sharing", json=body, headers=people["alice"])
    assert answer.status_code == 422, answer.text
    assert why in answer.text
    field = "with" if "with" not in body or body["with"] == "the world" else "group"
    assert any(item["loc"][-1] == field for item in answer.json()["detail"]), answer.json()
    assert client.get(f"/api/experiments/{alices['id']}", headers=people["bob"]).status_code == 404


def test_an_admin_may_share_anyones_with_any_group(client, alices):
    shared = share(client, alices["id"], dict(client.headers), **{"with": "group", "group": OTHER_GROUP})
    assert shared["sharing_group"] == OTHER_GROUP


def test_quotas_stay_per_user_whoever_sees_the_runs(settings):
    quick = pam_settings(settings, worker_python=TRUE, max_concurrent_runs=3)
    with local_client(quick) as client:
        alice, bob = as_user(client, "sl-alice"), as_user(client, "sl-bob")
        created = client.post("/api/experiments", json=experiment_request(), headers=alice).json()
        share(client, created["id"], alice, **{"with": "everyone"})
        assert client.post("/api/experiments", json=experiment_request(), headers=alice).status_code == 429
        assert client.post("/api/experiments", json=experiment_request(), headers=bob).status_code == 201
        with Session(client.app.state.engine) as session:  # type: ignore[attr-defined]
            assert session.get(User, "sl-bob") is not None


def test_authentication_off_sees_everything(settings):
    from server.main import create_app

    off = settings.model_copy(update={"auth": False, "worker_python": TRUE})
    app = create_app(off, LocalScheduler(off.runs_dir / ".local-jobs"), start_monitor=False)
    with TestClient(app, base_url="http://127.0.0.1") as client:
        created = client.post("/api/experiments", json=experiment_request()).json()
        assert created["owner"] == "local"
        assert client.get(f"/api/experiments/{created['id']}").status_code == 200


def test_one_it_is_shared_with_may_test_against_its_reference_but_not_pin_it(client, people, alices):
    experiment = alices["id"]
    share(client, experiment, people["alice"], **{"with": "everyone"})
    for path in (f"/api/experiments/{experiment}/reference", f"/api/experiments/{experiment}/aa"):
        refused = client.put(path, headers=people["bob"])
        assert refused.status_code == 403 and "only its owner or an admin" in refused.text, path
    assert client.put(f"/api/experiments/{experiment}/reference", headers=people["alice"]).status_code == 200
    assert client.delete(f"/api/experiments/{experiment}/reference", headers=people["bob"]).status_code == 403
    answer = client.get(f"/api/experiments/{experiment}/regression", headers=people["bob"])
    assert answer.status_code == 200 and answer.json()["reference_id"] == experiment
    assert client.get(f"/api/references/{experiment}/history", headers=people["bob"]).status_code == 200
