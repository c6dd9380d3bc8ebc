"""Cluster profiles: what a cluster offers and how jobs start there, written by its operator as TOML."""

from __future__ import annotations

import logging
import re
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, model_validator

from contract.fabric import Tier
from server.runtimes import Runtime, runtime_for
from server.timelimit import TimeLimit, seconds

log = logging.getLogger(__name__)

BUILTIN_DIR = Path(__file__).resolve().parent / "cluster_profiles"

# Operator-written values still reach batch scripts: they are quoted there, and kept to plain alphabets besides,
# so that a typo in a profile is refused when the server starts rather than mangling a job.
Word = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.:+-]{1,128}$")]
ImageRef = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_./:@#+-]{1,512}$")]
AbsolutePath = Annotated[str, StringConstraints(pattern=r"^/[A-Za-z0-9_./+-]{0,511}$")]
EnvName = Annotated[str, StringConstraints(pattern=r"^[A-Z_][A-Z0-9_]{0,63}$")]
# A program root: an absolute directory, or "~", the home of the Unix account a job runs as.
HOME_ROOT = "~"
ProgramRoot = Annotated[str, StringConstraints(pattern=r"^(~|/[A-Za-z0-9_./+@-]{0,511})$")]
OptionName = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9-]{0,39}$")]

# Options scalelab sets itself: a profile cannot hand them to users, since they decide where output goes,
# what runs, and how the run is followed.
RESERVED_OPTIONS = frozenset(
    {
        "job-name", "output", "error", "open-mode", "chdir", "nodes", "ntasks", "ntasks-per-node", "time",
        "partition", "gres", "gpus", "gpus-per-node", "signal", "requeue", "no-requeue", "wrap", "array",
        "dependency", "export", "export-file", "get-user-env", "container", "input", "parsable", "wait",
        "uid", "gid", "comment", "exclusive",
    }
)  # fmt: skip


class Partition(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_nodes: int = Field(ge=1, le=100_000)
    gpus_per_node: int = Field(ge=1, le=1024, description="training processes a node takes: GPUs, or CPU slots")
    max_time: TimeLimit = Field(description="the partition's wall-time limit, [D-]HH:MM:SS")
    gres: Word | None = Field(
        default=None, description='GRES name for GPUs, e.g. "gpu" or "gpu:a100"; none: processes are CPU tasks'
    )
    gpu_memory_gib: float | None = Field(default=None, gt=0, description="memory of one GPU, for estimates")
    cpus_per_task: int | None = Field(default=None, ge=1, le=1024)


class Container(BaseModel):
    model_config = ConfigDict(extra="forbid")

    runtime: Runtime = Runtime.none
    image: ImageRef | None = Field(
        default=None,
        description="pyxis: image or .sqsh; podman: image; apptainer: .sif file; cscs (optional): the image the "
        "environment definition names, so that the batch script records its digest",
    )
    edf: ImageRef | None = Field(default=None, description="cscs: the environment definition (edf.toml) to use")
    python: Word = Field(default="python3", description="the Python inside the image")
    mounts: list[AbsolutePath] = Field(default=[], description="directories to mount besides the run directory")
    extra_args: list[Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_./:=,@+-]{1,256}$")]] = Field(
        default=[], description="more arguments for the runtime, e.g. podman's --userns=keep-id"
    )

    @model_validator(mode="after")
    def _needs_image(self) -> Container:
        missing = runtime_for(self.runtime).missing(self)
        if missing is not None:
            raise ValueError(missing)
        return self


class OptionKind(StrEnum):
    int = "int"
    time = "time"
    choice = "choice"
    word = "word"
    memory = "memory"  # sbatch's --mem form: a number with an optional K, M, G or T


