"""Slurm job arrays: the array's script (golden file, bash and shellcheck, and each task starting its own run's
script), which runs go together, how array tasks' job ids map to their runs, and which task each run of an array
is, read back from its script by a restarted server."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from contract.rundir import OUTPUT_FILE, SCRIPT_FILE
from contract.states import RunState
from server.models import Run
from server.monitor import job_of
from server.render import render_script
from server.render_array import ArrayTask, array_range, render_array_script, shared_directives, tasks_in
from server.scheduler import Job, statuses_of
from server.scheduler.commands import array_tasks, status_rows
from server.scheduler.naming import jobs_by_run
from server.scheduler.sacct import sacct_statuses
from server.services.accounting import _ended_job
from server.services.arrays import ARRAYS_DIR, MAX_TASKS, group, tasks_to_find
from tests.factories import spec
from tests.server.test_render import GOLDEN, JOBS, UPDATE

RUNS_DIR = Path("/shared/scalelab/runs")


def run_script(run_id: str, **fields: object) -> str:
    """A run's own batch script on the pyxis profile, as submitting writes it."""
    batch = dataclasses.replace(JOBS["pyxis"], run_id=run_id, run_dir=RUNS_DIR / run_id)
    return render_script(spec(**{"gpus": 8, "nodes": 2, "global_batch_size": 256, "epochs": 3, **fields}), batch)


def array_of(run_ids: list[str], throttle: int | None = 2, runs_dir: Path = RUNS_DIR) -> str:
    directives = shared_directives(run_script(run_ids[0]))
    assert directives is not None
    tasks = [ArrayTask(run_id, runs_dir / run_id) for run_id in run_ids]
    header = f"scalelab array of {len(tasks)} runs of experiment e0123456789"
    return render_array_script(f"scalelab-array-{run_ids[0]}", directives, tasks, throttle, header)


IDS = ["0123456789", "1123456789", "2123456789"]


def test_matches_golden_file():
    # Not *.sbatch: slurmrestd's tests read every one of those, and slurmrestd submits no arrays.
    golden = GOLDEN / "array-pyxis.sh"
    if UPDATE:
        golden.write_text(array_of(IDS))
    assert array_of(IDS) == golden.read_text(), "rerun with SCALELAB_UPDATE_GOLDEN=1 if the change is intended"


# A runs directory whose path holds what a shell would read into, unquoted.
HOSTILE_RUNS_DIR = Path("/shared/scale lab/$(touch pwned)/`id`/'q'\\runs")


