"""The command that brings in logs of runs made outside scalelab: import."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

from client.api import Client, Invalid
from client.command import EXIT_OK, Command, UsageError
from client.output import counts, print_table
from contract.limits import MAX_IMPORT_FILE_CHARS


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


def import_logs(client: Client, args: argparse.Namespace) -> int:
    files = read_logs(args.logdir, args.glob)
    name = args.name or f"imported from {args.logdir.resolve().name}"
    try:
        created = client.import_logs(name, files)
    except Invalid as exc:
        raise exc.with_hint("nothing was imported") from None
    if args.quiet:
        print(created.id)
        return EXIT_OK
    print(f'imported {len(files)} logs as experiment {created.id} "{created.name}" ({counts(created.states)})')
    headers = ["FILE", "RUN", "STATE", "STRATEGY", "GPUS", "EPOCHS", "S/EPOCH", "VAL LOSS"]
    rows = [
        [file, r.run_id, r.state, r.strategy, r.gpus, r.epochs_done, r.mean_epoch_time_s, r.final_val_loss]
        for (file, _), r in zip(files, client.compare(created.id).data, strict=True)
    ]
    print_table(headers, rows, flexible=0)
    return EXIT_OK


def _arguments(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("logdir", type=Path, metavar="LOGDIR")
    sub.add_argument("--name", help='the experiment\'s name (default: "imported from LOGDIR")')
    sub.add_argument("--glob", default="*", help="which files of LOGDIR to read (default: %(default)s)")
    sub.add_argument("-q", "--quiet", action="store_true", help="print only the experiment's id")


COMMANDS = (
    Command(
        "import",
        import_logs,
        "Import logs of runs made outside scalelab as a new experiment",
        "Every file in LOGDIR becomes a finished run, its [METRIC] lines (JSON records, or the key=value lines "
        "course scripts print) its metrics; gpus=, world_size=, nodes= and strategy= keys give its spec. "
        "If any file cannot be read, each such file is named and nothing is imported.",
        _arguments,
    ),
)