class SbatchOption(BaseModel):
    """An sbatch option users may set, and the values it takes."""

    model_config = ConfigDict(extra="forbid")

    kind: OptionKind
    description: str = ""
    choices: list[Word] = []
    min: int | None = None
    max: int | None = None

    @model_validator(mode="after")
    def _choices_for_choice(self) -> SbatchOption:
        if (self.kind is OptionKind.choice) != bool(self.choices):
            raise ValueError("choices go with kind 'choice', and kind 'choice' needs them")
        return self

    def check(self, value: str | int) -> str:
        """The value as it goes into the #SBATCH line; ValueError says what would be accepted."""
        text = str(value)
        if self.kind is OptionKind.int:
            if not re.fullmatch(r"-?[0-9]{1,9}", text):
                raise ValueError(f"must be a whole number, not {text[:40]!r}")
            number = int(text)
            if (self.min is not None and number < self.min) or (self.max is not None and number > self.max):
                raise ValueError(f"must be between {self.min} and {self.max}, not {number}")
        elif self.kind is OptionKind.time:
            try:
                seconds(text)
            except ValueError as exc:
                raise ValueError(str(exc)) from None
        elif self.kind is OptionKind.choice:
            if text not in self.choices:
                raise ValueError(f"must be one of {', '.join(self.choices)}")
        elif self.kind is OptionKind.memory:
            if not re.fullmatch(r"[1-9][0-9]{0,8}[KMGT]?", text):
                raise ValueError("must be a size like 4096M or 64G")
        elif not re.fullmatch(r"[A-Za-z0-9_.:+-]{1,64}", text):
            raise ValueError("must be 1 to 64 letters, digits or _ . : + -")
        return text


class FabricBand(BaseModel):
    """What a healthy fabric gives a training run's pre-flight on one tier and backend: the bus bandwidth of its
    largest all-reduce (worker/probe.py's pre-flight: up to 64 MiB, as the time allows), in GB/s (10^9 bytes/s, as
    nccl-tests prints it), and where that range comes from."""

    model_config = ConfigDict(extra="forbid")

    busbw_gb_per_s: tuple[Annotated[float, Field(gt=0, le=1e6)], Annotated[float, Field(gt=0, le=1e6)]] = Field(
        description="[lowest, highest] expected bus bandwidth, GB/s"
    )
    source: Annotated[str, StringConstraints(min_length=1, max_length=300, pattern=r"^[^\x00-\x1f\x7f]+$")] = Field(
        description="where the range comes from: a datasheet, an nccl-tests run, the operator's own probes"
    )

    @model_validator(mode="after")
    def _ordered(self) -> FabricBand:
        if self.busbw_gb_per_s[0] > self.busbw_gb_per_s[1]:
            raise ValueError("busbw_gb_per_s is [lowest, highest]: the lowest is above the highest")
        return self


# Backends a fabric reference may name, as torch.distributed names them.
FabricBackend = Annotated[str, StringConstraints(pattern=r"^(gloo|nccl|mpi|ucc)$")]


