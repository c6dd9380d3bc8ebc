"""The commands about experiments and their runs together: submit, clone, ls, watch, cancel, resubmit, rerun,
export."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from client import terminal
from client.api import Client, Invalid, NotFound, Unavailable
from client.command import EXIT_FAILED, EXIT_OK, Command, UsageError, positive
from client.inputs import assignment, change_key, clone_changes, read_experiment, rerun_body, spec_assignment
from client.output import (
    WAITING,
    counts,
    print_json,
    print_table,
    runs_table,
    settings_text,
    state_text,
    when,
    wrapped,
)
from client.progress import look, planned_epochs
from client.schemas import (
    CreatedView,
    FailuresView,
    PreviewView,
    RerunPreviewView,
    RunsView,
    RunView,
    SkippedView,
)
from contract.changes import apply_changes
from contract.states import FailureKind, RunState

SKIP_HINT = "--skip-invalid leaves out the combinations that cannot run and keeps the rest"


# ---- output ------------------------------------------------------------------------------------------------------


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _print_skipped(skipped: list[SkippedView]) -> None:
    if skipped:
        print(f"\nleft out {_plural(len(skipped), 'combination')} that cannot run:")
        for item in skipped:
            print(wrapped(f"  {item}", "    "))


def _print_preview(preview: PreviewView) -> None:
    specs = preview.settings()
    varying = [key for key in specs[0] if len({json.dumps(spec[key]) for spec in specs}) > 1]
    fixed = {key: value for key, value in specs[0].items() if key not in varying}
    print(f'experiment "{preview.name}": {preview.count} runs; nothing was submitted (--dry-run)')
    print(wrapped(f"every run: {settings_text(fixed)}", "  "))
    rows = [[position, *(spec[key] for key in varying)] for position, spec in enumerate(specs)]
    print_table(["#", *varying], rows)
    _print_skipped(preview.skipped)
    which = "the first run" if preview.index == 0 else f"run {preview.index}"
    print(f"\nbatch script of {which} (RUN_ID stands for the id it gets when submitted):\n")
    print(preview.script, end="")
    if preview.array_script is not None:
        print("\nit goes to Slurm as a task of this job array (one sbatch for all its runs):\n")
        print(preview.array_script, end="")
    elif preview.array_note is not None:
        print(f"\nit goes to Slurm as a job of its own: {preview.array_note}")


def _refused(runs: list[RunView]) -> int:
    """Name on stderr each run the scheduler refused; EXIT_FAILED if there was one."""
    refused = [run for run in runs if run.state is RunState.submit_failed]
    for run in refused:
        print(f"scalelab: run {run.id} was not submitted: {run.message}", file=sys.stderr)
    return EXIT_FAILED if refused else EXIT_OK


def _print_created(created: CreatedView, quiet: bool, origin: str = "") -> int:
    if quiet:
        print(created.id)
        for item in created.skipped:
            print(f"scalelab: left out {item}", file=sys.stderr)
    else:
        print(f'experiment {created.id} "{created.name}"{origin}: {created.run_count} runs ({counts(created.states)})')
        runs_table(created.runs)
        _print_skipped(created.skipped)
        print(f"\nfollow it with: scalelab watch {created.id}")
    return _refused(created.runs)


@contextlib.contextmanager
def _submission_hints(skipping: bool) -> Iterator[None]:
    """Errors of submitting an experiment, with what the command line offers for them. `skipping`: the request
    already leaves out what cannot run, so a problem of the grid is one --skip-invalid does not mend."""
    try:
        yield
    except Invalid as exc:
        if skipping or not exc.names_unrunnable():
            raise
        raise exc.with_hint(SKIP_HINT) from None
    except Unavailable as exc:
        # The server names the experiment it kept; without it, the user finds it with `scalelab ls`.
        command = f"scalelab resubmit {exc.experiment_id or 'EXPERIMENT'}"
        raise exc.with_hint(f"from the command line, later: {command}") from None


# ---- commands ----------------------------------------------------------------------------------------------------


def _check_script_option(args: argparse.Namespace) -> None:
    if args.script is not None and not args.dry_run:
        raise UsageError("--script goes with --dry-run: it chooses which run's batch script to print")


def submit(client: Client, args: argparse.Namespace) -> int:
    return submit_request(client, read_experiment(args.file), args)


def submit_request(client: Client, request: dict[str, Any], args: argparse.Namespace) -> int:
    """Preview (--dry-run) or submit an experiment request, printing what submit prints; the options are those
    of submission_options."""
    _check_script_option(args)
    if args.skip_invalid:
        request["on_invalid"] = "skip"
    with _submission_hints(request.get("on_invalid") == "skip"):
        if args.dry_run:
            _print_preview(client.preview(request, index=args.script or 0))
            return EXIT_OK
        created = client.submit(request)
    return _print_created(created, args.quiet)


def clone(client: Client, args: argparse.Namespace) -> int:
    _check_script_option(args)
    changes = clone_changes(args)
    with _submission_hints(changes.get("on_invalid") == "skip"):
        if args.dry_run:
            # The server validates the combined request as it would the clone's, naming the same fields.
            request = apply_changes(client.experiment(args.experiment).request, changes)
            _print_preview(client.preview(request, index=args.script or 0))
            return EXIT_OK
        created = client.clone(args.experiment, changes)
    return _print_created(created, args.quiet, origin=f" (a clone of {args.experiment})")


def ls(client: Client, args: argparse.Namespace) -> int:
    if args.experiment or args.runs or args.state:
        if args.experiment:
            client.experiment(args.experiment)  # an unknown id is an error, not an empty list
        runs = client.runs(experiment_id=args.experiment, states=args.state or (), limit=args.limit)
        runs_table(sorted(runs.data, key=lambda run: run.position) if args.experiment else runs.data)
        shown, count, what = len(runs.data), runs.count, "runs"
    else:
        experiments = client.experiments(limit=args.limit)
        rows = [
            [item.id, when(item.created_at), item.run_count, counts(item.states), item.name]
            for item in experiments.data
        ]
        print_table(["EXPERIMENT", "CREATED", "RUNS", "STATES", "NAME"], rows, flexible=4)
        shown, count, what = len(experiments.data), experiments.count, "experiments"
    if shown < count:
        print(f"({shown} of {count} {what}; --limit shows more)")
    return EXIT_OK


def _progress_line(run: RunView, epochs_done: int) -> str:
    epochs = planned_epochs(run.spec)
    # A completed run's message is a warning (a program that printed no metric line), a failed one's the reason.
    note = run.message if run.state.is_final else None
    parts = [
        run.id,
        f"{run.spec.get('strategy', '?'):<6}",
        f"{run.spec.get('gpus', '?'):>3} gpus",
        f"{state_text(run):<13}",
        # No bar without a total: an empty one would read as nothing done.
        f"{terminal.bar(epochs_done, epochs)}  {epochs_done}/{epochs} epochs"
        if epochs
        else f"{epochs_done} epochs (no total: pass it as the program's epochs parameter)",
    ]
    return "  ".join(parts) + (f"  {note}" if note else "")


def watch(client: Client, args: argparse.Namespace) -> int:
    experiment = client.experiment(args.experiment)
    print(f'experiment {experiment.id} "{experiment.name}": {experiment.run_count} runs')
    board = terminal.Board(sys.stdout)
    while True:
        progress = look(client, experiment.id)
        lines = [_progress_line(run, progress.done.get(run.id, 0)) for run in progress.runs]
        board.show([*lines, progress.totals()])
        if progress.settled:
            break
        time.sleep(args.interval)
    print(f"all runs ended: {counts(progress.states())}")
    _print_failures(client.failures(experiment.id))
    return EXIT_OK if progress.completed else EXIT_FAILED


def _print_failures(failures: FailuresView) -> None:
    """Each failure kind of the experiment's runs, where in the grid, and what to do."""
    for group in failures.kinds:
        print(f"{group.summary}. {group.advice}")
    if failures.unclassified:
        print(f"{_plural(failures.unclassified, 'failed run')} not classified yet: their output is still being read")


