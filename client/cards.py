"""The commands about scaling cards: card export (an experiment as one file that proves its own figures), card
verify (the server recomputes every figure from the card's records) and card import (a card as a read-only
experiment here)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from client.api import Client, Invalid
from client.command import EXIT_FAILED, EXIT_OK, Command, UsageError, connection_options
from client.output import counts, wrapped
from contract.card import ScalingCard, hash_problem


def default_file(experiment: str) -> str:
    """The name the server gives the file, so that a browser's download and the command agree."""
    return f"scalelab-{experiment}-card.json"


def export(client: Client, args: argparse.Namespace) -> int:
    # Asked for before the file is opened: a 404 or a 409 leaves no empty file behind.
    text = client.card_text(args.experiment)
    target = args.output or default_file(args.experiment)
    if target == "-":
        sys.stdout.write(text)
        return EXIT_OK
    path = Path(target)
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror}") from None
    card = json.loads(text)
    print(f"wrote {path} ({len(text.encode()) / 1024:.0f} kB, {len(card['runs'])} runs, {card['content_hash']})")
    return EXIT_OK


def read_card(path: Path) -> tuple[dict[str, Any], ScalingCard]:
    """The file as JSON and as a card, checked here as the server checks its shape; UsageError naming the field."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path} is not UTF-8 text: no scaling card") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path}: not JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})") from None
    except RecursionError:
        raise UsageError(f"{path}: nested too deep to be a scaling card") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: not a scaling card (a JSON object)")
    try:
        return data, ScalingCard.model_validate(data)
    except ValidationError as exc:
        named = "; ".join(f"{_path(error['loc'])}: {error['msg']}" for error in exc.errors()[:5])
        raise UsageError(f"{path} is no scaling card: {named}") from None


def _path(loc: tuple[str | int, ...]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def verify(client: Client, args: argparse.Namespace) -> int:
    data, card = read_card(args.file)
    if args.offline:
        # The figures are recomputed by the server's code only: offline, the shape and the hash are what can be told.
        wrong = hash_problem(card)
        if wrong is not None:
            print(wrapped(f"NOT VERIFIED content_hash: {wrong}", "  "))
            return EXIT_FAILED
        print(f"{args.file}: shape and content hash hold ({card.content_hash}); its figures were not recomputed "
              "(offline): run without --offline to have a server recompute them")  # fmt: skip
        return EXIT_OK
    verdict = client.verify_card(data)
    if verdict.verified:
        print(
            f"verified: {verdict.runs} runs, {verdict.records} records; every figure is what its records give "
            f"({verdict.content_hash})"
        )
        return EXIT_OK
    print(f"NOT VERIFIED: {len(verdict.problems)} problems")
    for problem in verdict.problems:
        print(wrapped(f"{problem.field}: {problem.message}", "  "))
    return EXIT_FAILED


def import_card(client: Client, args: argparse.Namespace) -> int:
    data, _ = read_card(args.file)
    try:
        created = client.import_card(data)
    except Invalid as exc:
        raise exc.with_hint("nothing was imported") from None
    if args.quiet:
        print(created.id)
        return EXIT_OK
    origin = created.card
    where = (origin.instance or origin.url or "another instance") if origin else "another instance"
    original = origin.original_id if origin else "?"
    print(
        f'imported the card as experiment {created.id} "{created.name}" ({counts(created.states)}): experiment '
        f"{original} of {where}, verified; read-only here"
    )
    return EXIT_OK


_ACTIONS = {"export": export, "verify": verify, "import": import_card}


def card(client: Client, args: argparse.Namespace) -> int:
    return _ACTIONS[args.card_action](client, args)


def _arguments(sub: argparse.ArgumentParser) -> None:
    actions = sub.add_subparsers(title="actions", dest="card_action", metavar="ACTION", required=True)
    exporting = actions.add_parser(
        "export", help="save an experiment's card", description=EXPORT, parents=[connection_options()]
    )
    exporting.add_argument("experiment", metavar="EXPERIMENT")
    exporting.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="where to write the card; - writes it to standard output (default: scalelab-EXPERIMENT-card.json)",
    )
    verifying = actions.add_parser(
        "verify", help="have the server recompute a card's figures", description=VERIFY, parents=[connection_options()]
    )
    verifying.add_argument("file", type=Path, metavar="FILE")
    verifying.add_argument(
        "--offline", action="store_true", help="check only the card's shape and content hash, without a server"
    )
    importing = actions.add_parser(
        "import", help="bring a card in as a read-only experiment", description=IMPORT, parents=[connection_options()]
    )
    importing.add_argument("file", type=Path, metavar="FILE")
    importing.add_argument("-q", "--quiet", action="store_true", help="print only the new experiment's id")


EXPORT = (
    "Save an experiment's scaling card: one JSON file with its request, every run's batch script, provenance "
    "(image and digest, versions, code, nodes and hardware), the raw records every figure comes from, the figures "
    "(points, intervals, speed-ups, fits, flags, recommendation) and a content hash. Every run must have ended."
)
VERIFY = (
    "Send a card to the server, which reads its records back as it reads a run's output and recomputes every "
    "figure with its own code; exit 1 naming each field that is not what the records give (an edited figure, a "
    "removed record, a missing provenance field, a changed hash). --offline checks the shape and hash only."
)
IMPORT = (
    "Verify a card, then bring it in as a new experiment of yours: read-only (it cannot be cancelled, resubmitted "
    "or rerun), marked with where it came from, its figures the card's. A card that does not verify is refused."
)

COMMANDS = (
    Command(
        "card",
        card,
        "Export, verify or import a scaling card: one file that proves its own figures",
        f"export: {EXPORT} verify: {VERIFY} import: {IMPORT}",
        _arguments,
        (
            "scalelab card export 0a1b2c3d4e -o canary.json",
            "scalelab card verify canary.json",
            "scalelab card import canary.json",
        ),
    ),
)
