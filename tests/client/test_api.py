"""The REST client: its errors, the structured fields it reads from them, and the exit codes the command maps
them to."""

from __future__ import annotations

import json

import httpx
import pytest

from benches.server_process import free_port
from client import cli
from client.api import (
    DEFAULT_URL,
    ApiError,
    BadUrl,
    Client,
    Conflict,
    Invalid,
    NotFound,
    ServerUnreachable,
    TokenRejected,
    Unavailable,
)
from tests.client.helpers import answering


def test_a_server_that_is_not_running_is_unreachable_with_its_url(capsys):
    url = f"http://127.0.0.1:{free_port()}"
    with Client(url) as client, pytest.raises(ServerUnreachable) as caught:
        client.experiments()
    assert url in str(caught.value)
    assert "is it running?" in str(caught.value)

    assert cli.main(["--url", url, "ls"]) == cli.EXIT_UNREACHABLE == 3
    err = capsys.readouterr().err
    assert err.startswith(f"scalelab: error: cannot reach the scalelab server at {url}")
    assert "Traceback" not in err


@pytest.mark.parametrize("status", [401, 403])
def test_a_rejected_token_is_exit_4_and_said_so(capsys, status):
    http = answering(status, {"detail": "invalid token"})
    with Client(DEFAULT_URL, "wrong", http=http) as client, pytest.raises(TokenRejected):
        client.experiments()
    assert cli.main(["--token", "wrong", "ls"], http=http) == cli.EXIT_TOKEN == 4
    assert f"rejected the token (HTTP {status}: invalid token)" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("status", "body", "error", "code", "message"),
    [
        (404, {"detail": "no run 'x'"}, NotFound, 5, "no run 'x'"),
        (409, {"detail": "run x has already ended"}, Conflict, 1, "run x has already ended"),
        (
            422,
            {"detail": [{"loc": ["body", "base", "epochs"], "msg": "must be at least 1"}, {"loc": [], "msg": "bad"}]},
            Invalid,
            2,
            "base.epochs: must be at least 1\nbad",
        ),
        (500, "Internal Server Error", None, 1, "HTTP 500: Internal Server Error"),
        (200, "<html>not scalelab</html>", None, 1, "answered /api/runs/x with something other than"),
    ],
)
def test_answers_map_to_errors_and_exit_codes(capsys, status, body, error, code, message):
    http = answering(status, body)
    if error is not None:
        with Client(http=http) as client, pytest.raises(error):
            client.run("x")
    assert cli.main(["show", "x"], http=http) == code
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("url", ["ftp://example.org", "localhost:8000", "http://example.org:notaport"])
def test_a_url_no_request_can_go_to_is_a_usage_error(capsys, url):
    with pytest.raises(BadUrl):
        Client(url).experiments()
    assert cli.main(["--url", url, "ls"]) == cli.EXIT_USAGE
    assert "is not a valid server URL" in capsys.readouterr().err


def test_the_token_goes_as_a_bearer_header_and_ids_stay_one_path_segment():
    seen: list[httpx.Request] = []
    with Client(DEFAULT_URL, "s3cret", http=answering(404, {"detail": "no"}, seen)) as client:
        for run_id in ["../experiments", "..", "a?b=c"]:
            with pytest.raises(NotFound):
                client.log(run_id, offset=5)
    assert {request.headers["authorization"] for request in seen} == {"Bearer s3cret"}
    assert [request.url.raw_path for request in seen] == [
        b"/api/runs/..%2Fexperiments/log?offset=5",
        b"/api/runs/%2E%2E/log?offset=5",
        b"/api/runs/a%3Fb%3Dc/log?offset=5",
    ]


def test_no_token_sends_no_authorization():
    seen: list[httpx.Request] = []
    with Client(http=answering(200, {"data": [], "count": 0}, seen)) as client:
        client.experiments()
    assert "authorization" not in seen[0].headers


def test_the_request_body_is_the_spec_as_given():
    seen: list[httpx.Request] = []
    with Client(http=answering(404, {"detail": "no"}, seen)) as client, pytest.raises(NotFound):
        client.import_logs("old", [("a.out", "[METRIC] epoch=1 loss=1 time=1\n")])
    assert json.loads(seen[0].content) == {
        "name": "old",
        "files": [{"name": "a.out", "content": "[METRIC] epoch=1 loss=1 time=1\n"}],
    }


def test_an_error_answer_keeps_where_each_problem_is():
    problems = [{"loc": ["body", "grid"], "msg": "x"}, {"loc": ["query", "index"], "msg": "y"}, {"msg": "z"}]
    with Client(http=answering(422, {"detail": problems})) as client, pytest.raises(Invalid) as caught:
        client.preview({})
    assert caught.value.locations() == [("body", "grid"), ("query", "index"), ()]
    assert caught.value.experiment_id is None


def test_a_503_names_the_experiment_it_kept_in_a_field_that_a_hint_keeps():
    answer = {"detail": "Slurm cannot be reached", "experiment_id": "5f6e7d8c9b"}
    with Client(http=answering(503, answer)) as client, pytest.raises(Unavailable) as caught:
        client.submit({})
    assert caught.value.experiment_id == "5f6e7d8c9b"
    hinted = caught.value.with_hint("then resubmit")
    assert isinstance(hinted, Unavailable)
    assert (hinted.status_code, hinted.experiment_id) == (503, "5f6e7d8c9b")
    assert str(hinted) == "Slurm cannot be reached (HTTP 503: try again later)\nthen resubmit"


@pytest.mark.parametrize("body", ["<html>Bad Gateway</html>", {"error": "not scalelab's shape"}, ["a", "list"]])
def test_an_answer_that_is_not_an_api_error_has_no_fields(body):
    with Client(http=answering(502, body)) as client, pytest.raises(ApiError) as caught:
        client.run("x")
    assert caught.value.body is None
    assert (caught.value.locations(), caught.value.experiment_id) == ([], None)
    assert str(caught.value).startswith("HTTP 502: ")
