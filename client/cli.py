"""`scalelab`: the command line on the login node, over a running server's REST API."""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import re
import shlex
import sys
import textwrap
import time
import tomllib
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from pydantic import ValidationError

from client import terminal
from client.api import (
    DEFAULT_TIMEOUT_S,
    DEFAULT_URL,
    BadUrl,
    Client,
    ClientError,
    Invalid,
    NotFound,
    ServerUnreachable,
    TokenRejected,
    Unavailable,
)
from contract.states import RunState
from server.models import (
    MAX_IMPORT_FILE_CHARS,
    ExperimentChanges,
    ExperimentCreated,
    ExperimentPreview,
    ProfilesPublic,
    RunPublic,
    RunsPublic,
    SkippedRun,
)
from server.profiles import ClusterProfile, OptionKind, Runtime, SbatchOption
from server.services.sweep import Unrunnable

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
EXIT_TOKEN = 4
EXIT_NOT_FOUND = 5
EXIT_INTERRUPTED = 130

CONFIG_KEYS = frozenset({"url", "token"})
WAITING = "waiting for a slot"
# The sections of an experiment request that `clone --set` and `--unset` change, field by field.
CHANGE_SECTIONS = ("base", "grid", "resources")
# A 422 line naming a grid combination that cannot run: --skip-invalid would leave it out.
UNRUNNABLE_LINE = re.compile(r"^grid: [a-z_]+=", re.MULTILINE)
# How a 503 of a submission names the experiment whose runs it kept as submit_failed.
KEPT_EXPERIMENT = re.compile(r"\bExperiment ([0-9a-f]+):")

EPILOG = f"""\
connection:
  the server's URL and token come from --url and --token, else SCALELAB_URL and SCALELAB_TOKEN,
  else "url" and "token" in $XDG_CONFIG_HOME/scalelab/config.toml (~/.config/scalelab/config.toml),
  else {DEFAULT_URL} without a token. The token is sent as "Authorization: Bearer TOKEN".

exit codes:
  {EXIT_OK}  done (watch: every run completed)
  {EXIT_FAILED}  the operation failed: a watched run did not complete, the scheduler refused a run or
     cannot be reached now (HTTP 503: the message says when to try again), the run had already
     ended or has nothing to resubmit (HTTP 409), or the server had an error
  {EXIT_USAGE}  usage error, or the server found the input invalid (HTTP 422)
  {EXIT_UNREACHABLE}  the server cannot be reached
  {EXIT_TOKEN}  the server rejected the token (HTTP 401 or 403)
  {EXIT_NOT_FOUND}  no such experiment or run (HTTP 404)
"""


class UsageError(Exception):
    """The command line, a file it names, or the config file is wrong; the message says how."""


# ---- connection --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Connection:
    url: str
    token: str | None


def config_path(environ: Mapping[str, str]) -> Path:
    return Path(environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "scalelab" / "config.toml"


def _config(path: Path) -> dict[str, Any]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"cannot read the config file {path}: {exc}") from None
    unknown = sorted(set(data) - CONFIG_KEYS)
    if unknown:
        raise UsageError(f"{path}: unknown keys {', '.join(unknown)}; it may hold {', '.join(sorted(CONFIG_KEYS))}")
    wrong = sorted(key for key, value in data.items() if not isinstance(value, str))
    if wrong:
        raise UsageError(f"{path}: {', '.join(wrong)} must be a quoted string")
    return data


def connection(args: argparse.Namespace, environ: Mapping[str, str]) -> Connection:
    """Flags, then environment, then the config file, then the default."""
    config = _config(config_path(environ))
    url = getattr(args, "url", None) or environ.get("SCALELAB_URL") or config.get("url") or DEFAULT_URL
    token = getattr(args, "token", None) or environ.get("SCALELAB_TOKEN") or config.get("token")
    return Connection(url, token or None)


def exit_code(error: ClientError) -> int:
    if isinstance(error, ServerUnreachable):
        return EXIT_UNREACHABLE
    if isinstance(error, TokenRejected):
        return EXIT_TOKEN
    if isinstance(error, NotFound):
        return EXIT_NOT_FOUND
    if isinstance(error, Invalid | BadUrl):
        return EXIT_USAGE
    return EXIT_FAILED


# ---- reading files -----------------------------------------------------------------------------------------------


