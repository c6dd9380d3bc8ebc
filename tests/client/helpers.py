"""What the tests of the scalelab command share: running it in-process, and reading what it prints."""

from __future__ import annotations

import re
import time

import httpx
from sqlmodel import Session

from client import cli
from contract.rundir import SCRIPT_FILE
from contract.states import RunState
from tests.factories import ROOT, run_row

SWEEP = ROOT / "examples" / "sweep.toml"
# global_batch_size 64 does not divide among 3 processes: one combination that cannot run.
# Its runs share the node, so that all are submitted at once (exclusive ones would take turns on the local profile).
UNEVEN = 'name = "uneven"\nisolation = "shared"\n[base]\nglobal_batch_size = 64\n[grid]\ngpus = [1, 2, 3]\n'
UNEVEN_REASON = "gpus=3: global_batch_size (64) must be divisible by gpus (3)"


def scalelab(client, capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv), http=client)
    out, err = capsys.readouterr()
    return code, out, err


def shown(out: str) -> dict[str, str]:
    """The `key  value` lines of show and profiles NAME."""
    return dict(re.split(r"\s{2,}", line, maxsplit=1) for line in out.splitlines() if re.search(r"\S\s{2,}\S", line))


def answering(status: int, body: object = None, seen: list[httpx.Request] | None = None) -> httpx.Client:
    """A server that answers every request alike: for answers the real one cannot be made to give on demand."""

    def reply(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(request)
        if isinstance(body, str):
            return httpx.Response(status, text=body)
        return httpx.Response(status, json=body)

    return httpx.Client(transport=httpx.MockTransport(reply), base_url="http://scalelab.test")


def advance_on_sleep(monkeypatch, client, step) -> None:
    """Between two polls, the world moves on as `step(session)` says; no real waiting."""

    def sleep(_seconds: float) -> None:
        with Session(client.app.state.engine) as session:
            step(session)
            session.commit()

    monkeypatch.setattr(time, "sleep", sleep)


def ended_run(session, experiment, tmp_path, name="run", *, state=RunState.failed, position=0):
    """A run that ended after its first attempt, whose batch script runs again on the local scheduler."""
    run_dir = tmp_path / name
    run_dir.mkdir()
    (run_dir / SCRIPT_FILE).write_text("#!/bin/bash\necho again\n")
    return run_row(
        session, experiment, run_dir, state=state, position=position, job_id="41", attempt=1, profile="local"
    )
