"""The batch script of a planned run, as a preview shows it and as submitting writes it."""

from __future__ import annotations

from pathlib import Path

from contract.spec import RunSpec
from server.config import Settings
from server.render import BatchJob, render_script
from server.scheduler import Scheduler
from server.services import rundirs
from server.services.planning import Plan

# Stands for the run id in a previewed script: ids are given when runs are created.
PREVIEW_RUN_ID = "RUN_ID"


def batch_job(
    run_id: str,
    run_dir: Path,
    spec: RunSpec,
    plan: Plan,
    settings: Settings,
    scheduler: Scheduler,
    image: str | None = None,
    prompts: str | None = None,
) -> BatchJob:
    """How the run's job starts; `prompts` (an inference run's) travel in the script only when the job makes its
    directory: otherwise the server writes them there. `image` is the one a run again pins (a digest), before a
    program's own image, before the profile's."""
    creates_dir = scheduler.runs_as_user
    worker_python = Path(plan.profile.worker_python) if plan.profile.worker_python else settings.worker_python
    return BatchJob(
        run_id=run_id,
        run_dir=run_dir,
        time_limit=plan.time_limit,
        profile=plan.profile,
        partition=plan.partition,
        worker_python=worker_python,
        launcher="srun" if scheduler.uses_slurm else "local",
        sbatch_options=plan.sbatch_options,
        image=image or (spec.program.image if spec.program is not None else None),
        exclusive=plan.exclusive,
        job_creates_dir=creates_dir,
        prompts=prompts if creates_dir else None,
        after_job=plan.after.job_id if plan.after is not None else None,
    )


def preview_script(plan: Plan, index: int, settings: Settings, scheduler: Scheduler, prompts: str | None = None) -> str:
    """The batch script the plan's run `index` would get, with a placeholder for its id; nothing is written."""
    run_dir = rundirs.path(settings.runs_dir, PREVIEW_RUN_ID)
    spec = plan.specs[index]
    return render_script(spec, batch_job(PREVIEW_RUN_ID, run_dir, spec, plan, settings, scheduler, prompts=prompts))
