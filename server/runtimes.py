"""Container runtimes: one class per runtime a cluster profile can name, each saying what it can do (start an
image, pin a run to one's digest), the words that start a task in it, and what it tells of an image's digest.

Everything that depends on which runtime a profile names is asked of its class here (`runtime_for`); no other
module tests a runtime's name. A runtime gives words, never shell text: the renderer quotes them. It reads the
profile's container settings and nothing else of the server, so that the profiles can check themselves with it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import ClassVar, NamedTuple, Protocol

from contract.images import is_file
from contract.rundir import DIGEST_VAR, IMAGE_VAR


# What a cluster profile's container.runtime names (no docstring: it would become the API schema's description).
class Runtime(StrEnum):
    none = "none"  # the worker's Python environment on the nodes
    podman = "podman"
    pyxis = "pyxis"
    cscs = "cscs"
    apptainer = "apptainer"


class ContainerSettings(Protocol):
    """What a runtime reads of a profile's container table (server.profiles.Container)."""

    @property
    def image(self) -> str | None: ...

    @property
    def edf(self) -> str | None: ...

    @property
    def mounts(self) -> Sequence[str]: ...

    @property
    def extra_args(self) -> Sequence[str]: ...


@dataclass(frozen=True)
class Task:
    """What each Slurm task runs, and where: what the renderer tells a runtime."""

    # The command, in groups of words shown together on a line; its first word the program that starts.
    command: list[list[str]]
    # The image as the runtime is given it (an image file by its path alone); None where the runtime starts none.
    image: str | None
    run_dir: str
    # The directory the command starts in, which containers mount beside the run directory.
    workdir: str
    # The variables of the profile's and the run's own that a container must be told to pass in.
    env: list[str]
    # Whether the partition gives the tasks GPUs (a GRES), which a container must then be given.
    uses_gpus: bool


class TaskWords(NamedTuple):
    """How srun starts a task in the runtime: srun's own options for it, and the command, in groups of words."""

    srun_options: list[str]
    command: list[list[str]]


@dataclass(frozen=True)
class DigestQuery:
    """A command whose output is the digest of the image the runtime holds under a name, and why it is asked."""

    why: str
    words: list[str]


class ContainerRuntime(ABC):
    """A runtime's capabilities; the subclasses below say what differs."""

    runtime: ClassVar[Runtime]
    # The tasks run in a container (which only Slurm starts here), not in the nodes' own Python.
    in_container: ClassVar[bool] = True
    # The batch script names the image the runtime starts: a run may name its own (a program's, or a pin).
    starts_image: ClassVar[bool] = False
    # A run can be run again pinned to the digest of the image it ran in: the runtime starts the image the script
    # names, by a name that carries the digest or as a file whose digest the script checks.
    pinnable: ClassVar[bool] = False

    def missing(self, container: ContainerSettings) -> str | None:
        """What a profile's container settings lack for this runtime; None where nothing is missing."""
        if self.starts_image and container.image is None:
            return f"runtime {self.runtime} needs container.image"
        return None

    def image_named(self, container: ContainerSettings, requested: str | None) -> str | None:
        """The image a run's tasks run in as the run names it: the one it asks for (a program's image, or a pin
        with the digest it must have) where the runtime starts the image the script names, else the profile's."""
        if not self.in_container:
            return None
        if self.starts_image and requested:
            return requested
        return container.image or None

    @abstractmethod
    def task_words(self, container: ContainerSettings, task: Task) -> TaskWords:
        """How each Slurm task starts `task.command` in this runtime."""

    def digest_query(self, image: str) -> DigestQuery | None:
        """How the job asks the runtime for the digest of an image named by a tag; None where it cannot tell."""
        return None

    def why_no_digest(self, image: str, container: ContainerSettings) -> str | None:
        """Why a run that ran in `image` (with no digest in its name) recorded no digest, where the reason is this
        runtime's own; None where it is the image's alone (a file whose sha256 was not taken, a registry's tag)."""
        return None


def _mounts(container: ContainerSettings, task: Task) -> list[str]:
    """The directories a container mounts, each once: the run's, the command's, and the profile's."""
    return list(dict.fromkeys([task.run_dir, task.workdir, *container.mounts]))


class NoContainer(ContainerRuntime):
    """The nodes' own Python: the task runs as it is."""

    runtime = Runtime.none
    in_container = False

    def task_words(self, container: ContainerSettings, task: Task) -> TaskWords:
        return TaskWords([], task.command)


