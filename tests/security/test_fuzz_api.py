"""Schemathesis over the server's own OpenAPI schema: every operation, valid and invalid requests, as an admin.

No request may get a 5xx, and every response must be one the schema documents, in body and status code. The app
runs in-process on a real SQLite file and submits to the real Slurm through an `sbatch` that holds every job, so
fuzzed experiments never run; every job is cancelled at the end.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Ok
from schemathesis.generation.modes import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from sqlmodel import Session, col, select

from benches.held_jobs import cancel, hold_wrapper
from server.config import Settings
from server.models import Run
from server.scheduler.slurm import SlurmScheduler
from tests.conftest import make_client
from tests.factories import experiment_request

pytestmark = pytest.mark.slurm

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
# Per operation and phase: enough to reach every field and error path; with ~25 operations the test stays within
# about two minutes on two cores. Derandomized, so a failure is the same failure on every run.
MAX_EXAMPLES = 25


@dataclass
class Target:
    app: FastAPI
    headers: dict[str, str]  # an admin's token
    existing: dict[str, str]  # path parameter -> the id of an experiment or run that exists


@pytest.fixture
def target(slurm: None, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Target]:
    """The app as deployed (authentication on, an admin's token), with one experiment of held jobs in it."""
    monkeypatch.setenv("PATH", hold_wrapper(tmp_path / "bin")["PATH"])
    with make_client(settings.model_copy(update={"scheduler": "slurm"}), SlurmScheduler()) as client:
        created = client.post("/api/experiments", json=experiment_request())
        assert created.status_code == 201, created.text
        app: FastAPI = client.app  # type: ignore[assignment]
        existing = {"experiment_id": created.json()["id"], "run_id": created.json()["runs"][0]["id"]}
        try:
            yield Target(app, dict(client.headers), existing)
        finally:
            with Session(app.state.engine) as session:
                job_ids = session.exec(select(Run.job_id).where(col(Run.job_id).is_not(None))).all()
            cancel([job_id for job_id in job_ids if job_id])


def _run_operation(operation: Any, mode: GenerationMode, path_parameters: dict[str, str], headers: dict[str, str]):
    """Fuzz one operation; the first failure schemathesis finds (derandomized, so always the same), or None."""

    @given(case=operation.as_strategy(generation_mode=mode, path_parameters=path_parameters or None))
    @settings(
        max_examples=MAX_EXAMPLES,
        derandomize=True,
        deadline=None,
        database=None,
        # Shrinking a failure would take minutes; the failing case as found is reported whole instead.
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    def fuzz(case: Any) -> None:
        case.call_and_validate(headers=headers, checks=CHECKS)

    try:
        fuzz()
    except Unsatisfiable:
        # Negative mode with nothing to make invalid: an operation whose only parameter is a free-form string.
        return None
    except (Exception, BaseExceptionGroup) as exc:  # a check failed, or the app raised: reported with the operation
        return f"{operation.label} ({mode}, path {path_parameters or 'fuzzed'}):\n{exc}"
    return None


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_every_operation_answers_as_documented(target: Target, mode: GenerationMode) -> None:
    schema = schemathesis.openapi.from_asgi("/openapi.json", target.app)
    existing = target.existing
    failures = []
    operations = 0
    for result in schema.get_all_operations():
        if not isinstance(result, Ok):
            failures.append(f"the schema is invalid: {result.err()}")
            continue
        operation = result.ok()
        operations += 1
        names = {parameter.name for parameter in operation.path_parameters} & existing.keys()
        # With ids that exist the fuzzer reaches past the 404 into the operation; with fuzzed ids, the 404 itself.
        choices = [{name: existing[name] for name in names}, {}] if names else [{}]
        for path_parameters in choices:
            failure = _run_operation(operation, mode, path_parameters, target.headers)
            if failure:
                failures.append(failure)
    assert operations >= 20, f"the schema lists only {operations} operations"
    assert not failures, f"{len(failures)} operations failed:\n\n" + "\n\n".join(failures)