def read_experiment(path: Path) -> dict[str, Any]:
    """An experiment spec from TOML, or from JSON when the file's name ends in .json."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    if path.suffix.lower() == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{path}: not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") from None
    else:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise UsageError(f"{path}: not valid TOML: {exc}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: an experiment is a table of fields (name, base, grid, resources)")
    _refuse_dates(data, path, "")
    return data


def _refuse_dates(value: Any, path: Path, where: str) -> None:
    # TOML reads an unquoted 00:10:00 as a time of day; the API wants the text.
    if isinstance(value, dt.date | dt.time):
        raise UsageError(f'{path}: {where} must be quoted: "{value}" (unquoted, TOML reads it as a date or time)')
    if isinstance(value, dict):
        for key, item in value.items():
            _refuse_dates(item, path, f"{where}.{key}" if where else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _refuse_dates(item, path, f"{where}[{index}]")


def _natural(name: str) -> list[Any]:
    """Sort key that puts run_2gpus before run_16gpus."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def read_logs(directory: Path, pattern: str) -> list[tuple[str, str]]:
    if "/" in pattern:
        raise UsageError(f"--glob {pattern!r}: a pattern of file names in LOGDIR, without '/'")
    if not directory.is_dir():
        raise UsageError(f"{directory} is not a directory")
    paths = sorted(
        (path for path in directory.glob(pattern) if path.is_file() and not path.name.startswith(".")),
        key=lambda path: _natural(path.name),
    )
    if not paths:
        raise UsageError(f"no files matching {pattern!r} in {directory}")
    try:
        # Logs are text, but a stray byte must not stop the import: the server names files it cannot read.
        files = [(path.name, path.read_bytes().decode("utf-8", errors="replace")) for path in paths]
    except OSError as exc:
        raise UsageError(f"cannot read {exc.filename}: {exc.strerror}") from None
    too_big = [name for name, text in files if len(text) > MAX_IMPORT_FILE_CHARS]
    if too_big:
        limit = MAX_IMPORT_FILE_CHARS // 2**20
        raise UsageError(f"larger than the {limit} MiB a log may be: {', '.join(too_big)}; nothing was imported")
    return files


# ---- output ------------------------------------------------------------------------------------------------------


def _print_table(headers: list[str], rows: list[list[Any]], flexible: int = -1) -> None:
    print("\n".join(terminal.table(headers, rows, terminal.columns(), flexible=flexible)))


def _when(moment: dt.datetime, *, seconds: bool = False) -> str:
    return moment.astimezone().strftime("%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M")


def _state_text(run: RunPublic) -> str:
    if run.waiting:
        return f"{run.state} ({WAITING})"
    if run.state in (RunState.pending, RunState.submitted) and run.scheduler_reason:
        return f"{run.state} ({run.scheduler_reason})"
    return str(run.state)


def _runs_table(runs: list[RunPublic]) -> None:
    headers = ["RUN", "EXPERIMENT", "STATE", "STRATEGY", "GPUS", "NODES", "JOB", "MESSAGE"]
    rows = [
        [
            run.id,
            run.experiment_id,
            _state_text(run),
            run.spec.get("strategy"),
            run.spec.get("gpus"),
            run.spec.get("nodes"),
            run.job_id,
            run.message,
        ]
        for run in runs
    ]
    _print_table(headers, rows, flexible=len(headers) - 1)


def _counts(states: Mapping[str, int]) -> str:
    return ", ".join(f"{count} {state}" for state, count in sorted(states.items())) or "no runs"


def _settings_text(fields: Mapping[str, Any]) -> str:
    """Spec fields as key=value, leaving out the unset ones."""
    return " ".join(f"{key}={value}" for key, value in fields.items() if value is not None)


def _wrapped(text: str, indent: str) -> str:
    return textwrap.fill(text, terminal.columns(), subsequent_indent=indent, break_on_hyphens=False)


def _label(key: str) -> str:
    """A record's field name for people: epoch_time_s -> epoch time (s), samples_per_s -> samples/s."""
    key = key.replace("_per_", "/")
    return key.removesuffix("_s").replace("_", " ") + " (s)" if key.endswith("_s") else key.replace("_", " ")


def _print_fields(fields: list[tuple[str, object]]) -> None:
    """One `key  value` line each, values aligned and wrapped under themselves."""
    width = max(len(key) for key, _ in fields)
    for key, value in fields:
        print(_wrapped(f"{key.ljust(width)}  {terminal.cell(value)}", " " * (width + 2)))


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _print_skipped(skipped: list[SkippedRun]) -> None:
    if skipped:
        print(f"\nleft out {_plural(len(skipped), 'combination')} that cannot run:")
        for item in skipped:
            print(_wrapped(f"  {Unrunnable(item.combination, item.reason)}", "    "))


def _print_preview(preview: ExperimentPreview) -> None:
    specs = [spec.settings() for spec in preview.runs]
    varying = [key for key in specs[0] if len({json.dumps(spec[key]) for spec in specs}) > 1]
    fixed = {key: value for key, value in specs[0].items() if key not in varying}
    print(f'experiment "{preview.name}": {preview.count} runs; nothing was submitted (--dry-run)')
    print(_wrapped(f"every run: {_settings_text(fixed)}", "  "))
    rows = [[position, *(spec[key] for key in varying)] for position, spec in enumerate(specs)]
    _print_table(["#", *varying], rows)
    _print_skipped(preview.skipped)
    which = "the first run" if preview.index == 0 else f"run {preview.index}"
    print(f"\nbatch script of {which} (RUN_ID stands for the id it gets when submitted):\n")
    print(preview.script, end="")


