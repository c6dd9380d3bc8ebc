"""A program's env values are its owner's: everyone an experiment is shared with sees which variables its runs set,
but their values only the owner and the admins, in every view of a spec, a request, a batch script or a series name.

The walk asks every GET route of the app (the API's and the pages') about two shared program experiments, as a user
they are shared with, and finds no value anywhere; the owner finds them, so the walk looked where they are.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.routing import iter_route_contexts
from fastapi.testclient import TestClient
from sqlmodel import Session

from server.config import Settings
from server.services import users
from tests.conftest import bearer, local_client
from tests.server.api.test_programs import EXAMPLE_PROFILES, program_request

# Distinctive, and written alike in JSON, HTML, CSV and a shell word: found wherever it is shown.
SECRETS = ("Zq9-secret-TOKEN-first", "Zq9-secret-TOKEN-second")
MARK = "Zq9-secret"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "programs" / "proj").mkdir(parents=True)
    (tmp_path / "programs" / "proj" / "train.py").write_text("")  # the server looks for the script it names
    return tmp_path / "programs"


@pytest.fixture
def client(settings: Settings, root: Path) -> Iterator[TestClient]:
    # The operator lets plain users run programs, so that the owner here is a plain user like the reader.
    programs = settings.model_copy(
        update={
            "program_roots": [root],
            "profiles_dir": EXAMPLE_PROFILES,
            "programs_for_all_as_service_account": True,
        }
    )
    with local_client(programs) as client:
        yield client


def add(client: TestClient, name: str) -> dict[str, str]:
    with Session(client.app.state.engine) as session:  # type: ignore[attr-defined]
        return bearer(users.add_user(session, name))


def submit_shared(client: TestClient, root: Path, owner: dict[str, str], secret: str) -> dict[str, Any]:
    request = program_request(root, name=f"the program with {secret[-6:]}")
    request["base"]["program"]["env"] = {"API_TOKEN": secret, "OMP_NUM_THREADS": "1"}
    created = client.post("/api/experiments", json=request, headers=owner)
    assert created.status_code == 201, created.text
    body: dict[str, Any] = created.json()
    shared = client.put(f"/api/experiments/{body['id']}/sharing", json={"with": "everyone"}, headers=owner)
    assert shared.status_code == 200, shared.text
    return body


def get_routes(client: TestClient) -> list[str]:
    """Every GET route of the app: the API's (those of the OpenAPI document) and the pages'."""
    found = []
    for route in iter_route_contexts(client.app.routes):  # type: ignore[attr-defined]
        if "GET" in (route.methods or ()) and route.path and not route.path.startswith("/static"):
            found.append(route.path)
    return found


def walk(client: TestClient, headers: dict[str, str], experiments: list[str], run: str) -> dict[str, str]:
    """Every GET route's answer, each path filled with the first experiment and a run of it, and given every query
    that names experiments and runs (each route reads those it takes, and ignores the others)."""
    query = "&".join(
        [
            *(f"experiment_id={experiment}" for experiment in experiments),
            f"run_id={run}",
            f"run={run}",
            f"experiment={experiments[0]}",
            f"from={experiments[0]}",
        ]
    )
    answers = {}
    for path in get_routes(client):
        filled = path.replace("{experiment_id}", experiments[0]).replace("{run_id}", run).replace("{name}", "local")
        answer = client.get(f"{filled}?{query}", headers=headers)
        answers[path] = f"{answer.status_code} {answer.text}"
    return answers


def test_a_share_recipient_sees_no_env_value_in_any_view(client: TestClient, root: Path) -> None:
    alice, bob = add(client, "alice"), add(client, "bob")
    first, second = (submit_shared(client, root, alice, secret) for secret in SECRETS)
    run = first["runs"][0]["id"]
    experiments = [first["id"], second["id"]]

    theirs = walk(client, bob, experiments, run)
    assert len(theirs) >= 25, sorted(theirs)
    for view in (
        "/api/runs/{run_id}",
        "/api/runs",
        "/api/experiments/{experiment_id}",
        "/api/experiments",
        "/api/compare",
        "/api/compare.csv",
        "/api/experiments/{experiment_id}/report.html",
        "/runs/{run_id}",
        "/experiments/{experiment_id}",
        "/experiments/new",
    ):
        assert theirs[view].startswith("200 "), (view, theirs[view][:300])
    leaks = {path: re.findall(MARK + r"[\w-]*", text) for path, text in theirs.items() if MARK in text}
    assert not leaks, leaks
    # Which variables are set stays visible: only the values are hidden.
    assert '"API_TOKEN":"(hidden)"' in theirs["/api/runs/{run_id}"].replace(" ", "")
    assert '"API_TOKEN":"(hidden)"' in theirs["/experiments/new"].replace(" ", "")

    # The owner sees the values where they are: in the spec, the request, the script, the form, the report.
    mine = walk(client, alice, experiments, run)
    for view in (
        "/api/runs/{run_id}",
        "/api/experiments/{experiment_id}",
        "/runs/{run_id}",
        "/experiments/new",
        "/api/experiments/{experiment_id}/report.html",
    ):
        assert SECRETS[0] in mine[view], view
    # Series that differ by an env value are told apart without showing it, to the owner too (a compared series
    # is named once for everyone who may see it).
    compared = client.get(f"/api/compare?experiment_id={first['id']}&experiment_id={second['id']}", headers=alice)
    assert {row["series"] for row in compared.json()["data"]} >= {
        "ddp, env.API_TOKEN=value 1, params.lr=0.05",
        "ddp, env.API_TOKEN=value 2, params.lr=0.05",
    }


def test_a_recipients_clone_or_copy_asks_for_its_own_value(client: TestClient, root: Path) -> None:
    """The form and a clone start from what the recipient sees: a value left hidden is refused, named, never run."""
    alice, bob = add(client, "alice"), add(client, "bob")
    shared = submit_shared(client, root, alice, SECRETS[0])
    clone = client.post(f"/api/experiments/{shared['id']}/clone", json={"name": "bob's"}, headers=bob)
    assert clone.status_code == 422, clone.text
    problems = clone.json()["detail"]
    assert [problem["loc"] for problem in problems] == [["body", "base", "program", "env"]] * 2
    assert [problem["msg"].split(":")[0] for problem in problems] == ["API_TOKEN", "OMP_NUM_THREADS"]
    assert all("(hidden) stands for a value hidden from you" in problem["msg"] for problem in problems)
    given = client.post(
        f"/api/experiments/{shared['id']}/clone",
        json={
            "name": "bob's",
            "base": {"program": {**shared_program(client, shared, bob), "env": {"API_TOKEN": "bobs"}}},
        },
        headers=bob,
    )
    assert given.status_code == 201, given.text
    assert MARK not in given.text
    # The owner's clone keeps the owner's values.
    own = client.post(f"/api/experiments/{shared['id']}/clone", json={"name": "again"}, headers=alice)
    assert own.status_code == 201, own.text
    assert SECRETS[0] in client.get(f"/api/runs/{own.json()['runs'][0]['id']}", headers=alice).text


def shared_program(client: TestClient, experiment: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
    program: dict[str, Any] = client.get(f"/api/experiments/{experiment['id']}", headers=headers).json()["request"][
        "base"
    ]["program"]
    return program


GOLDEN = Path(__file__).resolve().parents[2] / "golden"


@pytest.mark.parametrize("name", ["job-own-program-local.sbatch", "job-program-pyxis.sbatch"])
def test_a_scripts_env_values_are_hidden_where_it_holds_them(name: str) -> None:
    """Both places a script holds a program's env: its exports, and the spec it carries as JSON where the job makes
    its own directory; the profile's own variables (NCCL_DEBUG=WARN on pyxis) and everything else stay."""
    from server.services.secrets import hidden_script  # here: the walk above runs on servers without it too

    script = (GOLDEN / name).read_text()
    spec = {"program": {"env": {"OMP_NUM_THREADS": "1", "NCCL_DEBUG": "INFO"}}}
    hidden = hidden_script(script, spec)
    assert "export OMP_NUM_THREADS='(hidden)'" in hidden and "export NCCL_DEBUG='(hidden)'" in hidden
    assert "export OMP_NUM_THREADS=1\n" not in hidden and "export NCCL_DEBUG=INFO\n" not in hidden
    assert ("export NCCL_DEBUG=WARN" in hidden) == ("export NCCL_DEBUG=WARN" in script)
    if '"env":{' in script:
        assert '"env":{"OMP_NUM_THREADS":"(hidden)","NCCL_DEBUG":"(hidden)"}' in hidden
    changed = [line for line in hidden.split("\n") if line not in script.split("\n")]
    assert len(changed) == (3 if '"env":{' in script else 2), changed
