"""The run the ingestion tests write the output of."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlmodel import Session

from server.models import Run
from tests.factories import experiment_row, run_row


@pytest.fixture
def run(session: Session, tmp_path: Path) -> Run:
    return run_row(session, experiment_row(session), tmp_path)
