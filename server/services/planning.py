"""An experiment request checked against its cluster profile: the runs to create, and what cannot run."""

from __future__ import annotations

import os
import pwd
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from sqlmodel import Session

from contract.configs import GptConfig
from contract.errors import PROGRAMS_ADMIN_ONLY, UNRUNNABLE
from contract.program import PARAM_PREFIX, ProgramSpec, env_refusals, named_file
from contract.spec import PROGRAM_FIELDS, Model, RunKind, RunSpec, Strategy
from contract.target import worker_refusal
from server.errors import Invalid, Problem
from server.models import ExperimentCreate, Run, SkippedRun, User
from server.profiles import HOME_ROOT, ClusterProfile, Partition, ProfileCatalog, within
from server.runstate import why_no_programs
from server.runtimes import Runtime, image_starting, runtime_for
from server.scheduler import Scheduler
from server.services import dependencies, visibility
from server.services.dependencies import After
from server.services.inference import CheckpointError, Trained, trained_at, trained_run
from server.services.sweep import SweepError, Unrunnable, expand, param_axes
from server.timelimit import seconds


class PlanError(Invalid):
    """The request cannot be submitted; each problem names the request field it is about. The grid combinations
    that cannot run come last, marked as such: skipping them would let the rest be submitted."""

    def __init__(self, problems: list[Problem], unrunnable: list[Unrunnable] | None = None) -> None:
        combinations = [(("body", "grid"), str(combination)) for combination in unrunnable or []]
        super().__init__([*problems, *combinations])
        for error in self.errors[len(problems) :]:
            error["type"] = UNRUNNABLE


@dataclass(frozen=True)
class Plan:
    profile: ClusterProfile
    partition: str
    time_limit: str
    sbatch_options: dict[str, str]
    specs: list[RunSpec]
    skipped: list[Unrunnable]
    exclusive: bool = False  # whole nodes for each run (sbatch --exclusive)
    one_at_a_time: bool = False  # exclusive on nodes every run shares: the runs take turns
    requested_concurrency: int | None = None  # resources.max_concurrent
    after: After | None = None  # the training run (and its job) an inference waits for, not yet ended
    # Why one spec cannot run here: the partition's limits, the trained model's context, the heads a tensor-parallel
    # degree splits (the checks each grid combination passed); a rerun's changed spec passes them too.
    why_not: Callable[[RunSpec], list[str]] = lambda _spec: []

    @property
    def max_concurrent(self) -> int | None:
        """The experiment's limit on runs in the scheduler at once, if any."""
        return 1 if self.one_at_a_time else self.requested_concurrency

    def skipped_runs(self) -> list[SkippedRun]:
        """The combinations left out (on_invalid: skip), as the API lists them."""
        return [SkippedRun(combination=item.combination, reason=item.reason) for item in self.skipped]


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


def _inference(
    request: ExperimentCreate, profile: ClusterProfile, trained: Trained | None
) -> tuple[Trained | None, list[Problem]]:
    """The trained run an inference experiment generates from (`trained`, if the caller looked up a run by id)."""
    inference = request.inference
    kind = getattr(request.base, "kind", None)
    if inference is None:
        if kind is RunKind.inference:
            return None, [(("body", "inference"), "an inference experiment needs its checkpoint and prompts")]
        return None, []
    if kind is not RunKind.inference:
        # Each setting given is named, as the spec names a field that does not fit its strategy.
        why = "applies to inference experiments only: set base.kind to 'inference'"
        given = sorted(inference.model_fields_set)
        return None, [(("body", "inference", name), f"{name} {why}") for name in given] or [
            (("body", "base", "kind"), f"the inference section {why}")
        ]
    problems: list[Problem] = []
    if not inference.prompt_lines():
        problems.append((("body", "inference", "prompts"), "the prompts file holds no prompt: one prompt per line"))
    run, path = inference.checkpoint_run, inference.checkpoint_path
    if run is None and path is None:
        why = "name the checkpoint: a completed gpt run's id (checkpoint_run) or its directory (checkpoint_path)"
        problems += [(("body", "inference", "checkpoint_run"), why), (("body", "inference", "checkpoint_path"), why)]
    elif run is not None and path is not None:
        problems.append((("body", "inference", "checkpoint_path"), "name the checkpoint once: a run id or a path"))
    elif path is not None:
        try:
            trained = trained_at(path, profile.checkpoint_roots)
        except CheckpointError as exc:
            problems.append((("body", "inference", "checkpoint_path"), str(exc)))
    return trained, problems


_WORKER_ONLY = "the built-in worker's setting does not apply to a program"


def _base(*field: str) -> tuple[str, ...]:
    return ("body", "base", *field)