def _on_run_or_experiment(
    target: str,
    on_run: Callable[[str], RunView],
    on_experiment: Callable[[str], RunsView],
    only: str | None = None,
) -> list[RunView]:
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


def cancel(client: Client, args: argparse.Namespace) -> int:
    runs = _on_run_or_experiment(args.target, client.cancel_run, client.cancel_experiment)
    for run in runs:
        if run.state is RunState.cancelled:
            print(f"run {run.id}: cancelled (it had not been submitted)")
        else:
            print(f"run {run.id}: job {run.job_id} asked to stop; it shows as cancelled once {run.scheduler} ends it")
    return EXIT_OK


def resubmit(client: Client, args: argparse.Namespace) -> int:
    runs = _on_run_or_experiment(args.target, client.resubmit_run, client.resubmit_experiment, args.only)
    for run in runs:
        if run.waiting:
            print(f"run {run.id}: resubmitted, {run.message or WAITING}")
        elif run.state is not RunState.submit_failed:
            print(f"run {run.id}: submitted again as job {run.job_id} (attempt {run.attempt})")
    print(f"follow it with: scalelab watch {runs[0].experiment_id}")
    return _refused(runs)


def _print_rerun_preview(preview: RerunPreviewView) -> None:
    print(f"{_plural(preview.count, 'failed run')} would run again; nothing was submitted (--dry-run)")
    rows = [
        [item.rerun_of, item.state, item.failure_kind or "-", settings_text(item.changed) or "nothing"]
        for item in preview.data
    ]
    print_table(["RUN", "STATE", "KIND", "CHANGED"], rows, flexible=3)


