"""An import request: one run per file, so file names are unique and the files fit one request."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from server.models import MAX_RUNS_PER_EXPERIMENT, ImportCreate
from server.models import imports as imports_module


def request(*names: str, content: str = "") -> ImportCreate:
    """An import request as the API validates it, of one file per name."""
    return ImportCreate.model_validate({"name": "x", "files": [{"name": name, "content": content} for name in names]})


def test_each_file_names_one_run():
    with pytest.raises(ValidationError, match=re.escape("two files are named 'a.out': each file names one run")):
        request("a.out", "b.out", "a.out")


def test_no_more_files_than_an_experiment_has_runs():
    assert len(request(*(f"{n}.out" for n in range(MAX_RUNS_PER_EXPERIMENT))).files) == MAX_RUNS_PER_EXPERIMENT
    with pytest.raises(ValidationError) as caught:
        request(*(f"{n}.out" for n in range(MAX_RUNS_PER_EXPERIMENT + 1)))
    assert caught.value.errors()[0]["loc"] == ("files",)


@pytest.mark.parametrize("name", ["logs/a.out", "tab\t.out", ""])
def test_a_file_name_is_never_a_path_nor_hidden(name):
    with pytest.raises(ValidationError) as caught:
        request(name)
    assert caught.value.errors()[0]["loc"] == ("files", 0, "name")


def test_the_files_together_must_fit_one_request(monkeypatch):
    # The real limit is 64 MiB; a smaller one keeps the test's memory small and exercises the same sum.
    monkeypatch.setattr(imports_module, "MAX_IMPORT_CHARS", 2**20)
    half = "x" * (2**19)
    assert len(request("a.out", "b.out", content=half).files) == 2
    with pytest.raises(ValidationError, match="more than 1 MiB of text: import them in parts"):
        request("a.out", "b.out", "c.out", content=half)
