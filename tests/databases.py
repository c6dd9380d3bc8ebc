"""The databases the tests run on: a file of SQLite, or a new database of the test PostgreSQL for each test."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from benches.postgres import postgres_database

# scripts/test starts PostgreSQL (scripts/postgres-local up) and exports its URL here; the role may create databases.
POSTGRES_URL = os.environ.get("SCALELAB_TEST_POSTGRES_URL", "")
# Set by scripts/test: where the URL is missing, the PostgreSQL half of the suites fails instead of skipping.
REQUIRE_POSTGRES = os.environ.get("SCALELAB_REQUIRE_POSTGRES") == "1"
KINDS = ("sqlite", "postgresql")


def postgres_or_skip() -> str:
    if POSTGRES_URL:
        return POSTGRES_URL
    message = "no test PostgreSQL: run `export SCALELAB_TEST_POSTGRES_URL=$(scripts/postgres-local up)`"
    if REQUIRE_POSTGRES:
        pytest.fail(message)
    pytest.skip(message)


@contextlib.contextmanager
def database(kind: str, directory: Path) -> Iterator[str]:
    """The URL of a new, empty database of `kind` (SQLite: a file in `directory`)."""
    if kind == "sqlite":
        yield f"sqlite:///{directory / 'scalelab.db'}"
        return
    with postgres_database(postgres_or_skip()) as url:
        yield url
