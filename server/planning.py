"""An experiment request checked against its cluster profile: the runs to create, and what cannot run."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from server.models import ExperimentCreate
from server.profiles import ClusterProfile, Partition, Runtime
from server.sweep import SweepError, Unrunnable, expand
from server.timelimit import seconds
from worker.spec import RunSpec

Problem = tuple[tuple[str | int, ...], str]


class PlanError(ValueError):
    """The request cannot be submitted; each problem names the request field it is about."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("; ".join(message for _, message in problems))
        self.problems = problems


@dataclass(frozen=True)
class Plan:
    profile: ClusterProfile
    partition: str
    time_limit: str
    sbatch_options: dict[str, str]
    specs: list[RunSpec]
    skipped: list[Unrunnable]


def _resources(*field: str | int) -> tuple[str | int, ...]:
    return ("body", "resources", *field)


def _partition_limits(name: str, partition: Partition) -> Callable[[RunSpec], list[str]]:
    def beyond(spec: RunSpec) -> list[str]:
        problems = []
        if spec.nodes > partition.max_nodes:
            problems.append(f"partition {name} takes at most {partition.max_nodes} nodes, not {spec.nodes}")
        if spec.gpus_per_node > partition.gpus_per_node:
            problems.append(
                f"partition {name} has {partition.gpus_per_node} GPUs per node, but gpus={spec.gpus} on "
                f"nodes={spec.nodes} needs {spec.gpus_per_node} per node: use more nodes"
            )
        return problems

    return beyond


def _choose_profile(request: ExperimentCreate, profiles: Mapping[str, ClusterProfile], default: str) -> ClusterProfile:
    name = request.resources.profile or default
    if name not in profiles:
        known = ", ".join(sorted(profiles))
        raise PlanError([(_resources("profile"), f"there is no cluster profile {name!r}; there are: {known}")])
    return profiles[name]


def _check_options(request: ExperimentCreate, profile: ClusterProfile) -> tuple[dict[str, str], list[Problem]]:
    options: dict[str, str] = {}
    problems: list[Problem] = []
    allowed_names = ", ".join(sorted(profile.sbatch_options)) or "none"
    for name, value in request.resources.sbatch_options.items():
        allowed = profile.sbatch_options.get(name)
        if allowed is None:
            problems.append(
                (
                    _resources("sbatch_options", name),
                    f"--{name[:40]} is not among the options profile {profile.name} allows: {allowed_names}",
                )
            )
            continue
        try:
            options[name] = allowed.check(value)
        except ValueError as exc:
            problems.append((_resources("sbatch_options", name), f"--{name} {exc}"))
    return options, problems


def plan_experiment(
    request: ExperimentCreate, profiles: Mapping[str, ClusterProfile], default_profile: str, *, slurm: bool
) -> Plan:
    """The runs to create for the request on its profile; PlanError names every field that is out of bounds."""
    profile = _choose_profile(request, profiles, default_profile)
    resources = request.resources
    if not slurm and profile.container.runtime is not Runtime.none:
        raise PlanError(
            [(_resources("profile"), f"profile {profile.name} runs containers through Slurm, and there is no Slurm")]
        )
    partition_name = resources.partition or profile.default_partition
    partition = profile.partitions.get(partition_name)
    if partition is None:
        known = ", ".join(sorted(profile.partitions))
        raise PlanError(
            [(_resources("partition"), f"profile {profile.name} has no partition {partition_name!r}; it has: {known}")]
        )
    options, problems = _check_options(request, profile)
    if seconds(resources.time_limit) > seconds(partition.max_time):
        problems.append(
            (
                _resources("time_limit"),
                f"partition {partition_name} allows at most {partition.max_time}, not {resources.time_limit}",
            )
        )
    try:
        specs, unrunnable = expand(
            request.base, request.grid, resources.nodes, _partition_limits(partition_name, partition)
        )
    except SweepError as exc:
        problems += [(("body", "grid"), problem) for problem in exc.problems]
        raise PlanError(problems) from None
    if unrunnable and request.on_invalid == "refuse":
        problems += [(("body", "grid"), str(combination)) for combination in unrunnable]
    elif not specs:
        problems.append((("body", "grid"), "no combination can run: " + "; ".join(map(str, unrunnable))))
    if problems:
        raise PlanError(problems)
    return Plan(profile, partition_name, resources.time_limit, options, specs, unrunnable)
