"""`scalelab reference` and `scalelab regression`: pin, mark A/A, the verdict per point in words and as JSON, the
history, and the exit codes of refusals and of a regression a canary job fails on."""

from __future__ import annotations

import json

import pytest
from sqlmodel import Session

from client import cli
from tests.client.helpers import scalelab
from tests.server.api.test_references import measured, steady


def test_pin_then_test_a_later_experiment_and_read_the_history(client, capsys, tmp_path):
    with Session(client.app.state.engine) as session:
        reference = measured(session, tmp_path, "ref", steady()).id
        twin = measured(session, tmp_path, "twin", steady(1.01)).id
        slowed = measured(session, tmp_path, "slowed", steady(1.5)).id
    code, out, err = scalelab(client, capsys, "regression", slowed)
    assert code == cli.EXIT_NOT_FOUND and "no reference is pinned" in err

    code, out, _ = scalelab(client, capsys, "reference", "pin", reference)
    assert code == cli.EXIT_OK and out.startswith(f"{reference}: the reference of its spec") and "local" in out
    code, out, _ = scalelab(client, capsys, "reference", "aa", twin)
    assert code == cli.EXIT_OK and f"an A/A run of {reference}" in out

    code, out, _ = scalelab(client, capsys, "regression", slowed)
    assert code == cli.EXIT_OK
    assert out.startswith("regressed: 2 regressed") and "learned from 2 A/A points" in out
    assert "  ddp at 1 GPUs: regressed, 1.5" in out
    code, _, _ = scalelab(client, capsys, "regression", slowed, "--fail-on-regression")
    assert code == cli.EXIT_FAILED
    code, out, _ = scalelab(client, capsys, "regression", twin, "--json")
    answer = json.loads(out)
    assert code == cli.EXIT_OK and answer["verdict"] == "indistinguishable" and len(answer["points"]) == 2

    code, out, _ = scalelab(client, capsys, "reference", "history", reference)
    lines = out.splitlines()
    assert code == cli.EXIT_OK and "noise floor" in lines[0] and "(aa_pairs)" in lines[0]
    assert [line.split()[2:4] for line in lines if line[:1].isdigit()] == [
        [reference, "reference:"],
        [twin, "aa:"],
        [slowed, "later:"],
    ]

    code, out, _ = scalelab(client, capsys, "reference", "unpin", reference)
    assert code == cli.EXIT_OK and "no longer pinned" in out
    code, _, err = scalelab(client, capsys, "reference", "unpin", reference)
    assert code == cli.EXIT_NOT_FOUND


def test_usage_errors(client, capsys):
    with pytest.raises(SystemExit) as exited:
        scalelab(client, capsys, "reference", "promote", "x")
    assert exited.value.code == cli.EXIT_USAGE and "invalid choice" in capsys.readouterr().err
    code, _, _err = scalelab(client, capsys, "reference", "aa", "nosuch")
    assert code == cli.EXIT_NOT_FOUND
