"""The batch script of one run: a pure function of the run spec and where and how it runs."""

from __future__ import annotations

import base64
import re
import shlex
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from contract import workdir_probe
from contract.images import is_file, named_digest
from contract.program import ENV_NAME, PYTHON_WORD, WORKDIR, Launcher, ProgramCwd, ProgramSpec, named_file
from contract.records import METRIC_PREFIX, RECORD_VERSION, StartRecord, format_record
from contract.rundir import (
    DIGEST_VAR,
    EXIT_IMAGE_CHANGED,
    EXIT_INTERRUPTED,
    EXIT_NO_PROGRAM,
    IMAGE_VAR,
    OUTPUT_FILE,
    PROMPTS_FILE,
    RUN_DIR_VAR,
    RUN_ID_VAR,
    SEED_VAR,
    SPEC_FILE,
    STRATEGY_VAR,
)
from contract.spec import RunKind, RunSpec
from server.profiles import ClusterProfile
from server.runtimes import ContainerRuntime, Runtime, Task, TaskWords, runtime_for
from server.scheduler.naming import job_name
from server.timelimit import seconds

# #SBATCH lines are parsed by sbatch, not by a shell: only values of this alphabet may go there.
_DIRECTIVE_VALUE = re.compile(r"^[A-Za-z0-9_./:+@-]+$")
# A Slurm job id as --dependency=afterok takes it: a job, or one task of an array ("123_4").
AFTER_JOB = re.compile(r"^[0-9]{1,20}(_[0-9]{1,10})?$")
# `export NAME=...` takes the name unquoted: only a plain identifier may be one.
_ENV_NAME = re.compile(ENV_NAME)
_WORKDIR = re.compile(WORKDIR)


@dataclass(frozen=True)
class BatchJob:
    """Where and how a run's processes start."""

    run_id: str
    run_dir: Path
    time_limit: str
    profile: ClusterProfile
    partition: str
    worker_python: Path
    launcher: Literal["srun", "local"] = "srun"
    # Users' own sbatch options, already checked against the profile's allowlist.
    sbatch_options: Mapping[str, str] = field(default_factory=dict)
    # The image to run in instead of the profile's: "run again" pins a run to the digest it ran on.
    image: str | None = None
    # Whole nodes for the run: nothing else disturbs its timings.
    exclusive: bool = False
    # The job runs as its user and makes the run's directory itself, so that the directory and every file in it
    # are the user's (the service reads them through the runs directory's group): the script then carries the
    # spec and the prompts (see _own_directory). Otherwise the server made the directory and wrote them there.
    job_creates_dir: bool = False
    # An inference run's prompts file (one prompt per line): only a script that makes its directory carries it.
    prompts: str | None = None
    # The job of the training run an inference run waits for (server/services/dependencies.py): a job id only.
    after_job: str | None = None

    @property
    def runtime(self) -> ContainerRuntime:
        """What the tasks run in: the profile's runtime, or none where torchrun starts them on this machine."""
        return runtime_for(Runtime.none if self.launcher == "local" else self.profile.container.runtime)

    @property
    def _named_image(self) -> str | None:
        """The image as the run names it: a pin (a file's with the digest it must have), or the profile's."""
        return self.runtime.image_named(self.profile.container, self.image)

    @property
    def container_image(self) -> str | None:
        """The image the tasks run in, as the runtime is given it: an image file by its path alone (a path with
        @sha256:... after it names no file)."""
        image, pinned = self._named_image, self.pinned_file_digest
        return named_digest(image)[0] if image is not None and pinned is not None else image

    @property
    def pinned_file_digest(self) -> str | None:
        """The digest the image file must have, where the run is pinned to one (run again on a SIF or squashfs)."""
        name, digest = named_digest(self._named_image or "")
        return digest if is_file(name) else None


# Inside '...' these are inert, but shellcheck takes them for mistakes (an expansion that will not happen, an
# escaped quote): a word holding one goes into bash's $'...' instead, where they (and quotes) are escaped.
_MISREAD = "$`\\"
_ANSI_C = {"\\": "\\\\", "'": "\\'", "$": "\\x24", "`": "\\x60"}


class ShellText(str):
    """Fixed shell text of scalelab's own that another shell reads later (`sh -c`): single-quoted as written, so
    that it reads as it runs (the script tells shellcheck that its expansions are meant for that shell)."""


def _quote(text: str) -> str:
    """`text` as one shell word, whatever it holds: every value reaches the script through here."""
    if isinstance(text, ShellText) or not any(char in text for char in _MISREAD):
        return shlex.quote(text)
    escaped = (
        _ANSI_C.get(char) or (f"\\x{ord(char):02x}" if ord(char) < 32 or ord(char) == 127 else char) for char in text
    )
    return "$'" + "".join(escaped) + "'"


