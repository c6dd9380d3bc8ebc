"""The command under test reads no real user's config and no connection settings from the environment."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def clean_connection(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("SCALELAB_URL", raising=False)
    monkeypatch.delenv("SCALELAB_TOKEN", raising=False)