def _program(request: ExperimentCreate, profile: ClusterProfile, home: Path | None, slurm: bool) -> list[Problem]:
    """What a program experiment's request sets that it cannot: the worker's settings, a workdir outside the
    profile's program roots, an image where none is started; and program parts in an experiment of another kind."""
    base, grid = request.base, request.grid
    kind, program = getattr(base, "kind", None), getattr(base, "program", None)
    params = param_axes(grid)
    if kind is not RunKind.program:
        why = "applies to program experiments only: set base.kind to 'program' and give base.program"
        return [(("body", "grid", axis), f"{axis}: a program's parameter {why}") for axis in params] + (
            [(_base("program"), f"program {why}")] if program is not None else []
        )
    problems: list[Problem] = [
        (_base(name), f"{name}: {_WORKER_ONLY}; pass it as program.params")
        for name in sorted(base.model_fields_set - PROGRAM_FIELDS)
        if getattr(base, name) is not None
    ]
    problems += [
        (("body", "grid", name), f"{name}: {_WORKER_ONLY}; sweep it as {PARAM_PREFIX}{name} to pass it to the program")
        for name in sorted(grid.model_fields_set - PROGRAM_FIELDS - set(params))
        if getattr(grid, name) is not None
    ]  # fmt: skip
    if request.scaling == "weak":
        problems.append(
            (
                ("body", "scaling"),
                "weak scaling grows the worker's global batch with the GPUs; a program's batch is its own: compare "
                "it with strong scaling, and pass a batch that grows with the GPUs as program.params",
            )
        )
    if program is None:
        return [*problems, (_base("program"), "a program experiment needs its program: command and workdir")]
    problems += [(_base("program", "env"), refusal) for refusal in env_refusals(program.env)]
    return problems + _program_place(program, profile, home, slurm)


def _target(request: ExperimentCreate) -> list[Problem]:
    """What the request's target asks that its runs cannot report, at the target's field: inference reports no
    epochs, and the built-in worker's models report their quality figures only (a program may print any)."""
    target, kind = request.target, getattr(request.base, "kind", None) or RunKind.train
    if target is None or kind is RunKind.program:
        return []
    if kind is RunKind.inference:
        return [(("body", "target"), "a target is for training experiments: inference runs report no epochs")]
    models = getattr(request.grid, "model", None) or [getattr(request.base, "model", None) or Model.mlp]
    refusals = dict.fromkeys(refusal for model in models if (refusal := worker_refusal(target, model)))
    return [(("body", "target", "metric"), refusal) for refusal in refusals]


def _either(runtimes: list[Runtime]) -> str:
    """`a, b or c`: the runtimes a user may choose between."""
    *first, last = runtimes
    return f"{', '.join(first)} or {last}" if first else last


def _program_place(program: ProgramSpec, profile: ClusterProfile, home: Path | None, slurm: bool) -> list[Problem]:
    """Where the program runs (under the profile's roots) and in what (an image only where the runtime takes one)."""
    problems: list[Problem] = []
    roots = [home if root == HOME_ROOT else Path(root) for root in profile.program_roots]
    named = [root for root in roots if root is not None]
    if not within(Path(program.workdir), named):
        allowed = ", ".join(map(str, named)) or "none"
        no_home = HOME_ROOT in profile.program_roots and home is None
        problems.append(
            (
                _base("program", "workdir"),
                f"{program.workdir} is not under a program root of profile {profile.name} ({allowed}), with links "
                "followed"
                + ("; and the account the job would run as has no home here" if no_home else "")
                + ": put the program under one, or have the server's operator add its directory to "
                "SCALELAB_PROGRAM_ROOTS",
            )
        )
    else:
        problems += _missing_program_file(program, named)
    # A runtime that starts no image of its own runs the nodes' Python, or the image an environment definition names.
    if program.image is not None and (not slurm or not runtime_for(profile.container.runtime).starts_image):
        where = (
            f"profile {profile.name} runs programs with runtime {profile.container.runtime}, which starts no image"
            if slurm
            else "without Slurm, programs run in this machine's Python, with no image"
        )
        problems.append(
            (
                _base("program", "image"),
                f"{where}: leave image out, or choose a profile with {_either(image_starting())}",
            )
        )
    return problems


