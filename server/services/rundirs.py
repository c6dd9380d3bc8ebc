"""Run directories as the server makes and reads them (their names are the contract's: contract/rundir.py)."""

from __future__ import annotations

import codecs
import contextlib
import grp
import logging
import os
import pwd
import shlex
import shutil
import stat
from pathlib import Path

from contract.rundir import CHECKPOINTS_DIR, GENERATIONS_FILE, OUTPUT_FILE, SCRIPT_FILE, checkpoint_epoch
from server import runfiles
from server.errors import StorageFailed
from server.models import Run
from server.runfiles import Unreadable
from server.scheduler.choice import jobs_run_as_user

log = logging.getLogger(__name__)


def write_new(path: Path, text: str, mode: int = 0o644) -> None:
    """A file of a run being created: nobody reads its directory before the run's row is committed, so it needs
    neither a rename nor a sync (sbatch reads the script as it submits); both were half of a large sweep's time."""
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode), "w", encoding="utf-8") as handle:
        handle.write(text)


def path(runs_dir: Path, run_id: str) -> Path:
    return runs_dir / run_id


def create(runs_dir: Path, run_id: str, mode: int = 0o755) -> Path:
    """A new, empty directory for one run; refuses to reuse one. A job's directory is readable by others, as the
    worker in an image may run as another uid; one only the service reads (an import) is `mode` 0o750."""
    runs_dir.mkdir(parents=True, exist_ok=True)
    run_dir = path(runs_dir, run_id)
    run_dir.mkdir(mode=mode)
    return run_dir


def file_owner(run: Run) -> int | None:
    """Whose the run's files must be, as a uid (see owner_uid)."""
    return owner_uid(run.origin, run.scheduler, run.owner)


def owner_uid(origin: str, scheduler: str, owner: str | None) -> int | None:
    """Whose a run's files must be, as a uid: its owner's, where its job ran as its user (and made the directory,
    so that nothing in it is the service's); None where the job ran as the service, or the run was imported. Where
    the owner has no account here, runfiles.NOBODY: no file is theirs, so none is read."""
    if origin != "submitted" or not jobs_run_as_user(scheduler) or owner is None:
        return None
    try:
        return pwd.getpwnam(owner).pw_uid
    except KeyError:
        return runfiles.NOBODY


def read_output(run_dir: Path, offset: int, limit: int, owner: int | None) -> tuple[bytes, int]:
    """Up to `limit` bytes of the run's output from `offset`, cut at a character boundary; and the file's size.

    A missing output (the job has not started) reads as empty; one that is not a regular file of the run's own
    directory (whose, where `owner` is given) raises Unreadable (see server/runfiles.py).
    """
    with runfiles.open_file(run_dir, OUTPUT_FILE, owner) as output:
        if output is None:
            return b"", 0
        if offset > output.size:
            return b"", output.size  # the caller says so
        data = output.read(offset, limit)
    return data[: _whole_characters(data)], output.size


# generations.jsonl of the largest inference run: 256 prompts of 4096 characters and 4096 new tokens each.
MAX_GENERATIONS_BYTES = 16 * 1024 * 1024


def read_generations(run_dir: Path, owner: int | None) -> bytes:
    """An inference run's generations file (empty while the run has not written it)."""
    data = runfiles.read_file(run_dir, GENERATIONS_FILE, MAX_GENERATIONS_BYTES + 1, owner) or b""
    if len(data) > MAX_GENERATIONS_BYTES:
        raise Unreadable(f"{GENERATIONS_FILE} of this run is larger than {MAX_GENERATIONS_BYTES} bytes")
    return data


