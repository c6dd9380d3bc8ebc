"""The commands about one run: show, logs, events."""

from __future__ import annotations

import argparse
import sys
import time

from client.api import Client
from client.command import EXIT_OK, Command, positive
from client.output import WAITING, print_fields, print_table, settings_text, when
from client.schemas import spec_settings


def _label(key: str) -> str:
    """A record's field name for people: epoch_time_s -> epoch time (s), samples_per_s -> samples/s."""
    key = key.replace("_per_", "/")
    return key.removesuffix("_s").replace("_", " ") + " (s)" if key.endswith("_s") else key.replace("_", " ")


def show(client: Client, args: argparse.Namespace) -> int:
    run = client.run(args.run)
    count = client.epochs(run.id, limit=1).count
    last = client.epochs(run.id, skip=count - 1, limit=1).data if count else []
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
        ("spec", settings_text(spec_settings(run.spec))),
        ("directory", run.run_dir),
        ("created", when(run.created_at)),
        ("started", run.started_at and when(run.started_at)),
        ("ended", run.ended_at and when(run.ended_at)),
    ]
    if run.parse_errors:
        fields.append(("unreadable metric lines", run.parse_errors))
        if run.first_parse_error:
            fields.append(("first unreadable line", run.first_parse_error))
    if run.ingest_stopped:
        fields.append(("reading stopped", run.ingest_stopped))
    if last:
        record = last[0].model_dump(exclude_none=True, exclude={"v", "kind"})
        epochs = spec_settings(run.spec).get("epochs")  # a program plans none
        fields.append(("last epoch", f"{record['epoch']} of {epochs}" if epochs else record["epoch"]))
        fields += [(_label(key), value) for key, value in record.items() if key != "epoch"]
    else:
        fields.append(("last epoch", "none yet"))
    print_fields(fields)
    return EXIT_OK


def logs(client: Client, args: argparse.Namespace) -> int:
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


def events(client: Client, args: argparse.Namespace) -> int:
    found = client.events(args.run).data
    if not found:
        print(f"no events recorded for run {args.run}")
        return EXIT_OK
    headers = ["TIME", "EVENT", "JOB", "STATE", "SLURM STATE", "DETAIL"]
    rows = [
        [when(event.at, seconds=True), event.kind, event.job_id, event.state, event.scheduler_state, event.detail]
        for event in found
    ]
    print_table(headers, rows, flexible=len(headers) - 1)
    return EXIT_OK


def _one_run(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("run", metavar="RUN")


def _logs_arguments(sub: argparse.ArgumentParser) -> None:
    _one_run(sub)
    sub.add_argument("-f", "--follow", action="store_true", help="keep printing new output until the run ends")
    sub.add_argument("--interval", type=positive, default=1.0, help="seconds between polls (default: %(default)s)")


COMMANDS = (
    Command(
        "show",
        show,
        "Show one run",
        "Its state, the scheduler's state and reason, its spec and last metrics.",
        _one_run,
    ),
    Command("logs", logs, "Print a run's output", "The job's output.log as the server reads it.", _logs_arguments),
    Command(
        "events",
        events,
        "Show a run's course",
        "Each submission and resubmission with its job id, each state change with Slurm's state and reason, "
        "requeues, cancellation requests, and what the server found after a restart, oldest first.",
        _one_run,
        ("scalelab events 7db83adafd",),
    ),
)
