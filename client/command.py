"""What every command module shares: the exit codes, the usage error, and how a command is declared.

Apart from client/cli.py, so that the command modules can use it while cli.py imports them to build the parser.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

from client.api import DEFAULT_TIMEOUT_S, DEFAULT_URL, Client

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
EXIT_TOKEN = 4
EXIT_NOT_FOUND = 5
EXIT_INTERRUPTED = 130


class UsageError(Exception):
    """The command line, a file it names, or the config file is wrong; the message says how."""


Handler = Callable[[Client, argparse.Namespace], int]


@dataclass(frozen=True)
class Command:
    """One `scalelab COMMAND`: what --help says of it, its arguments, and what runs it."""

    name: str
    handler: Handler
    summary: str
    description: str
    arguments: Callable[[argparse.ArgumentParser], None]
    examples: tuple[str, ...] = ()


def positive(text: str) -> float:
    """An argument type: seconds to wait, above 0."""
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be above 0, got {text}")
    return value


def connection_options() -> argparse.ArgumentParser:
    """The options every command takes, before or after its name (and a command's actions' too): a parent parser.
    SUPPRESS keeps a subcommand from resetting one given before it."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", default=argparse.SUPPRESS, help=f"the server (default: {DEFAULT_URL})")
    common.add_argument("--token", default=argparse.SUPPRESS, help="API token, sent as a bearer token")
    wait = f"seconds to wait for an answer (default: {DEFAULT_TIMEOUT_S:g})"
    common.add_argument("--timeout", type=positive, default=argparse.SUPPRESS, help=wait)
    return common