def _refused(runs: list[RunPublic]) -> int:
    """Name on stderr each run the scheduler refused; EXIT_FAILED if there was one."""
    refused = [run for run in runs if run.state is RunState.submit_failed]
    for run in refused:
        print(f"scalelab: run {run.id} was not submitted: {run.message}", file=sys.stderr)
    return EXIT_FAILED if refused else EXIT_OK


def _print_created(created: ExperimentCreated, quiet: bool, origin: str = "") -> int:
    if quiet:
        print(created.id)
        for item in created.skipped:
            print(f"scalelab: left out {Unrunnable(item.combination, item.reason)}", file=sys.stderr)
    else:
        print(f'experiment {created.id} "{created.name}"{origin}: {created.run_count} runs ({_counts(created.states)})')
        _runs_table(created.runs)
        _print_skipped(created.skipped)
        print(f"\nfollow it with: scalelab watch {created.id}")
    return _refused(created.runs)


@contextlib.contextmanager
def _submission_hints() -> Iterator[None]:
    """Errors of submitting an experiment, with what the command line offers for them."""
    try:
        yield
    except Invalid as exc:
        if not UNRUNNABLE_LINE.search(str(exc)):
            raise
        hint = "--skip-invalid leaves out the combinations that cannot run and keeps the rest"
        raise Invalid(exc.status_code, f"{exc}\n{hint}") from None
    except Unavailable as exc:
        # The server names the experiment it kept; without it, the user finds it with `scalelab ls`.
        kept = KEPT_EXPERIMENT.search(str(exc))
        command = f"scalelab resubmit {kept.group(1) if kept else 'EXPERIMENT'}"
        raise Unavailable(exc.status_code, f"{exc}\nfrom the command line, later: {command}") from None


def _settled(run: RunPublic) -> bool:
    """Final, and every metric is in (the monitor reads a run once more after it ends; a run with no job has none)."""
    return run.state.is_final and (run.ingest_done or run.job_id is None)


# ---- commands ----------------------------------------------------------------------------------------------------


def _check_script_option(args: argparse.Namespace) -> None:
    if args.script is not None and not args.dry_run:
        raise UsageError("--script goes with --dry-run: it chooses which run's batch script to print")


def cmd_submit(client: Client, args: argparse.Namespace) -> int:
    _check_script_option(args)
    request = read_experiment(args.file)
    if args.skip_invalid:
        request["on_invalid"] = "skip"
    with _submission_hints():
        if args.dry_run:
            _print_preview(client.preview(request, index=args.script or 0))
            return EXIT_OK
        created = client.submit(request)
    return _print_created(created, args.quiet)


def cmd_ls(client: Client, args: argparse.Namespace) -> int:
    if args.experiment or args.runs or args.state:
        if args.experiment:
            client.experiment(args.experiment)  # an unknown id is an error, not an empty list
        runs = client.runs(experiment_id=args.experiment, states=args.state or (), limit=args.limit)
        _runs_table(sorted(runs.data, key=lambda run: run.position) if args.experiment else runs.data)
        shown, count, what = len(runs.data), runs.count, "runs"
    else:
        experiments = client.experiments(limit=args.limit)
        rows = [
            [item.id, _when(item.created_at), item.run_count, _counts(item.states), item.name]
            for item in experiments.data
        ]
        _print_table(["EXPERIMENT", "CREATED", "RUNS", "STATES", "NAME"], rows, flexible=4)
        shown, count, what = len(experiments.data), experiments.count, "experiments"
    if shown < count:
        print(f"({shown} of {count} {what}; --limit shows more)")
    return EXIT_OK


def cmd_show(client: Client, args: argparse.Namespace) -> int:
    run = client.run(args.run)
    count = client.metrics(run.id, kind="epoch", limit=1).count
    last = client.metrics(run.id, kind="epoch", skip=count - 1, limit=1).data if count else []
    scheduler = run.scheduler + (f", job {run.job_id}" if run.job_id else "")
    if run.scheduler_state:
        scheduler += f": {run.scheduler_state}" + (f" ({run.scheduler_reason})" if run.scheduler_reason else "")
    fields: list[tuple[str, object]] = [
        ("run", f"{run.id} (experiment {run.experiment_id}, position {run.position})"),
        ("state", f"{run.state} ({WAITING})" if run.waiting else run.state),
        ("scheduler", scheduler),
        ("profile", run.profile),
        ("attempt", run.attempt),
        ("exit code", run.exit_code),
        ("message", run.message),
        ("spec", _settings_text(run.spec)),
        ("directory", run.run_dir),
        ("created", _when(run.created_at)),
        ("started", run.started_at and _when(run.started_at)),
        ("ended", run.ended_at and _when(run.ended_at)),
    ]
    if run.parse_errors:
        fields.append(("unreadable metric lines", run.parse_errors))
    if last:
        record = last[0].model_dump(exclude_none=True, exclude={"v", "kind"})
        epochs = run.spec.get("epochs")
        fields.append(("last epoch", f"{record['epoch']} of {epochs}" if epochs else record["epoch"]))
        fields += [(_label(key), value) for key, value in record.items() if key != "epoch"]
    else:
        fields.append(("last epoch", "none yet"))
    _print_fields(fields)
    return EXIT_OK


