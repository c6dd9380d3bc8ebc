"""What every command module shares: the exit codes, the usage error, and how a command is declared.

Apart from client/cli.py, so that the command modules can use it while cli.py imports them to build the parser.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

from client.api import Client

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