def _missing_program_file(program: ProgramSpec, roots: list[Path]) -> list[Problem]:
    """The file the command names (contract.program.named_file, the rule the batch script checks again on the node),
    where the server can see it: a relative path, in a workdir this process can look into, lying under the roots.
    An absolute path is the node's or the image's; a workdir this process cannot enter (another account's, or not
    mounted here) is left to the batch script's check."""
    named = named_file(program.command)
    if named is None or named.startswith("/"):
        return []
    workdir = Path(program.workdir)
    path = workdir / named
    try:
        if not workdir.is_dir() or not within(path, roots):
            return []
        found = path.stat()
    except (FileNotFoundError, NotADirectoryError):
        found = None
    except OSError:  # not ours to look into
        return []
    if found is not None and stat.S_ISREG(found.st_mode):
        return []
    why = "is not a file" if found is not None else "does not exist"
    return [
        (
            _base("program", "command"),
            f"the program file {named} {why} in {program.workdir}: correct the script's name in the command, or the "
            "workdir (a relative path in the command is taken from the workdir)",
        )
    ]


def home_of(user: str, runs_as_user: bool) -> Path | None:
    """The home of the Unix account the user's jobs run as: theirs where jobs run as their users, else the
    service's own (None: there is no such account here)."""
    try:
        entry = pwd.getpwnam(user) if runs_as_user else pwd.getpwuid(os.getuid())
    except KeyError:
        return None
    return Path(entry.pw_dir)


def _context_limit(trained: Trained | None) -> Callable[[RunSpec], list[str]]:
    def beyond(spec: RunSpec) -> list[str]:
        if trained is None or spec.max_new_tokens < trained.context:
            return []
        return [f"max_new_tokens ({spec.max_new_tokens}) must be below the trained model's context ({trained.context})"]

    return beyond


# The spec fields that decide whether a tensor-parallel degree splits the heads: where the grid sweeps none, every
# run splits them alike, and the one problem is named at the base's field rather than once per combination.
_TP_SPLIT_FIELDS = frozenset({"kind", "model", "strategy", "gpus", "tp_degree", "heads"})


def _unsplit_heads(spec: RunSpec, request: ExperimentCreate, trained: Trained | None) -> tuple[str, str] | None:
    """The field that sets the spec's tensor-parallel degree and why that degree does not divide the attention heads
    of the model it splits (a checkpoint's, for inference); None where it does. Checked here, not in the job,
    which would fail at its start after waiting in the queue."""
    if spec.tp == 1 or spec.model is not Model.gpt:
        return None
    if spec.kind is RunKind.inference:
        if trained is None or request.inference is None:
            return None
        named = request.inference.checkpoint_run and f"run {request.inference.checkpoint_run}"
        config = GptConfig.of(trained.spec)
        why = config.why_heads_do_not_split(spec.tp, f"the checkpoint's gpt ({named or trained.run_dir})")
    else:
        config = GptConfig.of(spec)
        why = config.why_heads_do_not_split(spec.tp)
    if why is None:
        return None
    field = "tp_degree" if spec.strategy is Strategy.fsdp_tp else "gpus"
    return field, f"{why} ({field}): each rank computes whole heads, so use a tensor-parallel degree that divides them"


def _heads_split(request: ExperimentCreate, trained: Trained | None) -> Callable[[RunSpec], list[str]]:
    def beyond(spec: RunSpec) -> list[str]:
        unsplit = _unsplit_heads(spec, request, trained)
        return [unsplit[1]] if unsplit else []

    return beyond


def plan_experiment(
    request: ExperimentCreate,
    profiles: Mapping[str, ClusterProfile],
    default_profile: str,
    *,
    slurm: bool,
    trained: Trained | None = None,
    home: Path | None = None,
) -> Plan:
    """The runs to create for the request on its profile; PlanError names every field that is out of bounds.

    `trained` is the run an inference request names by id, looked up by the caller; `home` the home of the account
    its jobs run as, a program root where the profile names "~"."""
    profile = _choose_profile(request, profiles, default_profile)
    resources = request.resources
    if not slurm and runtime_for(profile.container.runtime).in_container:
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
    trained, inference_problems = _inference(request, profile, trained)
    problems += inference_problems
    limits, within_context = _partition_limits(partition_name, partition), _context_limit(trained)
    split_swept = bool(_TP_SPLIT_FIELDS & set(request.grid.model_dump(exclude_none=True)))
    heads_split = _heads_split(request, trained)

    def why_not(spec: RunSpec) -> list[str]:
        return limits(spec) + within_context(spec) + heads_split(spec)

    if seconds(resources.time_limit) > seconds(partition.max_time):
        problems.append(
            (
                _resources("time_limit"),
                f"partition {partition_name} allows at most {partition.max_time}, not {resources.time_limit}",
            )
        )
    request_problems = _program(request, profile, home, slurm) + _target(request)
    if request_problems:
        # Every combination would fail for the same reasons: they are named once, at their fields.
        raise PlanError(problems + request_problems)
    try:
        specs, unrunnable = expand(
            request.base,
            request.grid,
            resources.nodes,
            # Unless a grid field sweeps the split, every combination splits the heads alike: named once, below.
            why_not if split_swept else lambda spec: limits(spec) + within_context(spec),
            _server_fields(request, trained),
            repeats=request.repeats,
            weak=request.scaling == "weak",
        )
    except SweepError as exc:
        problems += [(("body", "grid"), problem) for problem in exc.problems]
        raise PlanError(problems) from None
    unsplit = None if split_swept or not specs else _unsplit_heads(specs[0], request, trained)
    if unsplit is not None:
        field, why = unsplit
        problems.append((_base(field), why))
    refused = unrunnable if request.on_invalid == "refuse" else []
    if not refused and not specs:
        problems.append((("body", "grid"), "no combination can run: " + "; ".join(map(str, unrunnable))))
    if problems or refused:
        raise PlanError(problems, refused)
    exclusive = request.effective_isolation == "exclusive"
    # Where every run shares the nodes (the local profile's one machine), whole nodes cannot be had: exclusive runs
    # take turns instead, the monitor releasing the next when the last ends.
    one_at_a_time = exclusive and (profile.shared_nodes or not slurm)
    return Plan(
        profile,
        partition_name,
        resources.time_limit,
        options,
        specs,
        unrunnable,
        exclusive=exclusive and not one_at_a_time,
        one_at_a_time=one_at_a_time,
        requested_concurrency=resources.max_concurrent,
        why_not=why_not,
    )