def _whole_characters(data: bytes) -> int:
    """How many leading bytes hold whole UTF-8 characters (all of them if none does: the bytes are not UTF-8)."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    decoder.decode(data, final=False)
    pending = len(decoder.getstate()[0])
    return len(data) - pending if pending < len(data) else len(data)


def remove(run_dir: Path) -> bool:
    """Remove what the service keeps of a run on disk; whether its directory went too.

    The directory of a run whose job made it (its script is the service's copy, see `service_script`) belongs to
    the run's user and stays: the service cannot delete a user's files, and should not. Only the copy goes.
    """
    copy = service_script(run_dir)
    if copy.is_file():
        copy.unlink(missing_ok=True)
        return False
    shutil.rmtree(run_dir, ignore_errors=True)
    return True


# ---- runs whose jobs make their own directories (the scheduler runs jobs as their users) ----------------------
#
# The runs directory is then shared by every user's jobs: owned by the service, of a group only the service is in,
# mode 3733 (setgid: each run directory and file inherits that group, through which the service reads them; sticky:
# nobody removes another's entry; others may create entries but not list them). The service writes nothing in a
# run's directory (it is the user's): it keeps each run's batch script in a directory of its own, .scripts.

SCRIPTS_DIR = ".scripts"


def service_script(run_dir: Path) -> Path:
    """Where the service keeps the batch script of a run whose job makes its directory (`<runs_dir>/.scripts`)."""
    return run_dir.parent / SCRIPTS_DIR / f"{run_dir.name}.sbatch"


def script_path(run_dir: Path, job_creates_dir: bool) -> Path:
    """The batch script a run's submission submits: the service's copy when the job makes its directory."""
    return service_script(run_dir) if job_creates_dir else run_dir / SCRIPT_FILE


def write_service_script(runs_dir: Path, run_id: str, text: str) -> Path:
    """Keep a new run's batch script in the service's own .scripts directory (made on first use, checked)."""
    scripts = ensure_scripts_dir(runs_dir)
    copy = scripts / service_script(path(runs_dir, run_id)).name
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    with os.fdopen(os.open(copy, flags, 0o600), "w", encoding="utf-8") as handle:
        handle.write(text)
    return copy


class RunsDirUnfit(RuntimeError):
    """The runs directory cannot hold runs whose jobs make their own directories; the message says what to run."""


def _names() -> tuple[str, str]:
    """The service's user and group names (numbers where the system has no name for them)."""
    uid, gid = os.geteuid(), os.getegid()
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = str(uid)
    try:
        group = grp.getgrgid(gid).gr_name
    except KeyError:
        group = str(gid)
    return user, group


def ensure_scripts_dir(runs_dir: Path) -> Path:
    """The service's .scripts directory in the runs directory, made 0700 if missing. Everyone may create entries
    in the runs directory: one that another user made first, or a link, is refused (the service would write its
    scripts where that user reads or replaces them)."""
    scripts = runs_dir / SCRIPTS_DIR
    try:
        with contextlib.suppress(FileExistsError):
            os.mkdir(scripts, 0o700)
        unfit = _not_the_services_own(os.lstat(scripts))
    except OSError as exc:
        raise RunsDirUnfit(
            f"cannot make {scripts}, where scalelab keeps the batch scripts it submits: {exc.strerror}"
        ) from None
    if unfit:
        raise RunsDirUnfit(
            f"{scripts}, where scalelab keeps the batch scripts it submits, {unfit}. Someone may have made it "
            f"before the service: look at what it holds, then remove it (sudo rm -rf -- {shlex.quote(str(scripts))}) "
            "and start scalelab again; it makes the directory itself."
        )
    return scripts


def _not_the_services_own(info: os.stat_result) -> str | None:
    if stat.S_ISLNK(info.st_mode):
        return "is a link"
    if not stat.S_ISDIR(info.st_mode):
        return "is not a directory"
    if info.st_uid != os.geteuid():
        return f"belongs to uid {info.st_uid}, not to the service (uid {os.geteuid()})"
    if stat.S_IMODE(info.st_mode) & 0o077:
        return f"has mode {stat.S_IMODE(info.st_mode):04o}: others than the service may use it"
    return None


def check_shared_root(runs_dir: Path) -> None:
    """Refuse to start, saying what to run, unless the runs directory is fit for jobs that make their own run
    directories as their users: a directory (not a link) owned by the service, of a group the service is in,
    with setgid and sticky bits, that everyone may enter and create entries in but that no other user may list:
    mode 3733 (the group's own bits matter little: only the service is in it). Then make (or check) the
    service's .scripts. Raises RunsDirUnfit."""
    user, group = _names()
    where = shlex.quote(str(runs_dir))
    try:
        info = os.lstat(runs_dir)
    except FileNotFoundError:
        raise RunsDirUnfit(
            f"the runs directory {runs_dir} does not exist. Make it, as root: "
            f"install -d -o {user} -g {group} -m 3733 {where}"
        ) from None
    except OSError as exc:
        raise RunsDirUnfit(f"cannot look at the runs directory {runs_dir}: {exc.strerror}") from None
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise RunsDirUnfit(
            f"the runs directory {runs_dir} is not a directory (or is a link): set SCALELAB_RUNS_DIR to the "
            f"directory itself, made as root with: install -d -o {user} -g {group} -m 3733 {where}"
        )
    problems: list[tuple[str, str | None]] = []
    if info.st_uid != os.geteuid():
        problems.append((f"belongs to uid {info.st_uid}, not to the service ({user})", f"chown {user} {where}"))
    if info.st_gid != os.getegid() and info.st_gid not in os.getgroups():
        problems.append(
            (f"has group gid {info.st_gid}, which the service is not in (it reads the runs through it)", None)
        )
    mode = stat.S_IMODE(info.st_mode)
    if not mode & stat.S_ISGID:
        problems.append(("lacks the setgid bit (run directories would not get its group)", None))
    if not mode & stat.S_ISVTX:
        problems.append(("lacks the sticky bit (users could remove each other's run directories)", None))
    if mode & stat.S_IROTH:
        problems.append(("lets every user list the runs (others may read it)", None))
    if mode & 0o700 != 0o700 or mode & 0o003 != 0o003:
        problems.append(("does not let the service in, or other users through to create their run directories", None))
    if problems:
        commands = [command for _, command in problems if command]
        if any(why.startswith("has group") for why, _ in problems):
            commands.append(f"chgrp {group} {where}")
        commands.append(f"chmod 3733 {where}")
        raise RunsDirUnfit(
            f"the runs directory {runs_dir} is not fit for jobs that run as their users: it "
            + "; it ".join(why for why, _ in problems)
            + ". Run, as root: "
            + " && ".join(commands)
        )
    members = _other_members(info.st_gid, user)
    if members:
        raise RunsDirUnfit(
            f"the runs directory {runs_dir} has group {_group_name(info.st_gid)}, whose members besides the service "
            f"({', '.join(sorted(members))}) could read every user's runs through it: give it a group of which the "
            f"service is the only member, as root, e.g. its own: chgrp {group} {where}"
        )
    ensure_scripts_dir(runs_dir)


def _group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def _other_members(gid: int, user: str) -> set[str]:
    """The group's members besides the service, as the group database lists them (users whose primary group it is
    are not listed; the service cannot enumerate every account on a site with a directory service)."""
    try:
        return set(grp.getgrgid(gid).gr_mem) - {user}
    except KeyError:
        return set()


def unwritable(runs_dir: Path, exc: OSError, outcome: str) -> StorageFailed:
    """What to tell the user when the run directories cannot be written (the operator's log says where)."""
    log.error("cannot write run directories under %s: %s", runs_dir, exc)
    return StorageFailed(
        f"cannot write the run directories ({exc.strerror}); {outcome}. "
        "Ask the operator to check the runs directory's space and permissions."
    )


# A batch script is a few kilobytes; a page shows no more than this of one.
MAX_SCRIPT_BYTES = 256 * 1024


def read_script(run_dir: Path, owner: int | None) -> str | None:
    """The run's batch script as written at submission (the service's copy, for a run whose job made its
    directory); None if it cannot be read as a file of its directory."""
    copy = service_script(run_dir)
    try:
        # The service's copy is in its own .scripts (no job writes there): read as the service's, not the owner's.
        data = runfiles.read_file(copy.parent, copy.name, MAX_SCRIPT_BYTES, None)
        if data is None:
            data = runfiles.read_file(run_dir, SCRIPT_FILE, MAX_SCRIPT_BYTES, owner)
    except (Unreadable, OSError):
        return None
    return None if data is None else data.decode("utf-8", errors="replace")


def checkpoint_epochs(run_dir: Path, owner: int | None) -> list[int]:
    """Epochs of the complete checkpoints in the run's directory (the worker renames one into place when done)."""
    try:
        names = runfiles.directories_in(run_dir, CHECKPOINTS_DIR, owner)
    except (Unreadable, OSError):
        return []
    return sorted(epoch for name in names if (epoch := checkpoint_epoch(name)) is not None)
