"""Which scheduler a server uses: the one the settings name, or for `auto` pyslurm where it matches the cluster,
then Slurm's commands, then this machine."""

from __future__ import annotations

import logging
import shlex
import shutil

from server.config import Settings
from server.scheduler import Scheduler
from server.scheduler.local import LocalScheduler
from server.scheduler.pyslurm_backend import PyslurmScheduler, pyslurm_usable
from server.scheduler.slurm import SlurmScheduler
from server.scheduler.slurmrestd import SlurmrestdScheduler
from server.scheduler.tokens import Tokens

log = logging.getLogger(__name__)


_BACKENDS = (PyslurmScheduler, SlurmScheduler, SlurmrestdScheduler, LocalScheduler)
_RUNNING_AS_USER = frozenset(backend.name for backend in _BACKENDS if backend.runs_as_user)


def jobs_run_as_user(name: str) -> bool:
    """Whether the jobs of the backend of this name (a run's `scheduler`) ran as their runs' owners: their files
    are then the owners' own."""
    return name in _RUNNING_AS_USER


class SchedulerUnusable(RuntimeError):
    """The configured scheduler cannot work here; the message says why and what to do."""


def make_scheduler(settings: Settings) -> Scheduler:
    """The scheduler the settings ask for; `auto` prefers pyslurm, then Slurm's commands, then this machine."""
    name = settings.scheduler
    if name in ("auto", "pyslurm"):
        usable, reason = pyslurm_usable()
        if usable:
            return PyslurmScheduler()
        if name == "pyslurm":
            raise SchedulerUnusable(f"SCALELAB_SCHEDULER=pyslurm, but {reason}")
        log.info("not using pyslurm: %s", reason)
        name = "slurm" if shutil.which("sbatch") else "local"
    if name == "slurm":
        return SlurmScheduler()
    if name == "slurmrestd":
        tokens = Tokens(shlex.split(settings.slurm_token_command), settings.slurm_token_lifespan_s)
        try:
            return SlurmrestdScheduler(settings.slurmrestd_url, tokens)
        except ValueError as exc:
            raise SchedulerUnusable(f"SCALELAB_SCHEDULER=slurmrestd, but {exc}") from None
    return LocalScheduler(settings.runs_dir / ".local-jobs")
