"""Request bodies from what a user gives: an experiment file for submit, clone's --set and --unset, and what
rerun reruns."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import tomllib
from pathlib import Path
from typing import Any

from client.command import UsageError
from contract.changes import SETTINGS

# The sections of an experiment request that `clone --set` and `--unset` change, field by field.
CHANGE_SECTIONS = ("base", "grid", "resources")
# Whole-request settings --set replaces (on_invalid has its own flag, --skip-invalid); the section "" holds them.
CHANGE_SETTINGS = tuple(name for name in SETTINGS if name != "on_invalid")


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


def json_or_text(text: str) -> Any:
    """A value typed on the command line: JSON if it reads as JSON (3, 0.1, true, "3"), else the text itself."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def setting_key(text: str) -> tuple[str, str]:
    """An argument type: KEY of --set's KEY=VALUE, as (section, field); a whole-request setting has section ""."""
    return ("", text) if text in CHANGE_SETTINGS else change_key(text)


def change_key(text: str) -> tuple[str, str]:
    """An argument type: KEY of --unset, as (section, field)."""
    if text in CHANGE_SETTINGS:
        raise argparse.ArgumentTypeError(f"{text!r} cannot be unset: --set {text}=VALUE replaces it")
    section, dot, field = text.partition(".")
    if section in CHANGE_SECTIONS and "." in field:
        raise argparse.ArgumentTypeError(
            f"{text!r}: a key has one dot; resources.sbatch_options takes its whole table as JSON, "
            """e.g. resources.sbatch_options='{"mem": "4G"}'"""
        )
    if section not in CHANGE_SECTIONS or not dot or not re.fullmatch(r"[a-z_]{1,64}", field):
        raise argparse.ArgumentTypeError(
            f"{text!r}: a key is base.FIELD, grid.FIELD or resources.FIELD (--set also takes "
            f"{', '.join(CHANGE_SETTINGS)})"
        )
    return section, field


def assignment(text: str) -> tuple[str, str, Any]:
    """KEY=VALUE: the value as JSON if it reads as JSON, else as text; for grid, a JSON list or a comma list."""
    key, equals, value = text.partition("=")
    if not equals:
        raise argparse.ArgumentTypeError(f"{text!r}: give KEY=VALUE, e.g. base.epochs=3")
    section, field = setting_key(key)
    if section != "grid":
        return section, field, json_or_text(value)  # a setting's too: repeats=3 reads as 3
    values = json_or_text(value)
    if not isinstance(values, list):
        values = listed(value, text)
    return section, field, values


def listed(values: str, text: str) -> list[Any]:
    """Comma-separated values typed on the command line, each read by json_or_text; `text` is the whole argument,
    for the error."""
    items = [item.strip() for item in values.split(",")]
    if not all(items):
        raise argparse.ArgumentTypeError(f"{text!r}: an empty value in the list")
    return [json_or_text(item) for item in items]


def clone_changes(args: argparse.Namespace) -> dict[str, Any]:
    """The body of POST /api/experiments/{id}/clone: the API's ExperimentChanges."""
    changes: dict[str, Any] = {}
    unsets = [(section, field, None) for section, field in args.unset]
    for section, field, value in [*args.set, *unsets]:
        if not section:
            changes[field] = value
            continue
        fields = changes.setdefault(section, {})
        if field in fields:
            raise UsageError(f"{section}.{field} is given more than once")
        fields[field] = value
    if args.name is not None:
        changes["name"] = args.name
    if args.skip_invalid:
        changes["on_invalid"] = "skip"
    return changes


def spec_assignment(text: str) -> tuple[str, Any]:
    """An argument type: rerun's FIELD=VALUE, a run spec's field (no section: each rerun's spec is one run's) and
    its value, read as JSON if it reads as JSON."""
    field, equals, value = text.partition("=")
    if not equals:
        raise argparse.ArgumentTypeError(f"{text!r}: give FIELD=VALUE, e.g. activation_checkpointing=true")
    if not re.fullmatch(r"[a-z_]{1,64}", field):
        raise argparse.ArgumentTypeError(
            f"{field!r}: FIELD is a run spec's field, e.g. global_batch_size or precision (a rerun changes each "
            "run's own spec: there is no base. or grid. here)"
        )
    return field, json_or_text(value)


def rerun_body(args: argparse.Namespace) -> dict[str, Any]:
    """The body of POST /api/experiments/{id}/rerun: the API's FailedRerun."""
    changes: dict[str, Any] = {}
    for field, value in args.set:
        if field in changes:
            raise UsageError(f"{field} is given more than once")
        changes[field] = value
    body: dict[str, Any] = {"failed": True, "set": changes}
    if args.kind:
        body["kinds"] = list(dict.fromkeys(args.kind))
    if args.run:
        body["run_ids"] = list(dict.fromkeys(args.run))
    return body