def cmd_logs(client: Client, args: argparse.Namespace) -> int:
    offset = 0
    while True:
        piece = client.log(args.run, offset)
        sys.stdout.write(piece.text)
        sys.stdout.flush()
        offset = piece.next_offset
        if offset < piece.size:
            continue  # more is there already
        if piece.complete or not args.follow:
            return EXIT_OK
        time.sleep(args.interval)


def _progress_line(run: RunPublic, epochs_done: int) -> str:
    epochs = int(run.spec.get("epochs") or 0)
    note = run.message if run.state.is_final and run.state is not RunState.completed else None
    parts = [
        run.id,
        f"{run.spec.get('strategy', '?'):<6}",
        f"{run.spec.get('gpus', '?'):>3} gpus",
        f"{_state_text(run):<13}",
        terminal.bar(epochs_done, epochs),
        f"{epochs_done}/{epochs} epochs",
    ]
    return "  ".join(parts) + (f"  {note}" if note else "")


def cmd_watch(client: Client, args: argparse.Namespace) -> int:
    experiment = client.experiment(args.experiment)
    print(f'experiment {experiment.id} "{experiment.name}": {experiment.run_count} runs')
    board = terminal.Board(sys.stdout)
    while True:
        runs = sorted(client.runs(experiment_id=experiment.id).data, key=lambda run: run.position)
        done = {row.run_id: row.epochs_done for row in client.compare(experiment.id).data}
        board.show([_progress_line(run, done.get(run.id, 0)) for run in runs])
        if all(_settled(run) for run in runs):
            break
        time.sleep(args.interval)
    states = Counter(str(run.state) for run in runs)
    print(f"all runs ended: {_counts(states)}")
    return EXIT_OK if set(states) <= {RunState.completed} else EXIT_FAILED


def _on_run_or_experiment(
    target: str,
    on_run: Callable[[str], RunPublic],
    on_experiment: Callable[[str], RunsPublic],
    only: str | None = None,
) -> list[RunPublic]:
    """The runs an action touched: `target` taken as a run id, else as an experiment id (`only` "run" or
    "experiment" tries that one alone). Ids are random and drawn apart, so one never names both."""
    if only != "experiment":
        try:
            return [on_run(target)]
        except NotFound:
            if only == "run":
                raise
    try:
        return on_experiment(target).data
    except NotFound:
        if only == "experiment":
            raise
        raise NotFound(404, f"no run or experiment {target!r}") from None


def cmd_cancel(client: Client, args: argparse.Namespace) -> int:
    runs = _on_run_or_experiment(args.target, client.cancel_run, client.cancel_experiment)
    for run in runs:
        if run.state is RunState.cancelled:
            print(f"run {run.id}: cancelled (it had not been submitted)")
        else:
            print(f"run {run.id}: job {run.job_id} asked to stop; it shows as cancelled once {run.scheduler} ends it")
    return EXIT_OK


def cmd_resubmit(client: Client, args: argparse.Namespace) -> int:
    runs = _on_run_or_experiment(args.target, client.resubmit_run, client.resubmit_experiment, args.only)
    for run in runs:
        if run.waiting:
            print(f"run {run.id}: resubmitted, {run.message or WAITING}")
        elif run.state is not RunState.submit_failed:
            print(f"run {run.id}: submitted again as job {run.job_id} (attempt {run.attempt})")
    print(f"follow it with: scalelab watch {runs[0].experiment_id}")
    return _refused(runs)


