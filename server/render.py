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

from contract.rundir import DIGEST_VAR, EXIT_INTERRUPTED, IMAGE_VAR, OUTPUT_FILE, PROMPTS_FILE, SPEC_FILE
from contract.spec import RunKind, RunSpec
from server.profiles import ClusterProfile, Runtime
from server.timelimit import seconds

# #SBATCH lines are parsed by sbatch, not by a shell: only values of this alphabet may go there.
_DIRECTIVE_VALUE = re.compile(r"^[A-Za-z0-9_./:+@-]+$")


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

    @property
    def container_image(self) -> str | None:
        container = self.profile.container
        if self.launcher == "local" or container.runtime in (Runtime.none, Runtime.cscs):
            return None  # no image, or the one the environment definition names
        return self.image or (str(container.image) if container.image else None)


def job_name(run_id: str) -> str:
    """What Slurm calls the run's job: how a restarted server finds a job it could not record."""
    return f"scalelab-{run_id}"


def _directive(option: str, value: object) -> str:
    text = str(value)
    if not _DIRECTIVE_VALUE.match(text):
        raise ValueError(f"unsafe value for #SBATCH --{option}: {text!r}")
    return f"#SBATCH --{option}={text}"


def _worker_args(spec: RunSpec, spec_path: Path) -> list[str]:
    command = "infer" if spec.kind is RunKind.inference else "train"
    return ["-m", "worker", command, "--spec", str(spec_path)]


def _signal_seconds(job: BatchJob) -> int:
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
    signal_s = _signal_seconds(job)
    if signal_s:
        options["signal"] = f"USR1@{signal_s}"
        options["requeue"] = None
    options.update(sorted(job.sbatch_options.items()))  # a user's account or qos replaces the profile's
    return [f"#SBATCH --{name}" if value is None else _directive(name, value) for name, value in options.items()]


def _checked_run_dir(job: BatchJob) -> None:
    """The run directory goes into srun and runtime options (mounts split at ',' and ':'): the same alphabet as
    a directive's, whether or not a directive names it."""
    if not job.run_dir.is_absolute() or not _DIRECTIVE_VALUE.match(str(job.run_dir)):
        raise ValueError(f"unsafe run directory: {str(job.run_dir)!r}")


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
    run_dir, runs_dir = shlex.quote(str(job.run_dir)), shlex.quote(str(job.run_dir.parent))
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
        f"[[ -d {runs_dir} ]] || refuse {shlex.quote(f'no runs directory {job.run_dir.parent} on this node')}",
        f"mkdir -p -- {run_dir} || refuse {shlex.quote(f'cannot make the run directory {job.run_dir}')}",
        "# Another user may have made this name first (the runs directory lets everyone create entries):",
        "# run only in a directory of this user's own, never through a link.",
        f"[[ -O {run_dir} && ! -L {run_dir} ]] || refuse {shlex.quote(squatted)}",
        f"cd -- {run_dir} || refuse {shlex.quote(f'cannot enter the run directory {job.run_dir}')}",
        f"exec >>{shlex.quote(OUTPUT_FILE)} 2>&1 || refuse {shlex.quote(f'cannot open {OUTPUT_FILE}')}",
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


def _mounts(job: BatchJob) -> list[str]:
    return [str(job.run_dir), *job.profile.container.mounts]


