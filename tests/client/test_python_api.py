"""The Python API (scalelab) against the app in-process: DataFrames of an imported study with their columns and types,
the progress displays, and pandas missing. tests/e2e/test_python_api_e2e.py runs it against a real server on Slurm."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest

import scalelab
from client.api import Client
from client.progress import Progress
from client.schemas import RunView
from contract.states import RunState
from scalelab import frames, progress
from scalelab._experiment import Experiment
from tests.client.helpers import UNEVEN_REASON
from tests.factories import ROOT, course_log

pd = pytest.importorskip("pandas")


@pytest.fixture
def lab(client):
    """A Lab whose requests go to the app in-process, signed as its admin."""
    with scalelab.Lab(Client("http://testserver", http=client)) as lab:
        yield lab


@pytest.fixture
def imported(lab: scalelab.Lab) -> Experiment:
    """A study of three finished runs (1, 2 and 4 processes), made from a course's logs: figures without Slurm."""
    created = lab.client.import_logs("course", [(f"run_{gpus}.out", course_log(gpus)) for gpus in (1, 2, 4)])
    return lab.experiment(created.id)


def dtypes(frame) -> dict[str, str]:
    return {name: str(kind) for name, kind in frame.dtypes.items()}


def test_each_table_has_its_columns_each_of_its_type(imported):
    runs = imported.wait(progress=False).runs()
    assert list(runs.columns) == list(frames.RUNS)
    assert runs["gpus"].tolist() == [1, 2, 4] and runs["position"].tolist() == [0, 1, 2]
    assert runs["state"].dtype == pd.CategoricalDtype([str(state) for state in RunState])
    assert runs["state"].tolist() == ["completed"] * 3
    assert dtypes(runs)["started_at"] == "datetime64[ns, UTC]" and dtypes(runs)["job_id"] == "string"
    assert runs["job_id"].isna().all()  # an imported run had no job

    compare = imported.compare()
    assert list(compare.columns) == list(frames.COMPARE)
    types = dtypes(compare)
    assert (types["gpus"], types["speedup"], types["peak_memory_bytes"], types["ingest_done"]) == (
        "int64",
        "float64",
        "Int64",
        "bool",
    )
    assert compare["target_reached"].dtype == "boolean" and compare["target_reached"].isna().all()  # no target
    assert compare.sort_values("gpus")["speedup"].tolist() == pytest.approx([1.0, 2.0, 4.0])
    assert compare["final_val_loss"].notna().all()

    scaling = imported.scaling()
    assert list(scaling.columns) == list(frames.SCALING)
    assert dtypes(scaling) == {name: kind for name, kind in frames.SCALING.items()}
    assert scaling["gpus"].tolist() == [1, 2, 4]
    assert scaling["speedup"].tolist() == pytest.approx([1.0, 2.0, 4.0])
    assert list(scaling.attrs["recommendations"]) == scaling["series"].unique().tolist()


def test_an_empty_table_keeps_its_columns_and_types():
    for columns, empty in (
        (frames.RUNS, frames.runs_table([])),
        (frames.COMPARE, frames.compare_table([])),
    ):
        assert dtypes(empty) == {name: "category" if kind == frames.STATE else kind for name, kind in columns.items()}
        assert len(empty) == 0


def test_the_lab_finds_experiments_saves_reports_and_names_what_it_submitted(lab, imported, tmp_path):
    assert [found.id for found in lab.experiments()] == [imported.id]
    assert repr(imported) == f"<Experiment {imported.id} 'course': 3 runs (3 completed)>"
    saved = imported.report(tmp_path / "study.html")
    assert imported.id in saved.read_text()
    with pytest.raises(scalelab.UsageError, match="cannot write"):
        imported.report(tmp_path / "no" / "such" / "dir.html")
    with pytest.raises(scalelab.NotFound):
        lab.experiment("0000000000")
    with pytest.raises(scalelab.Invalid) as refused:
        lab.submit({"name": "bad", "base": {"epochs": 0}})
    assert ("body", "base", "epochs") in refused.value.locations()
    with pytest.raises(scalelab.UsageError, match="cannot read"):
        lab.submit(tmp_path / "missing.toml")


