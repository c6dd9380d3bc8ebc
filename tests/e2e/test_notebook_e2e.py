"""examples/scaling.ipynb executed as a user would run it: in a Jupyter kernel of this venv, against a real server on
the real local Slurm (the two-node cluster: the README's example names no partition, and that cluster's test group is
not CI's critical path), the server's URL given as SCALELAB_URL."""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import slurm2_server_in
from tests.factories import ROOT

pytestmark = [pytest.mark.slurm, pytest.mark.torch]
NOTEBOOK = ROOT / "examples" / "scaling.ipynb"
KERNEL = "scalelab-venv"


def venv_kernel(jupyter: Path) -> None:
    """A kernel spec of this venv's Python, found first on JUPYTER_PATH: never a kernel of another Python."""
    spec = jupyter / "kernels" / KERNEL
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": KERNEL, "language": "python"}))


def texts(cell) -> str:
    """What a cell showed as text: its streams and the text/plain of its results and displays."""
    found = []
    for output in cell.get("outputs", []):
        found.append(output.get("text", ""))
        found.append(output.get("data", {}).get("text/plain", ""))
    return "\n".join(found)


@pytest.fixture
def slurm_server(slurm2_env: dict[str, str], tmp_path: Path) -> Iterator[str]:
    (tmp_path / "server").mkdir()
    with slurm2_server_in(tmp_path / "server", slurm2_env) as url:
        yield url


def test_the_example_notebook_submits_waits_and_plots_speedup(slurm_server, tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    # The notebook in a folder of its own beside the README's example, as in examples/: the report lands there.
    work = tmp_path / "notebook"
    work.mkdir()
    shutil.copy(NOTEBOOK, work)
    shutil.copy(ROOT / "examples" / "experiment.json", work)
    venv_kernel(tmp_path / "jupyter")
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    monkeypatch.setenv("MPLCONFIGDIR", str(tmp_path / "matplotlib"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("SCALELAB_URL", slurm_server)
    monkeypatch.delenv("SCALELAB_TOKEN", raising=False)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))

    notebook = nbformat.read(work / "scaling.ipynb", as_version=4)
    nbclient.NotebookClient(
        notebook, timeout=600, kernel_name=KERNEL, resources={"metadata": {"path": str(work)}}
    ).execute()

    cells = {cell["id"]: cell for cell in notebook.cells if cell["cell_type"] == "code"}
    assert "<scalelab.Lab " + slurm_server in texts(cells["cell-1"])
    assert "'MLP data-parallel scaling': 2 runs" in texts(cells["cell-3"])
    # The bar: one display, updated in place to its end, as HTML with a text twin.
    (bar,) = cells["cell-4"]["outputs"][:1]
    assert bar["output_type"] == "display_data" and "<progress " in bar["data"]["text/html"]
    assert "2 of 2 runs ended, 8 of 8 epochs (2 completed)" in bar["data"]["text/plain"]
    assert "2 completed" in texts(cells["cell-4"])  # wait returned the experiment, read again
    # The DataFrames, shown as tables.
    for table in ("cell-5", "cell-7", "cell-8"):
        assert any("text/html" in output.get("data", {}) for output in cells[table]["outputs"]), table
    assert "ddp" in texts(cells["cell-8"])
    # The plot, inline.
    assert any("image/png" in output.get("data", {}) for output in cells["cell-9"]["outputs"])
    assert (work / "scaling-report.html").read_text().startswith("<!DOCTYPE html>")