def _join(words: list[str]) -> str:
    return " ".join(_quote(word) for word in words)


def _directive(option: str, value: object) -> str:
    text = str(value)
    if not _DIRECTIVE_VALUE.match(text):
        raise ValueError(f"unsafe value for #SBATCH --{option}: {text!r}")
    return f"#SBATCH --{option}={text}"


def _worker_args(spec: RunSpec, spec_path: Path) -> list[str]:
    command = {RunKind.inference: "infer", RunKind.probe: "probe"}.get(spec.kind, "train")
    return ["-m", "worker", command, "--spec", str(spec_path)]


def _signal_seconds(spec: RunSpec, job: BatchJob) -> int:
    if spec.program is not None:
        # USR1's default action ends a process: a program that does not expect it would be killed before its time
        # limit, and it does not save and exit with EXIT_INTERRUPTED to be requeued as the worker does.
        return 0
    # A signal due before the job could even start would stop every run at once: keep it in the second half.
    return min(job.profile.signal_before_end_s, seconds(job.time_limit) // 2)


def _directives(spec: RunSpec, job: BatchJob) -> list[str]:
    partition = job.profile.partition(job.partition)
    options: dict[str, object] = {
        "job-name": job_name(job.run_id),
        "nodes": spec.nodes,
        "ntasks-per-node": spec.gpus_per_node,
    }
    if partition.cpus_per_task:
        options["cpus-per-task"] = partition.cpus_per_task
    if partition.gres:
        options["gres"] = f"{partition.gres}:{spec.gpus_per_node}"
    if job.exclusive:
        options["exclusive"] = None
    options["time"] = job.time_limit
    options["partition"] = job.partition
    if job.profile.account:
        options["account"] = job.profile.account
    if job.profile.qos:
        options["qos"] = job.profile.qos
    if job.job_creates_dir:
        # slurmstepd opens the output file, as the job's user, before the script runs: the run's directory does
        # not exist yet, so any path in it would fail the job before it starts. The script sends its own output
        # there once it has made the directory, appending (as --open-mode=append does) on every requeue.
        _checked_run_dir(job)
        options["output"] = "/dev/null"
    else:
        options["output"] = job.run_dir / OUTPUT_FILE
        # A requeued job appends, so the byte offsets the server stored stay valid.
        options["open-mode"] = "append"
    signal_s = _signal_seconds(spec, job)
    if signal_s:
        options["signal"] = f"USR1@{signal_s}"
        options["requeue"] = None
    options.update(_dependency(job))
    options.update(sorted(job.sbatch_options.items()))  # a user's account or qos replaces the profile's
    return [f"#SBATCH --{name}" if value is None else _directive(name, value) for name, value in options.items()]


def _dependency(job: BatchJob) -> dict[str, object]:
    """Wait for the training job to complete; end (rather than wait for ever) if it fails, is cancelled or times out."""
    if job.after_job is None:
        return {}
    if not AFTER_JOB.match(job.after_job):
        raise ValueError(f"not a Slurm job id to wait for: {job.after_job!r}")
    return {"dependency": f"afterok:{job.after_job}", "kill-on-invalid-dep": "yes"}


def _checked_run_dir(job: BatchJob) -> None:
    """The run directory goes into srun and runtime options (mounts split at ',' and ':'): the same alphabet as
    a directive's, whether or not a directive names it."""
    if not job.run_dir.is_absolute() or not _DIRECTIVE_VALUE.match(str(job.run_dir)):
        raise ValueError(f"unsafe run directory: {str(job.run_dir)!r}")


def _checked_workdir(program: ProgramSpec) -> str:
    """A program's directory goes into the runtimes' mount options as the run directory does (ProgramSpec checks
    it; a spec built without validation must not get past the renderer either)."""
    if not _WORKDIR.match(program.workdir):
        raise ValueError(f"unsafe program workdir: {program.workdir!r}")
    return program.workdir


# The delimiters of the here-documents that carry the spec and the prompts (quoted: bash expands nothing in them).
SPEC_DELIMITER = "SCALELAB_SPEC"
PROMPTS_DELIMITER = "SCALELAB_PROMPTS"


def _here_document(command: str, delimiter: str, body: str) -> list[str]:
    """`command <<'DELIMITER'` with `body`; refuses a body in which the delimiter line could occur (it would end
    the document early, and the rest would run as commands). A check that holds under `python -O`, unlike assert."""
    if delimiter in body.split("\n"):
        raise ValueError(f"the here-document's delimiter {delimiter} occurs as a line of its body")
    return [f"{command} <<'{delimiter}'", body, delimiter]


def _own_directory(job: BatchJob) -> list[str]:
    """The job, as its user, makes the run's directory, moves into it and sends its output there.

    Each step is idempotent: a requeued job runs the script again, in the directory it made the first time. Until
    output.log is open, what the script prints goes to /dev/null (see _directives): a refusal is also sent to the
    compute node's syslog through `logger`, where the centre's admin can find it (best effort: a node may have no
    syslog); the user and the server see the job fail with exit code 1 and no output.
    """
    run_dir, runs_dir = _quote(str(job.run_dir)), _quote(str(job.run_dir.parent))
    squatted = (
        f"{job.run_dir} is not this user's own directory (another user made it first, or it is a link): "
        "the run does not write there"
    )
    return [
        "# The job makes its run's directory as its user, so that the directory and its files are the user's; they",
        "# inherit the runs directory's group (setgid), through which the service reads them; umask 027 keeps",
        "# everyone else out. Until output.log is open, output goes to /dev/null: a refusal goes to syslog too.",
        "umask 027",
        "refuse() {",
        '    printf \'scalelab job %s: %s\\n\' "${SLURM_JOB_ID:-}" "$1" >&2',
        '    logger -t scalelab -- "job ${SLURM_JOB_ID:-}: $1" 2>/dev/null || true',
        "    exit 1",
        "}",
        "# mkdir -p would make a missing runs directory too, where the node does not mount it: refuse instead.",
        f"[[ -d {runs_dir} ]] || refuse {_quote(f'no runs directory {job.run_dir.parent} on this node')}",
        f"mkdir -p -- {run_dir} || refuse {_quote(f'cannot make the run directory {job.run_dir}')}",
        "# Another user may have made this name first (the runs directory lets everyone create entries):",
        "# run only in a directory of this user's own, never through a link.",
        f"[[ -O {run_dir} && ! -L {run_dir} ]] || refuse {_quote(squatted)}",
        f"cd -- {run_dir} || refuse {_quote(f'cannot enter the run directory {job.run_dir}')}",
        f"exec >>{_quote(OUTPUT_FILE)} 2>&1 || refuse {_quote(f'cannot open {OUTPUT_FILE}')}",
        "# Whose job this is, in its own words: the user can check it ran as them.",
        'echo "scalelab: job ${SLURM_JOB_ID:-} runs as $(id -un) (uid $(id -u)) on $(hostname)"',
    ]


def _carried_files(spec: RunSpec, job: BatchJob) -> list[str]:
    """The run's spec, and an inference run's prompts, written by the script into its directory."""
    spec_json = spec.model_dump_json()
    # One line of JSON (control characters are escaped in it): the delimiter line cannot occur in it.
    if "\n" in spec_json:
        raise ValueError("the spec's JSON is not one line")
    lines = [
        "# The run's spec, and an inference run's prompts, come with the script: written afresh on each requeue,",
        "# and renamed into place, so that nobody reads half a file.",
        *_here_document(f"cat >.{SPEC_FILE}.partial", SPEC_DELIMITER, spec_json),
        f"mv -f -- .{SPEC_FILE}.partial {SPEC_FILE}",
    ]
    if job.prompts is not None:
        # As base64, whose alphabet holds no delimiter and nothing bash or sbatch could read into.
        encoded = base64.b64encode(job.prompts.encode("utf-8")).decode("ascii")
        lines += [
            *_here_document(
                f"base64 -d >.{PROMPTS_FILE}.partial", PROMPTS_DELIMITER, "\n".join(textwrap.wrap(encoded, 76))
            ),
            f"mv -f -- .{PROMPTS_FILE}.partial {PROMPTS_FILE}",
        ]
    return [*lines, ""]


def _on_the_node(job: BatchJob) -> bool:
    """The tasks run on the node itself, in no container: they see its files and its Python."""
    return not job.runtime.in_container


def _python(job: BatchJob) -> str:
    """The Python that runs the worker, and that a program's `python` means: the nodes' own, or the image's."""
    return str(job.worker_python) if _on_the_node(job) else job.profile.container.python


def _task_command(job: BatchJob, task: list[list[str]], workdir: str, env: list[str]) -> TaskWords:
    """srun's own options for the runtime, and the command each task runs, in groups of words to show together.

    `task` is what runs in each task (in the image, where there is one), in groups, its first word the program
    that starts; `workdir` the directory it starts in, which containers mount beside the run directory; `env` the
    variables of the run's own that a container must be told to pass in.
    """
    uses_gpus = job.profile.partition(job.partition).gres is not None
    told = Task(task, job.container_image, str(job.run_dir), workdir, [*job.profile.env, *env], uses_gpus)
    return job.runtime.task_words(job.profile.container, told)


def _continued(groups: list[list[str]]) -> str:
    """One command over several lines, a group of words per line."""
    return " \\\n    ".join(_join(group) for group in groups)


def export_line(name: str, value: str) -> str:
    """The line that sets a variable for the rest of the script (and what it starts); server/services/secrets.py
    finds a program's env by it."""
    if not _ENV_NAME.match(name):
        raise ValueError(f"unsafe environment variable name: {name!r}")
    return f"export {name}={_quote(value)}"


def _exports(variables: Mapping[str, str]) -> list[str]:
    return [export_line(name, value) for name, value in variables.items()]


def _environment(spec: RunSpec, job: BatchJob) -> list[str]:
    lines = ["export PYTHONUNBUFFERED=1", *_exports(job.profile.env)]
    if spec.program is not None:
        # After the profile's: a program's own value of a variable the profile sets (NCCL_DEBUG) is the one it gets.
        lines += ["# What the program is given: its env, its parameters, and what scalelab tells it of its run."]
        lines += _exports(_program_environment(spec, job, spec.program))
        lines += _default_threads(spec, job, spec.program)
    image = job.container_image
    if image is not None:
        lines += ["# The worker records the image it runs in, and its digest where the runtime can tell it."]
        lines += [f"export {IMAGE_VAR}={_quote(image)}", *_image_digest(job, image)]
    return lines


def _image_digest(job: BatchJob, image: str) -> list[str]:
    """How the job learns the digest of the image it runs in (contract.images): from its name, from the file's
    content, or from the runtime (Podman); an image named by a tag on a registry stays without one."""
    digest = named_digest(image)[1]
    if digest is not None:
        return [f"export {DIGEST_VAR}={digest}"]
    if is_file(image):
        lines = [
            "# An image file's digest is its content's sha256, taken on every start: the file may have been replaced",
            "# since the last one. A file that cannot be read leaves it unknown (sha256sum says why), not the job.",
            f"if image_sum=$(sha256sum -- {_quote(image)}); then",
            f'    export {DIGEST_VAR}="sha256:${{image_sum%% *}}"',
            "fi",
        ]
        pinned = job.pinned_file_digest
        if pinned is None:
            return lines
        message = "the image file %s is not the one this run is pinned to (%s): restore it, or submit a new run"
        test = f'[[ "${{{DIGEST_VAR}:-}}" == {pinned} ]]'
        return [*lines, _or_stop(test, message, image, pinned, exit_status=EXIT_IMAGE_CHANGED)]
    query = job.runtime.digest_query(image)
    if query is not None:
        return [
            f"# {query.why}",
            f"if image_digest=$({_join(query.words)}); then",
            f'    export {DIGEST_VAR}="$image_digest"',
            "fi",
        ]
    return ["# A tag on a registry names no one image, and the runtime does not tell which it fetched: no digest."]


def _srun_launch(spec: RunSpec, job: BatchJob) -> list[str]:
    program = spec.program
    tasks = [f"--ntasks-per-node={spec.gpus_per_node}"]
    if program is None:
        task = _task_command(job, [[_python(job), *_worker_args(spec, job.run_dir / SPEC_FILE)]], str(job.run_dir), [])
    else:
        if program.launcher == Launcher.torchrun:
            # One task per node runs torchrun, which starts the node's processes: the task gets all of their CPUs.
            # (--ntasks too: srun would take the allocation's task count from the environment sbatch gives it.)
            cpus = job.profile.partition(job.partition).cpus_per_task or 1
            tasks = [f"--ntasks={spec.nodes}", "--ntasks-per-node=1", f"--cpus-per-task={spec.gpus_per_node * cpus}"]
        env = [*_program_environment(spec, job, program), THREADS_VAR]
        task = _task_command(job, _program_task(spec, job, program), _checked_workdir(program), env)
    srun_options, command = task
    head = ["srun", "--kill-on-bad-exit=1", *tasks]
    srun = _continued([head, *([option] for option in srun_options), *command])
    if program is not None:
        # The task's shell text is single-quoted on purpose: each task's own shell expands it, with its own values.
        srun = f"# shellcheck disable=SC2016\n{srun}"
    lines = [
        "# torch.distributed meets at the allocation's first host, on a port that differs per job, below Linux's",
        "# ephemeral ports (32768-60999), which any outgoing connection on the host may hold (EADDRINUSE seen).",
        'mapfile -t hosts < <(scontrol show hostnames "$SLURM_JOB_NODELIST")',
        'export MASTER_ADDR="${hosts[0]}"',
        "export MASTER_PORT=$((20000 + SLURM_JOB_ID % 12000))",
        "",
    ]
    if not _signal_seconds(spec, job):
        return [*lines, *_timed(srun)]
    requeue = [
        f"if ((status == {EXIT_INTERRUPTED} && ${{SLURM_RESTART_COUNT:-0}} < {job.profile.max_requeues})); then",
        '    scontrol requeue "$SLURM_JOB_ID"',
        "fi",
    ]
    return [
        *lines,
        f"# Slurm sends USR1 before the time limit; the worker saves a checkpoint and exits {EXIT_INTERRUPTED},",
        "# and the job goes back to the queue to resume from it (at most max_requeues times).",
        *_timed(srun, requeue),
    ]


def _local_launch(spec: RunSpec, job: BatchJob) -> list[str]:
    torchrun = [_python(job), "-m", "torch.distributed.run", "--standalone"]
    command = ["timeout", str(seconds(job.time_limit)), *torchrun, f"--nproc-per-node={spec.gpus}"]
    if spec.program is None:
        started = _worker_args(spec, job.run_dir / SPEC_FILE)
    else:
        started = _torchrun_program(spec.program, _python(job))  # either launcher: torchrun is the only one here
    return [
        "# No Slurm here: torchrun starts the processes on this machine; timeout enforces the time limit. Not exec'd:",
        "# the script outlives it to write the launch's end (a cancel ends every process group of the job's session).",
        *_timed(_join([*command, *started])),
    ]


# ---- each launch timed by the script itself (contract.records.LaunchRecord) ------------------------------------


def _launch_clock() -> list[str]:
    """The shell function that prints a launch record: `launch_record start`, or `launch_record end STATUS`.

    Its only inputs are its arguments (scalelab's own words and the shell's exit status) and what the job's clock
    and Slurm say, each checked to be a number: nothing a user typed reaches the record.
    """
    head = f'{METRIC_PREFIX} {{"v":{RECORD_VERSION},"kind":"launch"'
    return [
        "# Each launch's own start and end, as records of their own (contract.records.LaunchRecord): the program's",
        "# wall time, start-up included, with no help from it. A requeued job launches again: the run's time is the",
        "# sum of its launches. Numbers only; an end starts a line of its own (the program's last may be unended).",
        "launch_record() {",
        "    local at attempt=${SLURM_RESTART_COUNT:-0} lead='' status=''",
        "    at=$(date +%s.%N 2>/dev/null) || at=''",
        "    [[ $at =~ ^[0-9]+(\\.[0-9]+)?$ ]] || at=$(date +%s)",
        "    [[ $attempt =~ ^[0-9]+$ ]] || attempt=0",
        "    if [[ $1 == end ]]; then",
        '        lead=$\'\\n\' status=",\\"exit_status\\":$2"',
        "    fi",
        '    printf \'%s%s,"event":"%s","at":%s,"attempt":%s%s}\\n\' '
        f'"$lead" {_quote(head)} "$1" "$at" "$attempt" "$status"',
        "}",
        "",
    ]


# The last line of every launch: the job exits as its launcher did (the status kept by _timed).
EXIT_AS_LAUNCHED = 'exit "$status"'


def _timed(command: str, after: list[str] | None = None) -> list[str]:
    """`command` between its launch's start and end records, the end written however it ended; its exit status is
    kept in $status for the lines `after` (a requeue) and is the script's own."""
    return [
        "launch_record start",
        "status=0",
        f"{command} || status=$?",
        'launch_record end "$status"',
        *(after or []),
        EXIT_AS_LAUNCHED,
    ]


# ---- a user's own program (contract.program) -------------------------------------------------------------------

# $0 of the shell that starts each task: what `ps` and that shell's own error messages show.
TASK_NAME = "scalelab-task"
# What each Slurm task runs before a program, in every runtime: fixed shell text whose only inputs are its
# positional arguments and the variables Slurm sets for the task, so that none of the user's words is ever read by
# a shell. It enters the program's directory itself: not every runtime starts where the batch script is (CSCS's
# environment definition names a directory of its own).
# srun launcher: the variables torch.distributed reads, from Slurm's for this task; then the command.
SRUN_TASK = ShellText(
    'cd -- "$1" || exit; shift; '
    'export RANK="$SLURM_PROCID" LOCAL_RANK="$SLURM_LOCALID" WORLD_SIZE="$SLURM_NTASKS" '
    'LOCAL_WORLD_SIZE="$SLURM_NTASKS_PER_NODE"; exec "$@"'
)
# torchrun launcher: this node's rank and the rendezvous at the first node; then torchrun's other options and what
# it starts.
TORCHRUN_TASK = ShellText(
    'cd -- "$1" || exit; python=$2; shift 2; exec "$python" -m torch.distributed.run --node-rank="$SLURM_NODEID" '
    '--master-addr="$MASTER_ADDR" --master-port="$MASTER_PORT" "$@"'
)


def _program_command(program: ProgramSpec, python: str) -> list[str]:
    """The command, `python` in it the profile's Python, with the parameters after it."""
    started = program.started_command()
    command = [python if at == 0 and word == PYTHON_WORD else word for at, word in enumerate(started)]
    return [*command, *program.arguments()]


def _torchrun_program(program: ProgramSpec, python: str) -> list[str]:
    """What torchrun starts in each process, after its own options: a script or a module runs under torchrun's own
    Python (the profile's), anything else as an executable of its own."""
    command, arguments = program.started_command(), program.arguments()
    if command[0] == PYTHON_WORD and len(command) > 1 and not command[1].startswith("-"):
        return [*command[1:], *arguments]
    if command[0] == PYTHON_WORD and len(command) > 2 and command[1] == "-m" and not command[2].startswith("-"):
        return ["-m", *command[2:], *arguments]
    # Python's own options (`-u`, `-c`) would be read as torchrun's: Python then runs as the executable.
    return ["--no-python", *_program_command(program, python)]


def _program_task(spec: RunSpec, job: BatchJob, program: ProgramSpec) -> list[list[str]]:
    """What each Slurm task runs, a line per group: the fixed shell text, then the user's words as its arguments."""
    python, workdir = _python(job), _start_dir(job, program)
    if program.launcher == Launcher.torchrun:
        torchrun = [python, f"--nnodes={spec.nodes}", f"--nproc-per-node={spec.gpus_per_node}"]
        return [["sh", "-c", TORCHRUN_TASK], [TASK_NAME, workdir, *torchrun], _torchrun_program(program, python)]
    return [["sh", "-c", SRUN_TASK], [TASK_NAME, workdir], _program_command(program, python)]


def _program_environment(spec: RunSpec, job: BatchJob, program: ProgramSpec) -> dict[str, str]:
    """Every variable a program's tasks get besides the launch's: its env and parameters, then scalelab's."""
    told = {STRATEGY_VAR: spec.strategy.value, SEED_VAR: str(spec.seed), RUN_ID_VAR: job.run_id}
    return {**program.environment(), **told, RUN_DIR_VAR: str(job.run_dir)}


def _program_file(job: BatchJob, program: ProgramSpec) -> str | None:
    """The file the command names that the batch script can look for before launching: one named by a relative
    path lies in the workdir, which every runtime mounts; an absolute one is the node's own only in no container
    (in one, it may be the image's); a bare command name is looked up on the task's PATH."""
    named = named_file(program.command)
    if named is None or (named.startswith("/") and not _on_the_node(job)):
        return None
    return named


def _or_stop(test: str, message: str, *values: str, exit_status: int = EXIT_NO_PROGRAM) -> str:
    """`test`, or the job stops before launching, with `message` (a printf format, the values quoted) on stderr."""
    arguments = " ".join(_quote(value) for value in values)
    printf = f"printf 'scalelab: {message}\\n' {arguments} >&2"
    return f"{test} || {{ {printf}; exit {exit_status}; }}"


def _program_start(spec: RunSpec, job: BatchJob, program: ProgramSpec) -> list[str]:
    """Into the program's directory, its file checked, and a start record from the spec."""
    workdir = _checked_workdir(program)
    lines = [
        "# The program starts in its own directory; a file it needs that is not there stops the job here, named.",
        _or_stop(f"cd -- {_quote(workdir)}", "cannot enter the working directory %s", workdir),
    ]
    named = _program_file(job, program)
    if named is not None:
        lines += [_or_stop(f"[[ -f {_quote(named)} ]]", "the program file %s does not exist in %s", named, workdir)]
    fields = {"world_size": spec.gpus, "nodes": spec.nodes, "strategy": spec.strategy.value, "source": "spec"}
    record = StartRecord.model_validate({**fields, "image": job.container_image})
    head = format_record(record).removesuffix("}")
    start = [
        "# What the spec tells of this start, on every attempt (a requeued job starts again); a start record that the",
        "# program prints itself afterwards replaces it with what only the program knows (its device, its torch),",
        "# and keeps what it leaves out (the node's hardware: contract.records.current_start).",
        *_hardware_probe(spec),
    ]
    hardware = f'"${HARDWARE_VAR}"'
    if job.container_image is None:
        return [*lines, *start, f'printf \'%s%s,"hostname":"%s"}}\\n\' {_quote(head)} {hardware} "$(hostname)"', ""]
    # The image's digest, where the job could tell it (a sha256:... of its own or Podman's, which JSON takes as is).
    digest = f'"${{{DIGEST_VAR}:+,\\"image_digest\\":\\"${DIGEST_VAR}\\"}}"'
    printf = f'printf \'%s%s%s,"hostname":"%s"}}\\n\' {_quote(head)} {digest} {hardware} "$(hostname)"'
    return [*lines, *start, printf, ""]


# ---- threads and hardware of a program's processes -------------------------------------------------------------

# The variable OpenMP (and so torch's intra-op pool) sizes its threads by.
THREADS_VAR = "OMP_NUM_THREADS"
# The CPUs the script may run on: nproc alone answers OMP_NUM_THREADS instead where that is set.
NPROC = "env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc"
# The batch script's variable that holds the start record's nodes_hardware member (empty where it measured none).
HARDWARE_VAR = "node_hardware"


def _default_threads(spec: RunSpec, job: BatchJob, program: ProgramSpec) -> list[str]:
    """OMP_NUM_THREADS for each process of a program, unless its env (or the profile's) sets it: the CPUs Slurm
    gave each process. Unset, each process starts a thread per CPU it may run on, and the local Slurm binds no
    process to its CPUs: 4 processes on 2 cores ran an epoch 13x slower than with a thread each. torchrun sets 1
    where it starts several processes and leaves a single one unset (every core, whatever Slurm allocated), so it
    gets the same default. Without Slurm (torchrun on this machine) a process gets its share of the machine."""
    if THREADS_VAR in program.env or THREADS_VAR in job.profile.env:
        return []
    lines = ["# Each process's threads, as its program's env does not set them: the CPUs given to it (see README)."]
    if job.launcher == "local":
        share = f"threads=$(($({NPROC}) / {spec.gpus}))"
        return [*lines, share, f"export {THREADS_VAR}=$((threads > 0 ? threads : 1))"]
    # --cpus-per-task, where the partition (or the user's sbatch options) sets it; else Slurm gives a task one CPU.
    return [*lines, f'export {THREADS_VAR}="${{SLURM_CPUS_PER_TASK:-1}}"']


def _hardware_probe(spec: RunSpec) -> list[str]:
    """Shell that sets HARDWARE_VAR to the start record's `,"nodes_hardware":[...]`, as NodeHardware has it, for
    the node the batch script runs on: the first of the allocation, holding ranks 0 to gpus_per_node - 1 under
    either launcher. Measured there, by what every node has without Python (getconf, nproc, /proc); every value is
    a number checked as one, or the host's name, and none is ever a printf format. The other nodes of a multi-node
    run are not measured: they are taken to be like the first (a partition's nodes usually are)."""
    ranks = ",".join(str(rank) for rank in range(spec.gpus_per_node))
    fields = (
        '"host":"%s","ranks":[%s],"physical_cores":%s,"hardware_threads":%s,"cpus_given":%s,"affinity":"%s",'
        '"intra_op_threads":%s,"cpus_allocated":%s'
    )
    return [
        "# The node's hardware as the batch script sees it on the first node: distinct physical cores, logical CPUs,",
        "# the CPUs the job may run on (its affinity), what Slurm allocated, and the threads each process is given",
        "# (the first number of OMP_NUM_THREADS; unset or 0, OpenMP takes a thread per CPU it may run on).",
        "hw_number() { if [[ $1 =~ ^[0-9]{1,6}$ ]] && ((10#$1 > 0)); then echo $((10#$1)); else echo null; fi; }",
        'hw_cores=$(hw_number "$(awk -F: \'/^physical id/ {p = $2} /^core id/ {print p ":" $2}\' /proc/cpuinfo'
        ' 2>/dev/null | sort -u | wc -l)")',
        'hw_threads=$(hw_number "$(getconf _NPROCESSORS_ONLN 2>/dev/null)")',
        f'hw_given=$(hw_number "$({NPROC} 2>/dev/null)")',
        "hw_affinity=$(awk '/^Cpus_allowed_list:/ {print $2}' /proc/self/status 2>/dev/null | tr -cd '0-9,-')"
        " || hw_affinity=",
        f"hw_omp=${{{THREADS_VAR}:-}}",
        'hw_omp=$(hw_number "${hw_omp%%[!0-9]*}")',
        "if [[ $hw_omp == null ]]; then hw_omp=$hw_given; fi",
        'hw_allocated=$(hw_number "${SLURM_CPUS_ON_NODE:-}")',
        f"{HARDWARE_VAR}=",
        "if [[ $hw_threads != null && $hw_given != null ]]; then",
        f'    printf -v {HARDWARE_VAR} \',"nodes_hardware":[{{{fields}}}]\' "$(hostname)" {ranks} "$hw_cores" '
        '"$hw_threads" "$hw_given" "$hw_affinity" "$hw_omp" "$hw_allocated"',
        "fi",
    ]


def _start_dir(job: BatchJob, program: ProgramSpec) -> str:
    """Where each task starts: the workdir, or (cwd run_dir) the run's own directory, which every runtime mounts."""
    if program.cwd == ProgramCwd.run_dir:
        _checked_run_dir(job)
        return str(job.run_dir)
    return _checked_workdir(program)


# ---- which code ran, and what a shared workdir's runs wrote (contract/workdir_probe.py) -----------------------------

# The probe's text, carried by the script into the run's directory, and the listing it keeps there between its runs.
PROBE_DELIMITER = "SCALELAB_PROBE"
PROBE_FILE = ".workdir_probe.py"
PROBE_STATE_FILE = ".workdir_start.json"
_PROBE_TEXT = Path(workdir_probe.__file__).read_text(encoding="utf-8")
# Bounds the probe's own deadlines (its git calls and file listing) from outside, should the file system hang.
PROBE_TIMEOUT_S = 120


def _probe_python(job: BatchJob) -> str:
    """The line that finds a Python for the probe, on the node itself (never in the container, whose image may have
    none): the worker's where the tasks run on the node, else the node's python3; none leaves the probe out."""
    candidates = [_python(job)] if _on_the_node(job) else []
    tries = " || ".join(f"command -v {_quote(name)}" for name in [*candidates, "python3"])
    return f"probe_python=$({tries} || true)"


def _probe_run(job: BatchJob, words: list[str], unknown: str) -> list[str]:
    """The probe run with `words`, its failure (or no Python at all) a line in the output, never the job's end."""
    probe = [str(job.run_dir / PROBE_FILE), *words]
    return [
        'if [[ -n "$probe_python" ]]; then',
        f'    timeout {PROBE_TIMEOUT_S} "$probe_python" {_join(probe)} </dev/null || echo {_quote(unknown)}',
        "else",
        f"    echo {_quote(unknown + ' (no Python on the node)')}",
        "fi",
    ]


def _probe_file(job: BatchJob) -> list[str]:
    """The probe written into the run's directory: a failure to write it leaves the probe to fail, not the job."""
    command, *rest = _here_document(
        f"cat >{_quote(str(job.run_dir / PROBE_FILE))}", PROBE_DELIMITER, _PROBE_TEXT.rstrip("\n")
    )
    return [f"{command} || true", *rest]


def _code_probe(job: BatchJob, program: ProgramSpec) -> list[str]:
    """Before the launch: the probe notes which code starts (the named script's and top-level files' sha256, git's
    revision), and, in a shared workdir, what the workdir holds; then, with cwd run_dir, into the run's directory."""
    workdir, named = _checked_workdir(program), _program_file(job, program)
    words = ["start", workdir, *(["--script", named] if named is not None else [])]
    if program.cwd == ProgramCwd.workdir:
        words += ["--state", str(job.run_dir / PROBE_STATE_FILE)]
    lines = [
        "# Which code this run starts, and what its workdir holds: a probe of the standard library's that the script",
        "# carries, run with the node's Python; what it cannot tell stays unknown, and the job goes on.",
        *_probe_file(job),
        _probe_python(job),
        *_probe_run(job, words, "scalelab: could not note which code this run starts: it stays unknown"),
    ]
    if program.cwd == ProgramCwd.run_dir:
        run_dir = str(job.run_dir)
        lines += [_or_stop(f"cd -- {_quote(run_dir)}", "cannot enter the run directory %s", run_dir)]
    return [*lines, ""]


def _noting_writes(job: BatchJob, program: ProgramSpec, launch: list[str]) -> list[str]:
    """The launch, then, in a shared workdir, the probe's note of the files the run created or changed there (a
    later run that finds one is flagged shared_workdir), before the job exits as the launch did (_timed)."""
    if program.cwd != ProgramCwd.workdir:
        return launch
    *before, last = launch
    if last != EXIT_AS_LAUNCHED:
        raise ValueError(f"the launch does not end with {EXIT_AS_LAUNCHED!r}: nothing could run after it")
    words = ["end", _checked_workdir(program), "--state", str(job.run_dir / PROBE_STATE_FILE)]
    return [
        *before,
        "# Which files of the shared workdir this run created or changed.",
        *_probe_run(job, words, "scalelab: could not note what this run wrote in its workdir: it stays unknown"),
        last,
    ]


def _shell_options(job: BatchJob) -> list[str]:
    if not job.profile.modules or job.launcher == "local":
        return ["set -euo pipefail"]
    return [
        "# Module scripts read unset variables: load them before nounset is on.",
        "set -eo pipefail",
        _join(["module", "load", *job.profile.modules]),
        "set -u",
    ]


def render_script(spec: RunSpec, job: BatchJob) -> str:
    """Every value is typed and quoted; nothing the user typed as free text reaches the script."""
    launch = _srun_launch(spec, job) if job.launcher == "srun" else _local_launch(spec, job)
    lines = [
        "#!/bin/bash",
        f"# scalelab run {job.run_id} on cluster profile {job.profile.name}: rendered by scalelab; "
        "to change it, submit a new run.",
        *_directives(spec, job),
        *(_own_directory(job) if job.job_creates_dir else []),
        *_shell_options(job),
        *(_carried_files(spec, job) if job.job_creates_dir else []),
        *_environment(spec, job),
        "",
        *(_program_start(spec, job, spec.program) if spec.program is not None else []),
        *(_code_probe(job, spec.program) if spec.program is not None else []),
        *_launch_clock(),
        *(launch if spec.program is None else _noting_writes(job, spec.program, launch)),
    ]
    return "\n".join(lines) + "\n"