@pytest.mark.parametrize("runs_dir", [RUNS_DIR, HOSTILE_RUNS_DIR])
def test_bash_and_shellcheck_find_nothing_wrong(runs_dir, tmp_path):
    if not shutil.which("shellcheck"):
        pytest.fail("shellcheck is not installed: scripts/test installs it (Debian package shellcheck)")
    script = tmp_path / "array.sbatch"
    script.write_text(array_of(IDS, runs_dir=runs_dir))
    parsed = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert parsed.returncode == 0, parsed.stderr
    checked = subprocess.run(["shellcheck", "--severity=style", str(script)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout


def test_the_array_asks_for_what_its_runs_ask_and_names_none_of_them():
    script = array_of(IDS)
    own = run_script(IDS[0])
    for line in ("--nodes=2", "--ntasks-per-node=4", "--gres=gpu:4", "--partition=gpu", "--signal=USR1@120"):
        assert f"#SBATCH {line}\n" in own and f"#SBATCH {line}\n" in script
    assert "#SBATCH --array=0-2%2\n" in script
    assert "#SBATCH --output=/dev/null\n" in script
    assert script.count("#SBATCH --job-name=") == 1 and "#SBATCH --job-name=scalelab-array-0123456789\n" in script
    assert "--open-mode" not in script


@pytest.mark.parametrize("task", [0, 2])
def test_each_task_starts_its_own_runs_script_in_its_directory(task, tmp_path):
    """Run the array's script as Slurm would for one task, in a runs directory whose name a shell would misread:
    that task's run script runs, in its directory, its output appended to its output.log; no other run's does."""
    runs_dir = tmp_path / "runs $(touch pwned) 'x'"
    for run_id in IDS:
        (runs_dir / run_id).mkdir(parents=True)
        (runs_dir / run_id / SCRIPT_FILE).write_text(f'#!/bin/bash\n#SBATCH --nodes=9\necho "ran {run_id} in $PWD"\n')
        (runs_dir / run_id / OUTPUT_FILE).write_text("before\n")
    script = tmp_path / "array.sbatch"
    script.write_text(array_of(IDS, runs_dir=runs_dir))
    env = {"PATH": "/usr/bin:/bin", "SLURM_ARRAY_TASK_ID": str(task), "SLURM_ARRAY_JOB_ID": "77"}
    result = subprocess.run(["bash", str(script)], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    for index, run_id in enumerate(IDS):
        output = (runs_dir / run_id / OUTPUT_FILE).read_text()
        if index == task:
            started = f"scalelab: run {run_id} is task {task} of array job 77\n"
            assert output == f"before\n{started}ran {run_id} in {runs_dir / run_id}\n"
        else:
            assert output == "before\n"
    assert not (tmp_path / "pwned").exists() and not any(runs_dir.glob("**/pwned"))


def test_a_task_of_no_run_fails_saying_so(tmp_path):
    script = tmp_path / "array.sbatch"
    script.write_text(array_of(IDS, runs_dir=tmp_path))
    env = {"PATH": "/usr/bin:/bin", "SLURM_ARRAY_TASK_ID": "3"}
    result = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True)
    assert result.returncode == 1
    assert "array task '3' is none of this array's runs" in result.stderr


def test_array_range_and_its_throttle():
    assert array_range(16, None) == "0-15"
    assert array_range(256, 8) == "0-255%8"
    for bad in [(0, None), (3, 0)]:
        with pytest.raises(ValueError):
            array_range(*bad)


def test_a_name_or_directive_that_is_not_the_arrays_own_is_refused():
    directives = shared_directives(run_script(IDS[0])) or ()
    tasks = [ArrayTask(IDS[0], RUNS_DIR / IDS[0])]
    with pytest.raises(ValueError, match="unsafe array job name"):
        render_array_script("x y", directives, tasks, None, "h")
    with pytest.raises(ValueError, match="name one run"):
        render_array_script("a", (*directives, "#SBATCH --output=/x"), tasks, None, "h")
    with pytest.raises(ValueError, match="unsafe run directory"):
        render_array_script("a", directives, [ArrayTask("r", Path("relative"))], None, "h")


# ---- which runs go together -----------------------------------------------------------------------------------


def test_runs_differing_only_in_their_id_seed_or_learning_rate_share_an_array():
    scripts = {
        "a": run_script("a0", seed=1),
        "b": run_script("b0", seed=2),
        "c": run_script("c0", lr=0.5),
        "wide": run_script("w0", nodes=1, gpus=4),  # other #SBATCH lines: a job of its own
    }
    arrays, alone = group(list(scripts), scripts.__getitem__, None)
    assert arrays == [["a", "b", "c"]]
    assert alone == ["wide"]


def test_a_script_that_is_an_array_already_goes_alone():
    nested = run_script("a0").replace("#SBATCH --time=", "#SBATCH --array=0-3\n#SBATCH --time=")
    scripts = {"a": nested, "b": run_script("b0"), "c": run_script("c0")}
    assert group(list(scripts), scripts.__getitem__, None) == ([["b", "c"]], ["a"])


def test_with_a_concurrency_limit_arrays_only_where_every_run_fits_one():
    same = {name: run_script(f"{name}0", seed=index) for index, name in enumerate("abcd")}
    assert group(list(same), same.__getitem__, 2) == ([list("abcd")], [])
    mixed = {**same, "wide": run_script("w0", nodes=1, gpus=4)}
    assert group(list(mixed), mixed.__getitem__, 2) == ([], list(mixed))


def test_a_group_larger_than_slurms_array_size_is_split():
    script = run_script("a0")
    items = list(range(MAX_TASKS + 5))
    arrays, alone = group(items, lambda _: script, None)
    assert [len(members) for members in arrays] == [MAX_TASKS, 5] and alone == []


# ---- job ids of array tasks -----------------------------------------------------------------------------------


def test_folded_pending_tasks_are_told_apart():
    assert array_tasks("123_[2-4]") == ["123_2", "123_3", "123_4"]
    assert array_tasks("123_[0,5-6%2]") == ["123_0", "123_5", "123_6"]
    assert array_tasks("123_7") == ["123_7"] and array_tasks("123") == ["123"]
    assert array_tasks("123_[9-2]") == ["123_[9-2]"]  # not a range: no task of a run's


def test_each_run_gets_its_tasks_status_from_one_poll():
    """squeue as Slurm prints an array of 16: two tasks running, the others pending in one folded row; and a plain
    job. Each run's job id maps to its own task's row."""
    output = (
        "500_0|RUNNING|None|sl2n1|2026-01-01T10:00:00|scalelab-array-r0\n"
        "500_1|RUNNING|None|sl2n2|2026-01-01T10:00:00|scalelab-array-r0\n"
        "500_[2-15%2]|PENDING|JobArrayTaskLimit||2026-01-01T10:00:00|scalelab-array-r0\n"
        "501|PENDING|Priority||2026-01-01T10:00:01|scalelab-x\n"
    )
    created = datetime(2026, 1, 1, tzinfo=UTC)
    jobs = [Job(f"500_{task}", None, created) for task in range(16)] + [Job("501", "scalelab-x", created)]
    found = statuses_of(jobs, status_rows(output, "squeue", with_exit_code=False))
    assert len(found) == 17
    assert [found[job].state for job in jobs[:3]] == [RunState.running, RunState.running, RunState.pending]
    assert {found[job].reason for job in jobs[2:16]} == {"JobArrayTaskLimit"}
    assert found[jobs[1]].nodes == "sl2n2" and found[jobs[16]].reason == "Priority"


@dataclasses.dataclass
class Followed:
    id: str
    job_id: str | None
    created_at: datetime
    nodes: str | None = None


def test_an_array_task_is_asked_about_without_its_runs_name():
    """The tasks of an array carry the array's name: asking for the run's own would take every task's record for
    another job's; an older record of the same id is still told apart by its submit time."""
    created = datetime(2026, 1, 1, tzinfo=UTC)
    task = job_of(Followed("r1", "500_3", created))  # type: ignore[arg-type]
    alone = job_of(Followed("r2", "501", created))  # type: ignore[arg-type]
    assert task.name is None and alone.name == "scalelab-r2"
    older = status_rows(
        f"500_3|COMPLETED|None|n1|{(created - timedelta(days=1)).isoformat()}|x\n", "squeue", with_exit_code=False
    )
    assert statuses_of([task], older) == {}


def test_tasks_that_never_started_are_found_through_their_arrays_record():
    """sacct keeps no record of an array task that never started (held, then cancelled): asked by the array's id, it
    answers the folded row, which tells each such task's end."""
    asked: list[list[str]] = []

    def sacct(argv):
        asked.append(list(argv))
        row = "639_[0-3]|CANCELLED by 0|JobHeldUser|0:0|None assigned|2026-01-01T10:00:00|scalelab-array-r0\n"
        return subprocess.CompletedProcess(argv, 0, row, "")

    created = datetime(2026, 1, 1, tzinfo=UTC)
    jobs = [Job("639_0", None, created), Job("639_3", None, created), Job("700", "scalelab-x", created)]
    found = sacct_statuses(jobs, sacct)
    assert "--jobs=639_0,639_3,700,639" in asked[0]
    assert {job.job_id: status.state for job, status in found.items()} == {
        "639_0": RunState.cancelled,
        "639_3": RunState.cancelled,
    }


def test_an_array_tasks_accounting_is_its_latest_record_whatever_its_name():
    run = Run(experiment_id="e", position=0, scheduler="slurm", spec={}, run_dir="/x", job_id="500_3", nodes="n1")
    run.ended_at = run.submitted_at = datetime(2026, 1, 1)
    assert _ended_job(run).name is None
    run.job_id = "501"
    assert _ended_job(run).name == f"scalelab-{run.id}"


# ---- a restarted server finding the tasks it never recorded -----------------------------------------------------


@pytest.mark.parametrize("runs_dir", [RUNS_DIR, HOSTILE_RUNS_DIR])
def test_the_table_read_back_says_which_task_each_run_is(runs_dir):
    assert tasks_in(array_of(IDS, runs_dir=runs_dir)) == {IDS[0]: 0, IDS[1]: 1, IDS[2]: 2}


def test_a_table_this_module_did_not_write_says_nothing():
    script = array_of(IDS)
    swapped = script.replace("    1) run_id=", "    7) run_id=")
    twice = script.replace(f"run_id={IDS[2]};", f"run_id={IDS[1]};")
    unbalanced = script.replace(f"run_id={IDS[1]};", f"run_id='{IDS[1]};")
    quoted_otherwise = script.replace(f"run_id={IDS[1]};", f"run_id='{IDS[1]}';")  # _quote leaves a plain id bare
    for changed in (swapped, twice, unbalanced, quoted_otherwise):
        assert changed != script and tasks_in(changed) == {}
    assert tasks_in(run_script(IDS[0])) == {}  # a run's own script: no table


def test_runs_found_as_tasks_of_the_arrays_that_were_found():
    named = {"scalelab-array-a": "500", "scalelab-c": "601", "scalelab-other": "9"}
    arrays = {
        "scalelab-array-a": {"a": 0, "b": 1, "c": 2},
        "scalelab-array-x": {"x": 0},  # its array was never submitted
    }
    found = jobs_by_run(named, ["a", "b", "c", "x", "y"], arrays)
    # c's own job is the later: it was submitted alone after a server missed its task.
    assert found == {"a": "500_0", "b": "500_1", "c": "601"}
    assert jobs_by_run(named, ["c", "y"]) == {"c": "601"}


def _unrecorded(run_id: str, runs_dir: Path) -> Run:
    return Run(id=run_id, experiment_id="e", position=0, scheduler="slurm", spec={}, run_dir=str(runs_dir / run_id))


def test_the_tasks_to_find_come_from_the_scripts_of_arrays_a_run_to_find_is_first_of(tmp_path):
    """Only the runs asked about are mapped, each array found by its first run's name, and only arrays holding a
    run never submitted; a script that does not start with the run it is named after, or is not a file, is left
    alone."""
    folder = tmp_path / ARRAYS_DIR
    folder.mkdir()
    (folder / f"scalelab-array-{IDS[0]}.sh").write_text(array_of(IDS, runs_dir=tmp_path))
    (folder / "scalelab-array-3123456789.sh").write_text(array_of([IDS[2], "3123456789"], runs_dir=tmp_path))
    (folder / "scalelab-array-4123456789.sh").symlink_to(folder / f"scalelab-array-{IDS[0]}.sh")
    asked = [_unrecorded(run_id, tmp_path) for run_id in (IDS[0], IDS[2], "3123456789", "4123456789", "5123456789")]
    assert tasks_to_find(asked) == {f"scalelab-array-{IDS[0]}": {IDS[0]: 0, IDS[2]: 2}}
    assert tasks_to_find(asked[1:]) == {}  # the array's first run is not among them: not looked for
    # Its first run cancelled: the array is found by it, and maps it too.
    assert tasks_to_find(asked[1:], asked[:1]) == tasks_to_find(asked)
    assert tasks_to_find([], asked) == {}  # no run of it unsubmitted: the array was recorded
