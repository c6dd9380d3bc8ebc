"""`scalelab share`: who besides its owner and the admins may see an experiment, and the exit codes of refusals."""

from __future__ import annotations

import pytest
from sqlmodel import Session

from client import cli
from server.models import Experiment
from server.services import users
from tests.client.helpers import scalelab
from tests.factories import experiment_row
from tests.unix_users import STUDY_GROUP


@pytest.fixture
def experiment_id(client) -> str:
    with Session(client.app.state.engine) as session:
        return experiment_row(session, "share me").id


def sharing_of(client, experiment_id: str) -> tuple[str, str | None]:
    with Session(client.app.state.engine) as session:
        experiment = session.get(Experiment, experiment_id)
        assert experiment is not None
        return experiment.sharing, experiment.sharing_group


def test_everyone_then_private(client, capsys, experiment_id):
    code, out, err = scalelab(client, capsys, "share", experiment_id, "--everyone")
    assert (code, err) == (cli.EXIT_OK, "")
    assert out == f"{experiment_id}: shared read-only with everyone signed in\n"
    assert sharing_of(client, experiment_id) == ("everyone", None)
    code, out, _ = scalelab(client, capsys, "share", experiment_id, "--private")
    assert code == cli.EXIT_OK and "private" in out
    assert sharing_of(client, experiment_id) == ("private", None)


@pytest.mark.usefixtures("unix_people")
def test_a_unix_group(client, capsys, experiment_id):
    code, out, _ = scalelab(client, capsys, "share", experiment_id, "--group", STUDY_GROUP)
    assert code == cli.EXIT_OK and out.endswith(f"the Unix group {STUDY_GROUP}\n")
    assert sharing_of(client, experiment_id) == ("group", STUDY_GROUP)


def test_refusals_and_their_exit_codes(client, capsys, experiment_id):
    code, _, err = scalelab(client, capsys, "share", experiment_id, "--group", "sl-no-such-group")
    assert code == cli.EXIT_USAGE and "no Unix group 'sl-no-such-group'" in err
    code, _, err = scalelab(client, capsys, "share", "0000000000", "--everyone")
    assert code == cli.EXIT_NOT_FOUND
    with Session(client.app.state.engine) as session:
        other = users.add_user(session, "sl-someone")
    code, _, err = scalelab(client, capsys, "--token", other, "share", experiment_id, "--everyone")
    assert code == cli.EXIT_NOT_FOUND  # not theirs, and private: as if it did not exist
    assert sharing_of(client, experiment_id) == ("private", None)


@pytest.mark.parametrize("argv", [[], ["--group", "g", "--everyone"], ["--private", "--everyone"]])
def test_exactly_one_of_group_everyone_private(client, capsys, experiment_id, argv):
    with pytest.raises(SystemExit) as exited:
        scalelab(client, capsys, "share", experiment_id, *argv)
    assert exited.value.code == cli.EXIT_USAGE