def _json_or_text(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _change_key(text: str) -> tuple[str, str]:
    section, dot, field = text.partition(".")
    if section in CHANGE_SECTIONS and "." in field:
        raise argparse.ArgumentTypeError(
            f"{text!r}: a key has one dot; resources.sbatch_options takes its whole table as JSON, "
            """e.g. resources.sbatch_options='{"mem": "4G"}'"""
        )
    if section not in CHANGE_SECTIONS or not dot or not re.fullmatch(r"[a-z_]{1,64}", field):
        raise argparse.ArgumentTypeError(f"{text!r}: a key is base.FIELD, grid.FIELD or resources.FIELD")
    return section, field


def _assignment(text: str) -> tuple[str, str, Any]:
    """KEY=VALUE: the value as JSON if it reads as JSON, else as text; for grid, a JSON list or a comma list."""
    key, equals, value = text.partition("=")
    if not equals:
        raise argparse.ArgumentTypeError(f"{text!r}: give KEY=VALUE, e.g. base.epochs=3")
    section, field = _change_key(key)
    if section != "grid":
        return section, field, _json_or_text(value)
    values = _json_or_text(value)
    if not isinstance(values, list):
        items = [item.strip() for item in value.split(",")]
        if not all(items):
            raise argparse.ArgumentTypeError(f"{text!r}: an empty value in the list")
        values = [_json_or_text(item) for item in items]
    return section, field, values


def clone_changes(args: argparse.Namespace) -> dict[str, Any]:
    """The body of POST /api/experiments/{id}/clone: the API's ExperimentChanges."""
    changes: dict[str, Any] = {}
    unsets = [(section, field, None) for section, field in args.unset]
    for section, field, value in [*args.set, *unsets]:
        fields = changes.setdefault(section, {})
        if field in fields:
            raise UsageError(f"{section}.{field} is given more than once")
        fields[field] = value
    if args.name is not None:
        changes["name"] = args.name
    if args.skip_invalid:
        changes["on_invalid"] = "skip"
    return changes


def cmd_clone(client: Client, args: argparse.Namespace) -> int:
    _check_script_option(args)
    changes = clone_changes(args)
    with _submission_hints():
        if args.dry_run:
            original = client.experiment(args.experiment)
            try:
                request = ExperimentChanges.model_validate(changes).apply(original.request)
            except ValidationError as exc:
                problems = [f"{'.'.join(map(str, error['loc']))}: {error['msg']}" for error in exc.errors()]
                raise UsageError("\n".join(problems)) from None
            _print_preview(client.preview(request, index=args.script or 0))
            return EXIT_OK
        created = client.clone(args.experiment, changes)
    return _print_created(created, args.quiet, origin=f" (a clone of {args.experiment})")


def cmd_events(client: Client, args: argparse.Namespace) -> int:
    events = client.events(args.run).data
    if not events:
        print(f"no events recorded for run {args.run}")
        return EXIT_OK
    headers = ["TIME", "EVENT", "JOB", "STATE", "SLURM STATE", "DETAIL"]
    rows = [
        [_when(event.at, seconds=True), event.kind, event.job_id, event.state, event.scheduler_state, event.detail]
        for event in events
    ]
    _print_table(headers, rows, flexible=len(headers) - 1)
    return EXIT_OK


def _option_values(option: SbatchOption) -> str:
    if option.kind is OptionKind.choice:
        return ", ".join(option.choices)
    if option.kind is OptionKind.int:
        if option.min is not None and option.max is not None:
            return f"a whole number, {option.min} to {option.max}"
        if option.min is not None:
            return f"a whole number, {option.min} or more"
        return "a whole number" if option.max is None else f"a whole number, up to {option.max}"
    if option.kind is OptionKind.time:
        return "a time, [D-]HH:MM:SS"
    return "a word: letters, digits, _ . : + -"


def _profiles_table(listing: ProfilesPublic) -> None:
    headers = ["PROFILE", "RUNTIME", "PARTITION", "MAX NODES", "GPUS/NODE", "MAX TIME", "GRES", "DESCRIPTION"]
    rows: list[list[object]] = []
    for profile in listing.data:
        for index, (name, partition) in enumerate(profile.partitions.items()):
            first = index == 0  # the profile's own columns go on its first partition's line
            rows.append(
                [
                    (profile.name + (" *" if profile.name == listing.default else "")) if first else "",
                    profile.container.runtime if first else "",
                    name + (" *" if name == profile.default_partition else ""),
                    partition.max_nodes,
                    partition.gpus_per_node,
                    partition.max_time,
                    partition.gres,
                    profile.description if first else "",
                ]
            )
    _print_table(headers, rows, flexible=len(headers) - 1)
    print(_wrapped("* the default, for runs that name no resources.profile or resources.partition", "  "))


def _profile_details(profile: ClusterProfile, default: bool) -> None:
    container = profile.container
    fields: list[tuple[str, object]] = [
        ("profile", f"{profile.name} (the default)" if default else profile.name),
        ("description", profile.description),
        ("runtime", container.runtime),
        ("image", container.image),
        ("edf", container.edf),
        ("python", profile.worker_python if container.runtime is Runtime.none else container.python),
        ("mounts", " ".join(container.mounts)),
        ("account", profile.account),
        ("qos", profile.qos),
        ("modules", " ".join(profile.modules)),
        ("env", " ".join(f"{key}={shlex.quote(value)}" for key, value in profile.env.items())),
        (
            "at the time limit",
            f"Slurm signals the worker to save {profile.signal_before_end_s} s before it; "
            f"the saved job runs again, up to {profile.max_requeues} times",
        ),
    ]
    _print_fields([(key, value) for key, value in fields if value not in (None, "")])
    print()
    headers = ["PARTITION", "MAX NODES", "GPUS/NODE", "MAX TIME", "GRES", "GPU MEMORY (GIB)", "CPUS/TASK"]
    rows = [
        [
            name + (" *" if name == profile.default_partition else ""),
            partition.max_nodes,
            partition.gpus_per_node,
            partition.max_time,
            partition.gres,
            partition.gpu_memory_gib,
            partition.cpus_per_task,
        ]
        for name, partition in profile.partitions.items()
    ]
    _print_table(headers, rows)
    print("* the default partition")
    if not profile.sbatch_options:
        print("\nsbatch options users may set: none")
        return
    print("\nsbatch options users may set (resources.sbatch_options):")
    rows = [
        [name, _option_values(option), option.description] for name, option in sorted(profile.sbatch_options.items())
    ]
    _print_table(["OPTION", "VALUES", "DESCRIPTION"], rows, flexible=2)


def cmd_profiles(client: Client, args: argparse.Namespace) -> int:
    if args.name is None:
        listing = client.profiles()
        if args.json:
            print(listing.model_dump_json(indent=2))
        else:
            _profiles_table(listing)
        return EXIT_OK
    profile = client.profile(args.name)
    if args.json:
        print(profile.model_dump_json(indent=2))
    else:
        _profile_details(profile, client.profiles().default == profile.name)
    return EXIT_OK


def cmd_export(client: Client, args: argparse.Namespace) -> int:
    if args.format == "json":
        print(client.compare(args.experiment).model_dump_json(indent=2))
    else:
        sys.stdout.write(client.compare_csv(args.experiment))
    return EXIT_OK


def cmd_import(client: Client, args: argparse.Namespace) -> int:
    files = read_logs(args.logdir, args.glob)
    name = args.name or f"imported from {args.logdir.resolve().name}"
    try:
        created = client.import_logs(name, files)
    except Invalid as exc:
        raise Invalid(exc.status_code, f"{exc}\nnothing was imported") from None
    if args.quiet:
        print(created.id)
        return EXIT_OK
    print(f'imported {len(files)} logs as experiment {created.id} "{created.name}" ({_counts(created.states)})')
    headers = ["FILE", "RUN", "STATE", "STRATEGY", "GPUS", "EPOCHS", "S/EPOCH", "VAL LOSS"]
    rows = [
        [file, r.run_id, r.state, r.strategy, r.gpus, r.epochs_done, r.mean_epoch_time_s, r.final_val_loss]
        for (file, _), r in zip(files, client.compare(created.id).data, strict=True)
    ]
    _print_table(headers, rows, flexible=0)
    return EXIT_OK


# ---- the parser --------------------------------------------------------------------------------------------------

Command = Callable[[Client, argparse.Namespace], int]


def _positive(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be above 0, got {text}")
    return value


def _rows(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 1000:
        raise argparse.ArgumentTypeError(f"must be 1 to 1000, got {text}")
    return value


def _index(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"runs are numbered from 0, got {text}")
    return value


def _submission_options(sub: argparse.ArgumentParser) -> None:
    """What submit and clone share: how to submit, and how to look before submitting."""
    sub.add_argument("--dry-run", action="store_true", help="print the runs and a batch script; submit nothing")
    sub.add_argument(
        "--script",
        type=_index,
        metavar="N",
        help="with --dry-run: print the batch script of run N, numbered from 0 (default: the first)",
    )
    sub.add_argument(
        "--skip-invalid",
        action="store_true",
        help="leave out the grid combinations that cannot run and submit the rest (on_invalid = skip); "
        "without it, one such combination refuses the whole experiment (exit 2)",
    )
    sub.add_argument("-q", "--quiet", action="store_true", help="print only the experiment's id")


def build_parser() -> argparse.ArgumentParser:
    # Connection options work before or after the command; SUPPRESS keeps a subcommand from resetting them.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", default=argparse.SUPPRESS, help=f"the server (default: {DEFAULT_URL})")
    common.add_argument("--token", default=argparse.SUPPRESS, help="API token, sent as a bearer token")
    wait = f"seconds to wait for an answer (default: {DEFAULT_TIMEOUT_S:g})"
    common.add_argument("--timeout", type=_positive, default=argparse.SUPPRESS, help=wait)
    parser = argparse.ArgumentParser(
        prog="scalelab",
        description="Submit, follow, compare and import distributed training experiments on a scalelab server.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[common],
    )
    commands = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)

    def command(
        name: str, handler: Command, summary: str, description: str, examples: tuple[str, ...] = ()
    ) -> argparse.ArgumentParser:
        shown = "".join(f"  {example}\n" for example in examples)
        sub = commands.add_parser(
            name,
            help=summary,
            # Raw text keeps the epilog's layout, so the description is wrapped here, as argparse would.
            description=textwrap.fill(
                f"{summary}. {description}", min(terminal.columns(), 100) - 2, break_on_hyphens=False
            ),
            epilog=f"examples:\n{shown}\n{EPILOG}" if examples else EPILOG,
            formatter_class=argparse.RawDescriptionHelpFormatter,
            parents=[common],
        )
        sub.set_defaults(handler=handler)
        return sub

    sub = command(
        "submit",
        cmd_submit,
        "Submit an experiment from a TOML or JSON file",
        "The file holds what POST /api/experiments takes: name, base, grid, resources and on_invalid "
        "(see examples/sweep.toml). Prints the experiment and its runs, and the grid combinations left out.",
        (
            "scalelab submit examples/sweep.toml --dry-run",
            "scalelab submit examples/sweep.toml --dry-run --script 1   # the second run's batch script",
            "scalelab submit sweep.toml --skip-invalid",
            'EXP=$(scalelab submit sweep.toml -q) && scalelab watch "$EXP"',
        ),
    )
    sub.add_argument("file", type=Path, help="the experiment: TOML, or JSON if its name ends in .json")
    _submission_options(sub)

    sub = command(
        "ls",
        cmd_ls,
        "List experiments, or runs",
        "Without arguments: the experiments, newest first. With EXPERIMENT, --runs or --state: runs.",
    )
    sub.add_argument("experiment", nargs="?", metavar="EXPERIMENT", help="list this experiment's runs")
    sub.add_argument("--runs", action="store_true", help="list runs of every experiment")
    sub.add_argument(
        "--state",
        action="append",
        choices=[str(state) for state in RunState],
        metavar="STATE",
        help="only runs in this state (repeat for several): " + ", ".join(RunState),
    )
    sub.add_argument("--limit", type=_rows, default=100, metavar="N", help="at most N rows, 1 to 1000 (default: 100)")

    sub = command(
        "show", cmd_show, "Show one run", "Its state, the scheduler's state and reason, its spec and last metrics."
    )
    sub.add_argument("run", metavar="RUN")

    sub = command("logs", cmd_logs, "Print a run's output", "The job's output.log as the server reads it.")
    sub.add_argument("run", metavar="RUN")
    sub.add_argument("-f", "--follow", action="store_true", help="keep printing new output until the run ends")
    sub.add_argument("--interval", type=_positive, default=1.0, help="seconds between polls (default: %(default)s)")

    sub = command(
        "watch",
        cmd_watch,
        "Follow an experiment's runs until all have ended",
        "A line per run with its state and a progress bar of its epochs. Exits 0 if every run completed, 1 if not.",
    )
    sub.add_argument("experiment", metavar="EXPERIMENT")
    sub.add_argument("--interval", type=_positive, default=2.0, help="seconds between updates (default: %(default)s)")

    sub = command(
        "cancel",
        cmd_cancel,
        "Cancel a run, or every unfinished run of an experiment",
        "Jobs are cancelled through the scheduler and show as cancelled once it has stopped them. "
        "A run that has already ended cannot be cancelled (exit 1).",
    )
    sub.add_argument("target", metavar="RUN|EXPERIMENT")

    sub = command(
        "resubmit",
        cmd_resubmit,
        "Submit again a run, or every run of an experiment, that ended without completing",
        "Failed, timed-out, cancelled, preempted and never-submitted runs run again with the same spec and batch "
        "script, resuming from their last checkpoint where they have one; a run of an experiment with a "
        "concurrency limit waits for a slot. ID is looked up as a run first, then as an experiment (as cancel "
        "does); --run or --experiment looks only there. A completed run is not resubmitted: clone its "
        "experiment. Nothing to resubmit, or a run still live, is exit 1, as is a scheduler that cannot be "
        "reached (the runs stay submit_failed: try again later).",
        (
            "scalelab resubmit 3f2a9c01de             # a run, or every unfinished run of an experiment",
            "scalelab resubmit --experiment 3f2a9c01de",
            "scalelab resubmit --run 7db83adafd && scalelab events 7db83adafd",
        ),
    )
    sub.add_argument("target", metavar="ID", help="a run's id or an experiment's id")
    which = sub.add_mutually_exclusive_group()
    which.add_argument("--run", dest="only", action="store_const", const="run", help="ID is a run")
    which.add_argument(
        "--experiment", dest="only", action="store_const", const="experiment", help="ID is an experiment"
    )

    sub = command(
        "clone",
        cmd_clone,
        "Submit a new experiment made from an earlier one with some changes",
        "The earlier experiment's request, with each --set and --unset laid over it, is validated and submitted "
        "like a new one. KEY is base.FIELD, grid.FIELD or resources.FIELD. A VALUE that reads as JSON is taken "
        "as JSON (3, 0.1, true, null, a list or table), anything else as text (00:20:00, bf16); for grid.FIELD "
        "it is a JSON list or a comma-separated list (1,2,4). --unset gives a base or resources field its "
        "default, and stops sweeping a grid field. Prints what submit prints.",
        (
            "scalelab clone 3f2a9c01de --set base.epochs=3 --set grid.gpus=1,2,4,8",
            "scalelab clone 3f2a9c01de --name 'fsdp only' --set grid.strategy=fsdp --dry-run",
            "scalelab clone 3f2a9c01de --set resources.time_limit=00:20:00 --unset grid.precision",
            'scalelab clone 3f2a9c01de --set resources.sbatch_options=\'{"mem": "4G"}\' --skip-invalid',
        ),
    )
    sub.add_argument("experiment", metavar="EXPERIMENT", help="the experiment to start from")
    sub.add_argument("--name", help="the new experiment's name (default: the earlier one's)")
    sub.add_argument(
        "--set",
        type=_assignment,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a field (repeat for several), e.g. base.epochs=3, grid.gpus=1,2,4, resources.time_limit=00:20:00",
    )
    sub.add_argument(
        "--unset",
        type=_change_key,
        action="append",
        default=[],
        metavar="KEY",
        help="take a field out (repeat for several), e.g. grid.strategy, resources.partition",
    )
    _submission_options(sub)

    sub = command(
        "events",
        cmd_events,
        "Show a run's course",
        "Each submission and resubmission with its job id, each state change with Slurm's state and reason, "
        "requeues, cancellation requests, and what the server found after a restart, oldest first.",
        ("scalelab events 7db83adafd",),
    )
    sub.add_argument("run", metavar="RUN")

    sub = command(
        "profiles",
        cmd_profiles,
        "List the cluster profiles runs can use, or show one",
        "Without NAME: each profile's container runtime and partitions with their limits, the defaults marked "
        "with *. With NAME: the profile's runtime and image, account, environment, partitions, and the sbatch "
        "options users may set. An experiment chooses one with resources.profile and resources.partition.",
        ("scalelab profiles", "scalelab profiles pyxis", "scalelab profiles --json"),
    )
    sub.add_argument("name", nargs="?", metavar="NAME", help="show this profile")
    sub.add_argument("--json", action="store_true", help="JSON, as the API returns it")

    sub = command(
        "export",
        cmd_export,
        "Print an experiment's comparison, one row per run",
        "Strategy, GPUs, mean epoch time, speed-up, efficiency, final loss and accuracy, peak memory.",
    )
    sub.add_argument("experiment", metavar="EXPERIMENT")
    form = sub.add_mutually_exclusive_group()
    form.add_argument("--csv", dest="format", action="store_const", const="csv", help="CSV with a header (default)")
    form.add_argument("--json", dest="format", action="store_const", const="json", help="JSON, as the API returns it")
    sub.set_defaults(format="csv")

    sub = command(
        "import",
        cmd_import,
        "Import logs of runs made outside scalelab as a new experiment",
        "Every file in LOGDIR becomes a finished run, its [METRIC] lines (JSON records, or the key=value lines "
        "course scripts print) its metrics; gpus=, world_size=, nodes= and strategy= keys give its spec. "
        "If any file cannot be read, each such file is named and nothing is imported.",
    )
    sub.add_argument("logdir", type=Path, metavar="LOGDIR")
    sub.add_argument("--name", help='the experiment\'s name (default: "imported from LOGDIR")')
    sub.add_argument("--glob", default="*", help="which files of LOGDIR to read (default: %(default)s)")
    sub.add_argument("-q", "--quiet", action="store_true", help="print only the experiment's id")
    return parser


def _fail(message: str) -> None:
    print(f"scalelab: error: {message}", file=sys.stderr)


def main(argv: list[str] | None = None, *, http: httpx.Client | None = None) -> int:
    """Run one command; `http` lets tests send its requests to an app in-process."""
    args = build_parser().parse_args(argv)
    try:
        server = connection(args, os.environ)
        timeout = getattr(args, "timeout", DEFAULT_TIMEOUT_S)
        with Client(server.url, server.token, timeout_s=timeout, http=http) as client:
            code: int = args.handler(client, args)
            return code
    except UsageError as exc:
        _fail(str(exc))
        return EXIT_USAGE
    except ClientError as exc:
        _fail(str(exc))
        return exit_code(exc)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`scalelab export ... | head`): nothing more to say, and nowhere to say it.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