def _server_fields(request: ExperimentCreate, trained: Trained | None) -> dict[str, object]:
    """The spec fields the server sets from the experiment as a whole: the checkpoint an inference reads, the
    target every run is scored against."""
    fields: dict[str, object] = {}
    if trained is not None:
        fields["checkpoint"] = str(trained.run_dir)
    if request.target is not None:
        fields["target"] = request.target.model_dump(exclude_none=True)
    return fields


def _trained(
    session: Session, request: ExperimentCreate, user: User, scheduler: Scheduler
) -> tuple[Trained | None, After | None]:
    """The training run an inference request chose by id (among those the user may see: another's is as none), and
    where it has not ended, its job for the inference's jobs to wait for (server/services/dependencies.py)."""
    if request.inference is None or request.inference.checkpoint_run is None:
        return None, None
    run_id = request.inference.checkpoint_run
    run = session.get(Run, run_id)
    if run is not None and not visibility.may_see_run(session, user, run):
        run = None
    if run is not None and scheduler.runs_as_user and run.owner != user.name:
        # Seeing a shared run is not reading its files: the inference job runs as this user, and the checkpoint
        # is the owner's, which the file system keeps from everyone else.
        why = (
            f"run {run_id} is {run.owner}'s: jobs here run as their users, so yours could not read its checkpoint; "
            f"ask {run.owner} to run this inference, or generate from a run of your own"
        )
        raise Invalid([(("body", "inference", "checkpoint_run"), why)])
    try:
        if run is not None and not run.state.is_final:
            trained, after = dependencies.awaited(run, scheduler)
            return trained, after
        return trained_run(run, run_id), None
    except CheckpointError as exc:
        raise Invalid([(("body", "inference", "checkpoint_run"), str(exc))]) from None


def plan_request(
    session: Session,
    request: ExperimentCreate,
    catalog: ProfileCatalog,
    scheduler: Scheduler,
    user: User,
    *,
    programs_for_all: bool,
) -> Plan:
    """The runs the request expands into on its cluster profile, for this user (whose runs they are: an admin
    running a user's run again plans it for that user); Invalid names each problem. `programs_for_all`: the
    operator's SCALELAB_PROGRAMS_FOR_ALL_AS_SERVICE_ACCOUNT."""
    if getattr(request.base, "kind", None) is RunKind.program:
        refused = why_no_programs(user, scheduler.runs_as_user, programs_for_all)
        if refused is not None:
            # Before anything else is checked: nothing else about the request matters to this user.
            invalid = Invalid([(_base("kind"), refused)])
            invalid.errors[0]["type"] = PROGRAMS_ADMIN_ONLY
            raise invalid
    trained, after = _trained(session, request, user, scheduler)
    plan = plan_experiment(
        request,
        catalog.profiles,
        catalog.default,
        slurm=scheduler.uses_slurm,
        trained=trained,
        home=home_of(user.name, scheduler.runs_as_user),
    )
    if after is not None:
        plan = replace(plan, after=after)
    if user.slurm_account and "account" not in plan.sbatch_options:
        # The account an admin mapped the user to; an account the request names (if the profile lets it) wins.
        plan.sbatch_options["account"] = user.slurm_account
    return plan