class ClusterProfile(BaseModel):
    """A cluster: its partitions and limits, how jobs start there, and what users may set."""

    model_config = ConfigDict(extra="forbid")

    name: Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9_-]{0,63}$")]
    description: str = ""
    account: Word | None = Field(default=None, description="Slurm account for every job, unless a user sets one")
    qos: Word | None = None
    partitions: dict[Word, Partition] = Field(min_length=1)
    default_partition: Word
    container: Container = Container()
    modules: list[Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_./+-]{1,128}$")]] = Field(
        default=[], description="environment modules to load before starting the worker"
    )
    env: dict[EnvName, Annotated[str, StringConstraints(max_length=1024)]] = Field(
        default={}, description="environment for every task: NCCL and gloo settings"
    )
    worker_python: AbsolutePath | None = Field(
        default=None, description="runtime none: the Python with torch on the nodes; default: the server's setting"
    )
    signal_before_end_s: int = Field(
        default=120, ge=0, le=86_400, description="seconds before the time limit that Slurm signals the worker to save"
    )
    max_requeues: int = Field(default=3, ge=0, le=100, description="times a job saved at its limit runs again")
    sbatch_options: dict[OptionName, SbatchOption] = Field(default={}, description="options users may set")
    shared_nodes: bool = Field(
        default=False,
        description="every run shares the nodes (one machine for all, as the local profile): exclusive experiments "
        "run one run at a time instead of asking Slurm for whole nodes",
    )
    checkpoint_roots: list[AbsolutePath] = Field(
        default=[],
        description="directories under which users may name a training run's directory as an inference checkpoint; "
        "none: only scalelab's own runs, chosen by id",
    )
    program_roots: list[ProgramRoot] = Field(
        default=[],
        description="directories under which a program's workdir may be ('~': the home of the account its job "
        "runs as), besides the server's SCALELAB_PROGRAM_ROOTS; none: no program runs",
    )

    fabric_reference: dict[Tier, dict[FabricBackend, FabricBand]] = Field(
        default={},
        description="per tier (intra_node, inter_node) and backend, the bus bandwidth a training run's fabric "
        "pre-flight is expected to reach, with its source; none: the spread of earlier probes of the same shape",
    )

    @model_validator(mode="after")
    def _consistent(self) -> ClusterProfile:
        if self.default_partition not in self.partitions:
            raise ValueError(f"default_partition {self.default_partition!r} is not among the partitions")
        reserved = sorted(RESERVED_OPTIONS & set(self.sbatch_options))
        if reserved:
            raise ValueError(f"sbatch_options may not offer {', '.join(reserved)}: scalelab sets those itself")
        return self

    def partition(self, name: str | None) -> Partition:
        return self.partitions[name or self.default_partition]


def within(path: Path, roots: Iterable[Path]) -> bool:
    """Whether a directory a user names lies under one of the roots, with every link followed, in the path and in
    the roots: a link out of the roots does not take the user elsewhere (what the server cannot resolve, it reads
    as written)."""
    resolved = path.resolve()
    return any(resolved.is_relative_to(root.resolve()) for root in roots)


class ProfileError(ValueError):
    """A profile file is missing, unreadable or invalid; the message names the file and the problem."""


def load_profile(path: Path) -> ClusterProfile:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        profile = ClusterProfile.model_validate(data)
    except OSError as exc:
        raise ProfileError(f"cannot read cluster profile {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"cluster profile {path} is not valid TOML: {exc}") from None
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'file'}: {e['msg']}" for e in exc.errors())
        raise ProfileError(f"cluster profile {path} is invalid: {problems}") from None
    if profile.name != path.stem:
        raise ProfileError(f"cluster profile {path} is named {profile.name!r}: name it after its file, {path.stem!r}")
    return profile


@dataclass(frozen=True)
class ProfileCatalog:
    """The profiles a server offers, and the one for runs that name none."""

    profiles: dict[str, ClusterProfile]
    default: str


def load_catalog(directory: Path | None, default: str, program_roots: Sequence[Path] = ()) -> ProfileCatalog:
    """The profiles, each with the server's `program_roots` (SCALELAB_PROGRAM_ROOTS) after its own."""
    profiles = {
        name: profile.model_copy(update={"program_roots": [*profile.program_roots, *map(str, program_roots)]})
        for name, profile in load_profiles(directory).items()
    }
    if default not in profiles:
        raise ProfileError(
            f"the default cluster profile {default!r} (SCALELAB_PROFILE) is not among: {', '.join(sorted(profiles))}"
        )
    return ProfileCatalog(profiles, default)


def load_profiles(directory: Path | None) -> dict[str, ClusterProfile]:
    """The built-in profiles, then the operator's (`directory/*.toml`), which replace built-ins of the same name."""
    profiles: dict[str, ClusterProfile] = {}
    for source in (BUILTIN_DIR, directory):
        if source is None:
            continue
        if not source.is_dir():
            raise ProfileError(f"the cluster profiles directory {source} does not exist")
        for path in sorted(source.glob("*.toml")):
            profiles[path.stem] = load_profile(path)
    return profiles