class Pyxis(ContainerRuntime):
    """NVIDIA's Pyxis and enroot: srun's own --container-* options start each task in the image."""

    runtime = Runtime.pyxis
    starts_image = True
    pinnable = True

    def task_words(self, container: ContainerSettings, task: Task) -> TaskWords:
        mounts = ",".join(f"{path}:{path}" for path in _mounts(container, task))
        options = [
            f"--container-image={task.image}",
            f"--container-mounts={mounts}",
            f"--container-workdir={task.workdir}",
            *container.extra_args,
        ]
        return TaskWords(options, task.command)


class Cscs(ContainerRuntime):
    """The CSCS container engine: an environment definition file names the image and its mounts (srun's
    --environment). It starts no image the script names; the profile may name the same image, for the record."""

    runtime = Runtime.cscs

    def missing(self, container: ContainerSettings) -> str | None:
        if container.edf is None:
            return "runtime cscs needs container.edf: the environment definition file or name"
        return None

    def task_words(self, container: ContainerSettings, task: Task) -> TaskWords:
        # The environment definition names the image and its mounts (a program's directory must be among them).
        return TaskWords([f"--environment={container.edf}", *container.extra_args], task.command)

    def why_no_digest(self, image: str, container: ContainerSettings) -> str | None:
        if is_file(image) and container.image is None:
            return (
                "the environment definition names this image and the cluster profile does not name it "
                "(container.image), so the batch script could not take the file's sha256: name it in the profile"
            )
        return None


class Apptainer(ContainerRuntime):
    """Apptainer (Singularity): each task is `apptainer exec` of a SIF file."""

    runtime = Runtime.apptainer
    starts_image = True
    pinnable = True

    def task_words(self, container: ContainerSettings, task: Task) -> TaskWords:
        binds = ",".join(_mounts(container, task))
        options = [*(["--nv"] if task.uses_gpus else []), f"--bind={binds}", *container.extra_args]
        (first, *rest) = task.command
        in_image = [[str(task.image), *first], *rest]
        return TaskWords([], [["apptainer", "exec"], *([option] for option in options), *in_image])


class Podman(ContainerRuntime):
    """Podman: each task is its own container on the host network, with Slurm's view of the task passed in."""

    runtime = Runtime.podman
    starts_image = True
    pinnable = True

    def task_words(self, container: ContainerSettings, task: Task) -> TaskWords:
        # The variables the batch script sets for every task, then the profile's and the run's own.
        passed = ["SLURM_*", "MASTER_ADDR", "MASTER_PORT", "PYTHONUNBUFFERED", IMAGE_VAR, DIGEST_VAR, *task.env]
        # The image's own entrypoint is `python -m worker`; the task's first word replaces it, as in the other
        # runtimes.
        (first, *rest) = task.command
        options = [f"--entrypoint={first[0]}", f"--workdir={task.workdir}"]
        options += [f"--volume={path}:{path}" for path in _mounts(container, task)]
        options += [f"--env={name}" for name in dict.fromkeys(passed)]
        options += ["--device=nvidia.com/gpu=all"] if task.uses_gpus else []
        options += container.extra_args
        in_image = [[str(task.image), *first[1:]], *rest]  # --entrypoint names the first word
        run = ["podman", "run", "--rm", "--network=host"]
        return TaskWords([], [run, *([option] for option in options), *in_image])

    def digest_query(self, image: str) -> DigestQuery | None:
        return DigestQuery(
            "Podman tells the digest of the image it has under that name; if it cannot, podman run will say why.",
            ["podman", "image", "inspect", "--format", "{{.Digest}}", image],
        )

    def why_no_digest(self, image: str, container: ContainerSettings) -> str | None:
        if is_file(image):
            return None
        return "podman could not tell it when the job started: the job's output says why"


_RUNTIMES: dict[Runtime, ContainerRuntime] = {
    runtime.runtime: runtime for runtime in (NoContainer(), Podman(), Pyxis(), Cscs(), Apptainer())
}


def runtime_for(runtime: Runtime) -> ContainerRuntime:
    """The class of the runtime a profile names; ValueError for one scalelab does not know."""
    try:
        return _RUNTIMES[Runtime(runtime)]
    except (KeyError, ValueError):
        known = ", ".join(_RUNTIMES)
        raise ValueError(f"no container runtime {runtime!r}: scalelab knows {known}") from None


def image_starting() -> list[Runtime]:
    """The runtimes that start the image a batch script names, in the order the profiles list them."""
    return [runtime for runtime in Runtime if runtime_for(runtime).starts_image]