def rerun(client: Client, args: argparse.Namespace) -> int:
    if args.dry_run:
        _print_rerun_preview(client.preview_reruns(args.experiment, rerun_body(args)))
        return EXIT_OK
    runs = client.rerun_failed(args.experiment, rerun_body(args)).data
    for run in runs:
        if args.quiet:
            print(run.id)
        elif run.waiting:
            print(f"run {run.id}: a rerun of {run.rerun_of}, {run.message or WAITING}")
        elif run.state is not RunState.submit_failed:
            print(f"run {run.id}: a rerun of {run.rerun_of}, submitted as job {run.job_id}")
    if not args.quiet:
        print(f"follow it with: scalelab watch {args.experiment}")
    return _refused(runs)


def export(client: Client, args: argparse.Namespace) -> int:
    if args.format == "json":
        print_json(client.compare_json(args.experiment))
    else:
        sys.stdout.write(client.compare_csv(args.experiment))
    return EXIT_OK


# ---- arguments ---------------------------------------------------------------------------------------------------


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


def submission_options(sub: argparse.ArgumentParser) -> None:
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


def _submit_arguments(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("file", type=Path, help="the experiment: TOML, or JSON if its name ends in .json")
    submission_options(sub)


def _clone_arguments(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("experiment", metavar="EXPERIMENT", help="the experiment to start from")
    sub.add_argument("--name", help="the new experiment's name (default: the earlier one's)")
    sub.add_argument(
        "--set",
        type=assignment,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a field (repeat for several), e.g. base.epochs=3, grid.gpus=1,2,4, resources.time_limit=00:20:00, "
        "repeats=3, isolation=shared, scaling=weak",
    )
    sub.add_argument(
        "--unset",
        type=change_key,
        action="append",
        default=[],
        metavar="KEY",
        help="take a field out (repeat for several), e.g. grid.strategy, resources.partition",
    )
    submission_options(sub)


def _ls_arguments(sub: argparse.ArgumentParser) -> None:
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


def _watch_arguments(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("experiment", metavar="EXPERIMENT")
    sub.add_argument("--interval", type=positive, default=2.0, help="seconds between updates (default: %(default)s)")


def _cancel_arguments(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("target", metavar="RUN|EXPERIMENT")


def _resubmit_arguments(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("target", metavar="ID", help="a run's id or an experiment's id")
    which = sub.add_mutually_exclusive_group()
    which.add_argument("--run", dest="only", action="store_const", const="run", help="ID is a run")
    which.add_argument(
        "--experiment", dest="only", action="store_const", const="experiment", help="ID is an experiment"
    )


def _rerun_arguments(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("experiment", metavar="EXPERIMENT", help="the experiment whose failed runs to rerun")
    sub.add_argument(
        "--failed",
        action="store_true",
        required=True,
        help="rerun the runs that failed: failed, out_of_memory, timeout, node_fail (required: it says what runs)",
    )
    sub.add_argument(
        "--kind",
        action="append",
        default=[],
        choices=[str(kind) for kind in FailureKind],
        metavar="KIND",
        help="only runs that failed with this kind (repeat for several): " + ", ".join(FailureKind),
    )
    sub.add_argument("--run", action="append", default=[], metavar="RUN", help="only this run (repeat for several)")
    sub.add_argument(
        "--set",
        type=spec_assignment,
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="change a spec field in every rerun (repeat for several), e.g. activation_checkpointing=true, "
        "global_batch_size=32, precision=bf16; FIELD=null resets it to its default",
    )
    sub.add_argument(
        "--dry-run",
        action="store_true",
        help="print which failed runs would run again and what changes; submit nothing",
    )
    sub.add_argument("-q", "--quiet", action="store_true", help="print only the new runs' ids")


def _export_arguments(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("experiment", metavar="EXPERIMENT")
    form = sub.add_mutually_exclusive_group()
    form.add_argument("--csv", dest="format", action="store_const", const="csv", help="CSV with a header (default)")
    form.add_argument("--json", dest="format", action="store_const", const="json", help="JSON, as the API returns it")
    sub.set_defaults(format="csv")


COMMANDS = (
    Command(
        "submit",
        submit,
        "Submit an experiment from a TOML or JSON file",
        "The file holds what POST /api/experiments takes: name, base, grid, resources and on_invalid "
        "(see examples/sweep.toml). Prints the experiment and its runs, and the grid combinations left out.",
        _submit_arguments,
        (
            "scalelab submit examples/sweep.toml --dry-run",
            "scalelab submit examples/sweep.toml --dry-run --script 1   # the second run's batch script",
            "scalelab submit sweep.toml --skip-invalid",
            'EXP=$(scalelab submit sweep.toml -q) && scalelab watch "$EXP"',
        ),
    ),
    Command(
        "ls",
        ls,
        "List experiments, or runs",
        "Without arguments: the experiments, newest first. With EXPERIMENT, --runs or --state: runs.",
        _ls_arguments,
    ),
    Command(
        "watch",
        watch,
        "Follow an experiment's runs until all have ended",
        "A line per run with its state and a progress bar of its epochs. Exits 0 if every run completed, 1 if not.",
        _watch_arguments,
    ),
    Command(
        "cancel",
        cancel,
        "Cancel a run, or every unfinished run of an experiment",
        "Jobs are cancelled through the scheduler and show as cancelled once it has stopped them. "
        "A run that has already ended cannot be cancelled (exit 1).",
        _cancel_arguments,
    ),
    Command(
        "resubmit",
        resubmit,
        "Submit again a run, or every run of an experiment, that ended without completing",
        "Failed, timed-out, cancelled, preempted and never-submitted runs run again with the same spec and batch "
        "script, resuming from their last checkpoint where they have one; a run of an experiment with a "
        "concurrency limit waits for a slot. ID is looked up as a run first, then as an experiment (as cancel "
        "does); --run or --experiment looks only there. A completed run is not resubmitted: clone its "
        "experiment. Nothing to resubmit, or a run still live, is exit 1, as is a scheduler that cannot be "
        "reached (the runs stay submit_failed: try again later).",
        _resubmit_arguments,
        (
            "scalelab resubmit 3f2a9c01de             # a run, or every unfinished run of an experiment",
            "scalelab resubmit --experiment 3f2a9c01de",
            "scalelab resubmit --run 7db83adafd && scalelab events 7db83adafd",
        ),
    ),
    Command(
        "clone",
        clone,
        "Submit a new experiment made from an earlier one with some changes",
        "The earlier experiment's request, with each --set and --unset laid over it, is validated and submitted "
        "like a new one. KEY is base.FIELD, grid.FIELD or resources.FIELD, or for --set one of the whole request's "
        "settings repeats, isolation, scaling, target, on_failure and on_hang. A VALUE that reads as JSON is taken "
        "as JSON (3, 0.1, true, null, a list or table), anything else as text (00:20:00, bf16); for grid.FIELD "
        "it is a JSON list or a comma-separated list (1,2,4). --unset gives a base or resources field its "
        "default, and stops sweeping a grid field. Prints what submit prints.",
        _clone_arguments,
        (
            "scalelab clone 3f2a9c01de --set base.epochs=3 --set grid.gpus=1,2,4,8",
            "scalelab clone 3f2a9c01de --name 'fsdp only' --set grid.strategy=fsdp --dry-run",
            "scalelab clone 3f2a9c01de --set resources.time_limit=00:20:00 --unset grid.precision",
            'scalelab clone 3f2a9c01de --set resources.sbatch_options=\'{"mem": "4G"}\' --skip-invalid',
            'scalelab clone 3f2a9c01de --set target=\'{"metric": "val_loss", "at_most": 0.3}\' '
            "--set grid.lr_scaling=linear,sqrt",
        ),
    ),
    Command(
        "rerun",
        rerun,
        "Rerun an experiment's failed runs, of some failure kinds, with changes",
        "Each run that failed (failed, out_of_memory, timeout or node_fail; with --kind, only of those failure "
        "kinds; with --run, only those runs) gets a new run in the same experiment, its spec with each --set "
        "laid over it, linked to the original (rerun_of); the original stays as it ended. A VALUE that reads as "
        "JSON is taken as JSON (32, true, null), anything else as text (bf16). A failed run rerun already is "
        "rerun again only when --run names it. All the reruns are submitted, or none: a change that makes one "
        "invalid is exit 2, naming the field; no failed run to rerun is exit 1, saying which failed runs there "
        "are. Runs that never ran or were cancelled are resubmitted instead (scalelab resubmit).",
        _rerun_arguments,
        (
            "scalelab rerun 3f2a9c01de --failed --dry-run",
            "scalelab rerun 3f2a9c01de --failed --kind out_of_memory --set activation_checkpointing=true",
            "scalelab rerun 3f2a9c01de --failed --kind out_of_memory --set global_batch_size=32 --set precision=bf16",
            "scalelab rerun 3f2a9c01de --failed --run 7db83adafd --set epochs=2 && scalelab watch 3f2a9c01de",
        ),
    ),
    Command(
        "export",
        export,
        "Print an experiment's comparison, one row per run",
        "Strategy, GPUs, mean epoch time, speed-up, efficiency, final loss and accuracy, peak memory.",
        _export_arguments,
    ),
)