def _task_command(spec: RunSpec, job: BatchJob) -> tuple[list[str], list[list[str]]]:
    """srun's own options for the runtime, and the command each task runs, in groups of words to show together."""
    container = job.profile.container
    spec_path = job.run_dir / SPEC_FILE
    in_image = [str(job.container_image), container.python, *_worker_args(spec, spec_path)]
    uses_gpus = job.profile.partition(job.partition).gres is not None
    if container.runtime is Runtime.none:
        return [], [[str(job.worker_python), *_worker_args(spec, spec_path)]]
    if container.runtime is Runtime.pyxis:
        mounts = ",".join(f"{path}:{path}" for path in _mounts(job))
        srun = [f"--container-image={job.container_image}", f"--container-mounts={mounts}"]
        return [*srun, f"--container-workdir={job.run_dir}", *container.extra_args], [in_image[1:]]
    if container.runtime is Runtime.cscs:
        return [f"--environment={container.edf}", *container.extra_args], [in_image[1:]]
    if container.runtime is Runtime.apptainer:
        options = [*(["--nv"] if uses_gpus else []), f"--bind={','.join(_mounts(job))}", *container.extra_args]
        return [], [["apptainer", "exec"], *([option] for option in options), in_image]
    # podman: each task is its own container on the host network, with Slurm's view of the task passed in.
    # The image's own entrypoint is `python -m worker`; the profile's Python replaces it, as for the other runtimes.
    env = ["SLURM_*", "MASTER_ADDR", "MASTER_PORT", "PYTHONUNBUFFERED", IMAGE_VAR, DIGEST_VAR, *job.profile.env]
    options = [f"--entrypoint={container.python}", f"--workdir={job.run_dir}"]
    options += [f"--volume={path}:{path}" for path in _mounts(job)]
    options += [f"--env={name}" for name in env]
    options += ["--device=nvidia.com/gpu=all"] if uses_gpus else []
    options += container.extra_args
    without_python = [in_image[0], *in_image[2:]]  # --entrypoint names it
    return [], [["podman", "run", "--rm", "--network=host"], *([option] for option in options), without_python]


def _continued(groups: list[list[str]]) -> str:
    """One command over several lines, a group of words per line."""
    return " \\\n    ".join(shlex.join(group) for group in groups)


def _environment(job: BatchJob) -> list[str]:
    lines = ["export PYTHONUNBUFFERED=1"]
    lines += [f"export {name}={shlex.quote(value)}" for name, value in job.profile.env.items()]
    image = job.container_image
    if image is not None:
        lines += ["# The worker records the image it runs in, and its digest where the runtime can tell it."]
        lines += [f"export {IMAGE_VAR}={shlex.quote(image)}"]
    if image is not None and job.profile.container.runtime is Runtime.podman:
        lines += [f"{DIGEST_VAR}=$(podman image inspect --format '{{{{.Digest}}}}' {shlex.quote(image)})"]
        lines += [f"export {DIGEST_VAR}"]
    return lines


def _srun_launch(spec: RunSpec, job: BatchJob) -> list[str]:
    srun_options, command = _task_command(spec, job)
    head = ["srun", "--kill-on-bad-exit=1", f"--ntasks-per-node={spec.gpus_per_node}"]
    srun = _continued([head, *([option] for option in srun_options), *command])
    lines = [
        "# torch.distributed meets at the allocation's first host, on a port that differs per job.",
        'mapfile -t hosts < <(scontrol show hostnames "$SLURM_JOB_NODELIST")',
        'export MASTER_ADDR="${hosts[0]}"',
        "export MASTER_PORT=$((20000 + SLURM_JOB_ID % 40000))",
        "",
    ]
    if not _signal_seconds(job):
        return [*lines, srun]
    return [
        *lines,
        f"# Slurm sends USR1 before the time limit; the worker saves a checkpoint and exits {EXIT_INTERRUPTED},",
        "# and the job goes back to the queue to resume from it (at most max_requeues times).",
        "status=0",
        f"{srun} || status=$?",
        f"if ((status == {EXIT_INTERRUPTED} && ${{SLURM_RESTART_COUNT:-0}} < {job.profile.max_requeues})); then",
        '    scontrol requeue "$SLURM_JOB_ID"',
        "fi",
        'exit "$status"',
    ]


def _local_launch(spec: RunSpec, job: BatchJob) -> list[str]:
    torchrun = [str(job.worker_python), "-m", "torch.distributed.run", "--standalone"]
    command = ["timeout", str(seconds(job.time_limit)), *torchrun, f"--nproc-per-node={spec.gpus}"]
    return [
        "# No Slurm here: torchrun starts the processes on this machine; timeout enforces the time limit.",
        f"exec {shlex.join([*command, *_worker_args(spec, job.run_dir / SPEC_FILE)])}",
    ]


def _shell_options(job: BatchJob) -> list[str]:
    if not job.profile.modules or job.launcher == "local":
        return ["set -euo pipefail"]
    return [
        "# Module scripts read unset variables: load them before nounset is on.",
        "set -eo pipefail",
        shlex.join(["module", "load", *job.profile.modules]),
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
        *_environment(job),
        "",
        *launch,
    ]
    return "\n".join(lines) + "\n"
