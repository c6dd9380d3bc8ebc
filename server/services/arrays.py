"""Slurm job arrays: which runs of an experiment go as one array, and submitting them with one sbatch.

Runs qualify together when their batch scripts differ only in what names the run (server/render_array.py): the
same #SBATCH lines, so the same resources, partition, time limit and options. Each task of the array is still a
run of its own, with its own job id `<array job>_<task>` (followed, cancelled, requeued and resubmitted alone).

Only a backend that submits array scripts as they are (Slurm's commands: `submits_arrays`) gets arrays; pyslurm,
slurmrestd and the local scheduler submit one job per run.

A server that stops after sbatch answered but before it recorded the tasks' job ids finds them when it starts again
(submission.reconcile): the array's script, kept in the runs directory, says which task each run is.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from contract.rundir import SCRIPT_FILE
from server import runfiles
from server.config import Settings
from server.models import Run
from server.render_array import ArrayTask, render_array_script, shared_directives, tasks_in
from server.scheduler import Scheduler, SchedulerError
from server.scheduler.naming import ArrayTasks, array_job_name, task_job_id
from server.services import rundirs
from server.services.planning import Plan
from server.services.scripts import PREVIEW_RUN_ID, preview_script

log = logging.getLogger(__name__)

# Slurm's default MaxArraySize is 1001, task indices 0 to 1000: a larger group goes as several arrays.
MAX_TASKS = 1000
# Fewer runs than this gain nothing from an array.
MIN_TASKS = 2
# Where the arrays' scripts are kept, in the runs directory: what was submitted, for whoever wonders.
ARRAYS_DIR = ".arrays"
# The most of an array's script read back: MAX_TASKS rows, each with a run directory's path of up to 4000 characters.
MAX_SCRIPT_BYTES = 4 * 1024 * 1024

_T = TypeVar("_T")


def submits_arrays(scheduler: Scheduler) -> bool:
    """Whether the backend submits an array's script as it is and answers the array's job id (Slurm's commands)."""
    return getattr(scheduler, "submits_arrays", False) is True


def why_not_arrays(settings: Settings, scheduler: Scheduler) -> str | None:
    """Why this server submits one job per run, or None where it submits arrays."""
    if not settings.job_arrays:
        return "SCALELAB_JOB_ARRAYS is off"
    if not submits_arrays(scheduler) or scheduler.runs_as_user:
        return f"the {scheduler.name} scheduler submits one job per run"
    return None


def group(items: Sequence[_T], script_of: Callable[[_T], str], limit: int | None) -> tuple[list[list[_T]], list[_T]]:
    """The items (runs, in order) that go as arrays, in groups of equal #SBATCH lines of at most MAX_TASKS, and
    those that go as jobs of their own.

    With a concurrency limit, arrays are used only where every run goes into ONE array, throttled to the limit
    (`%K`): the limit is the experiment's, and several arrays (or an array beside jobs of their own, which scalelab
    holds back) would each count on their own."""
    by_key: dict[tuple[str, ...], list[int]] = {}
    alone: list[int] = []
    for position, item in enumerate(items):
        key = shared_directives(script_of(item))
        if key is None:
            alone.append(position)
        else:
            by_key.setdefault(key, []).append(position)
    arrays: list[list[int]] = []
    for members in by_key.values():
        if len(members) < MIN_TASKS:
            alone += members
            continue
        arrays += [members[start : start + MAX_TASKS] for start in range(0, len(members), MAX_TASKS)]
    if limit is not None and (len(arrays) != 1 or alone):
        return [], list(items)
    return [[items[at] for at in members] for members in arrays], [items[at] for at in sorted(alone)]


@dataclass(frozen=True)
class RunArray:
    """Runs that go to Slurm as one array, task i being runs[i]; at most `throttle` running at once."""

    runs: list[Run]
    throttle: int | None


def choose(runs: Sequence[Run], settings: Settings, scheduler: Scheduler, limit: int | None) -> list[RunArray]:
    """The arrays the prepared runs (their scripts written) go as; none where this server submits one job per run."""
    if why_not_arrays(settings, scheduler) is not None:
        return []
    arrays, _ = group(runs, lambda run: _script(run).read_text(encoding="utf-8"), limit)
    return [RunArray(members, _throttle(limit, len(members))) for members in arrays]


def _script(run: Run) -> Path:
    return Path(run.run_dir) / SCRIPT_FILE


def _throttle(limit: int | None, count: int) -> int | None:
    return limit if limit is not None and limit < count else None


def _tasks(runs: Sequence[Run]) -> list[ArrayTask]:
    return [ArrayTask(run.id, Path(run.run_dir)) for run in runs]


def array_script(array: RunArray) -> str:
    first = array.runs[0]
    directives = shared_directives(_script(first).read_text(encoding="utf-8")) or ()
    header = f"scalelab array of {len(array.runs)} runs of experiment {first.experiment_id}"
    return render_array_script(array_job_name(first.id), directives, _tasks(array.runs), array.throttle, header)


_ARRAY_JOB_ID = re.compile(r"^[0-9]+$")


def submit(array: RunArray, runs_dir: Path, scheduler: Scheduler) -> list[tuple[Run, str | SchedulerError]]:
    """Submit the array with one sbatch; each run's outcome: its task's job id, or the scheduler's refusal."""
    try:
        script = _written(runs_dir, array)
        array_id = scheduler.submit(script, runs_dir, None)
        if not _ARRAY_JOB_ID.match(array_id):
            raise SchedulerError(f"the scheduler answered {array_id!r} for an array, not an array job's id")
    except SchedulerError as exc:
        return [(run, exc) for run in array.runs]
    except OSError as exc:
        refused = SchedulerError(f"could not write the array's script in {runs_dir / ARRAYS_DIR}: {exc}")
        return [(run, refused) for run in array.runs]
    log.info("submitted %d runs as array job %s", len(array.runs), array_id)
    return [(run, task_job_id(array_id, index)) for index, run in enumerate(array.runs)]


def _script_name(first_run_id: str) -> str:
    return f"{array_job_name(first_run_id)}.sh"


def _written(runs_dir: Path, array: RunArray) -> Path:
    folder = runs_dir / ARRAYS_DIR
    folder.mkdir(mode=0o755, exist_ok=True)
    path = folder / _script_name(array.runs[0].id)
    path.unlink(missing_ok=True)  # submitted again after the server could not record it: the same runs
    rundirs.write_new(path, array_script(array), mode=0o755)
    return path


def tasks_to_find(unsubmitted: Sequence[Run], cancelled: Sequence[Run] = ()) -> ArrayTasks:
    """The arrays some of `unsubmitted` (runs never recorded as submitted) may have gone to Slurm in, by the array's
    job name, and the task each of those runs is; with the task of each run of `cancelled` (cancelled before a job
    was recorded for it) in one of those arrays. Read from the scripts this server wrote, in ARRAYS_DIR (its own
    folder in the runs directory, which no job is given), of the arrays whose first task is one of these runs.

    The script is what Slurm runs: its table, not anything the database or a run's directory says now, tells which
    run each task started. An array holding no run of `unsubmitted` was recorded: none of it is looked for."""
    wanted = {run.id for run in [*unsubmitted, *cancelled]}
    found: dict[str, dict[str, int]] = {}
    for first in [*unsubmitted, *cancelled]:
        if not Path(first.run_dir).is_absolute():
            continue  # a run whose directory its job makes: never in an array
        folder, name = Path(first.run_dir).parent / ARRAYS_DIR, _script_name(first.id)
        try:
            data = runfiles.read_file(folder, name, MAX_SCRIPT_BYTES, None)
        except (runfiles.Unreadable, OSError) as exc:
            log.warning("run %s: cannot read the script of the array it may be the first task of: %s", first.id, exc)
            continue
        if data is None:
            continue  # no array was written with it first
        tasks = tasks_in(data.decode("utf-8", errors="replace"))
        if tasks.get(first.id) != 0:
            log.warning("%s does not start with run %s: its runs are not looked for in Slurm", folder / name, first.id)
            continue
        if any(run.id in tasks for run in unsubmitted):
            found[array_job_name(first.id)] = {run_id: index for run_id, index in tasks.items() if run_id in wanted}
    return found


def preview_array(plan: Plan, index: int, settings: Settings, scheduler: Scheduler) -> tuple[str | None, str | None]:
    """The array script the plan's run `index` would be a task of, its runs named RUN_ID_<position>, or None and
    why it would go as a job of its own."""
    why = why_not_arrays(settings, scheduler)
    if why is not None:
        return None, why
    scripts = [preview_script(plan, position, settings, scheduler) for position in range(len(plan.specs))]
    arrays, _ = group(list(range(len(plan.specs))), lambda position: scripts[position], plan.max_concurrent)
    members = next((positions for positions in arrays if index in positions), None)
    if members is None:
        if plan.max_concurrent is not None and len(plan.specs) >= MIN_TASKS:
            return None, (
                "with a concurrency limit, runs go as an array only when all of them fit one array (the same "
                "#SBATCH lines): scalelab holds them back instead"
            )
        return None, "no other run of the experiment has the same #SBATCH lines (resources, partition, options)"
    directives = shared_directives(scripts[members[0]]) or ()
    ids = [f"{PREVIEW_RUN_ID}_{at}" for at in members]
    tasks = [ArrayTask(run_id, rundirs.path(settings.runs_dir, run_id)) for run_id in ids]
    header = f"scalelab array of {len(members)} runs ({PREVIEW_RUN_ID}_<n> stands for the id run n gets)"
    throttle = _throttle(plan.max_concurrent, len(members))
    return render_array_script(array_job_name(ids[0]), directives, tasks, throttle, header), None