def test_a_study_whose_jobs_the_scheduler_refused_ends_at_once(refusing, uneven):
    # A file as `scalelab submit` reads it, on a Slurm that refuses every job: no job starts here.
    with scalelab.Lab(Client("http://testserver", http=refusing)) as lab:
        with pytest.raises(scalelab.Invalid, match="divisible"):
            lab.submit(uneven)
        submitted = lab.submit(uneven, skip_invalid=True)
        assert submitted.run_count == 2 and [item.startswith(UNEVEN_REASON) for item in submitted.skipped] == [True]
        # Runs that never ran have nothing more to read: the wait ends at its first look.
        assert submitted.wait(progress=False, timeout_s=0).states == {"submit_failed": 2}
        assert submitted.runs()["message"].notna().all()  # the scheduler's refusal, for each
        with pytest.raises(scalelab.Conflict, match="nothing to cancel"):
            submitted.cancel()


def looked(*states: str, done: int = 0) -> Progress:
    """Progress of runs in `states`, each planning 4 epochs and having done `done`."""
    runs = [
        RunView.model_validate(
            {
                "id": f"r{index}",
                "experiment_id": "e",
                "position": index,
                "state": state,
                "scheduler": "slurm",
                "run_dir": "/x",
                "created_at": "2026-01-01T00:00:00Z",
                "spec": {"epochs": 4},
                "ingest_done": True,
            }
        )
        for index, state in enumerate(states)
    ]
    return Progress(runs, {run.id: done for run in runs})


def test_plain_lines_say_each_change_once():
    out = io.StringIO()
    shown = progress.Lines(out)
    for now in (looked("pending", "pending"), looked("pending", "pending"), looked("completed", "running", done=4)):
        shown.show(now)
    assert out.getvalue().splitlines() == [
        "0 of 2 runs ended, 0 of 8 epochs (2 pending)",
        "1 of 2 runs ended, 8 of 8 epochs (1 completed, 1 running)",
    ]


def test_a_terminal_bar_is_redrawn_in_place():
    out = io.StringIO()
    shown = progress.TerminalBar(out)
    shown.show(looked("running", "running", done=1))
    shown.show(looked("completed", "completed", done=4))
    shown.close()
    drawn = out.getvalue().split("\r")
    assert len(drawn) == 3 and drawn[-1].endswith("(2 completed)\n")
    assert "[#######" in drawn[1] and "[" + "#" * progress.WIDTH + "]" in drawn[2]


def test_a_notebook_bar_is_one_output_updated():
    calls: list[tuple[str, object]] = []

    class Handle:
        def update(self, shown: object) -> None:
            calls.append(("update", shown))

    def display(shown: object, display_id: bool) -> Handle:
        assert display_id
        calls.append(("display", shown))
        return Handle()

    bar = progress.NotebookBar(display)
    bar.show(looked("running", done=2))
    bar.show(looked("completed", done=4))
    assert [call for call, _ in calls] == ["display", "update"]
    assert '<progress value="4" max="4"' in calls[1][1]._repr_html_()  # type: ignore[attr-defined]
    assert repr(calls[0][1]) == "[" + "#" * 15 + "." * 15 + "] 0 of 1 runs ended, 2 of 4 epochs (1 running)"
    # Outside a kernel (here), no notebook display is chosen; a pipe gets plain lines.
    assert isinstance(progress.display(io.StringIO()), progress.Lines)


def test_without_pandas_scalelab_imports_and_a_table_names_the_extra():
    # pandas made unimportable in a fresh interpreter, as where it was never installed.
    script = (
        "import sys; sys.modules['pandas'] = None\n"
        "import scalelab\n"
        "from scalelab import frames\n"
        "try:\n    frames.runs_table([])\n"
        "except ModuleNotFoundError as exc:\n    print(exc.name, '|', exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == f"pandas | {frames.MISSING_PANDAS}"
    assert "pip install 'scalelab[notebook]'" in frames.MISSING_PANDAS
