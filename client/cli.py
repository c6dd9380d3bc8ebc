"""`scalelab`: the command line on the login node, over a running server's REST API.

This module wires the commands (one module per group: experiments, runs, imports, profiles, fabric, plans, reports,
cards...) into one
parser, finds the server and token, and turns errors into the exit codes scripts rely on.
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
from collections.abc import Mapping

import httpx

from client import (
    account,
    cards,
    experiments,
    fabric,
    imports,
    notify,
    plans,
    profiles,
    programs,
    references,
    reports,
    runs,
    sharing,
    terminal,
)
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
)
from client.command import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_TOKEN,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    Command,
    UsageError,
    connection_options,
)
from client.config import Connection, config_path, resolve

# The exit codes are named here too: scripts and tests read them as cli.EXIT_*.
__all__ = [
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_NOT_FOUND",
    "EXIT_OK",
    "EXIT_TOKEN",
    "EXIT_UNREACHABLE",
    "EXIT_USAGE",
    "Connection",
    "build_parser",
    "config_path",
    "connection",
    "exit_code",
    "main",
]

# The order `scalelab --help` lists the commands in: as a study meets them, not as the modules group them.
HELP_ORDER = (
    "submit", "program", "ls", "show", "logs", "watch", "cancel", "resubmit", "rerun", "clone", "share", "events",
    "profiles", "fabric", "plan", "scaling", "export", "report", "reference", "regression", "card", "notify", "import",
    "login",
)  # fmt: skip
COMMANDS = {
    command.name: command
    for group in (
        account,
        experiments,
        programs,
        runs,
        imports,
        profiles,
        fabric,
        plans,
        reports,
        sharing,
        references,
        cards,
        notify,
    )
    for command in group.COMMANDS
}

EPILOG = f"""\
connection:
  the server's URL and token come from --url and --token, else SCALELAB_URL and SCALELAB_TOKEN,
  else "url" and "token" in $XDG_CONFIG_HOME/scalelab/config.toml (~/.config/scalelab/config.toml),
  else {DEFAULT_URL} without a token. The token is sent as "Authorization: Bearer TOKEN".

exit codes:
  {EXIT_OK}  done (watch: every run completed)
  {EXIT_FAILED}  the operation failed: a watched run did not complete, the scheduler refused a run or
     cannot be reached now (HTTP 503: the message says when to try again), the run had already
     ended or has nothing to resubmit or rerun (HTTP 409), or the server had an error
  {EXIT_USAGE}  usage error, or the server found the input invalid (HTTP 422)
  {EXIT_UNREACHABLE}  the server cannot be reached
  {EXIT_TOKEN}  the server rejected the token (HTTP 401 or 403)
  {EXIT_NOT_FOUND}  no such experiment or run (HTTP 404)
"""


# ---- connection --------------------------------------------------------------------------------------------------


def connection(args: argparse.Namespace, environ: Mapping[str, str]) -> Connection:
    """Flags, then environment, then the config file, then the default (client.config.resolve, which the Python
    API's connect uses too)."""
    return resolve(getattr(args, "url", None), getattr(args, "token", None), environ)


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


# ---- the parser --------------------------------------------------------------------------------------------------


def _add(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], command: Command, common: argparse.ArgumentParser
) -> None:
    shown = "".join(f"  {example}\n" for example in command.examples)
    sub = commands.add_parser(
        command.name,
        help=command.summary,
        # Raw text keeps the epilog's layout, so the description is wrapped here, as argparse would.
        description=textwrap.fill(
            f"{command.summary}. {command.description}", min(terminal.columns(), 100) - 2, break_on_hyphens=False
        ),
        epilog=f"examples:\n{shown}\n{EPILOG}" if command.examples else EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[common],
    )
    command.arguments(sub)
    sub.set_defaults(handler=command.handler)


def build_parser() -> argparse.ArgumentParser:
    # Connection options work before or after the command; SUPPRESS keeps a subcommand from resetting them.
    common = connection_options()
    parser = argparse.ArgumentParser(
        prog="scalelab",
        description="Submit, follow, compare and import distributed training experiments on a scalelab server.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[common],
    )
    commands = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)
    for name in HELP_ORDER:
        _add(commands, COMMANDS[name], common)
    return parser


def _fail(message: str) -> None:
    print(f"scalelab: error: {message}", file=sys.stderr)


def main(argv: list[str] | None = None, *, http: httpx.Client | None = None) -> int:
    """Run one command; `http` lets tests send its requests to an app in-process."""
    args = build_parser().parse_args(argv)
    # What the server sends (a record's text, an error's detail) is printed as text only, errors included.
    with terminal.printable_output():
        return _run(args, http)


def _run(args: argparse.Namespace, http: httpx.Client | None) -> int:
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
