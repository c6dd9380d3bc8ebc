"""The command that signs the command line in: `scalelab login` trades a name and password for an API token."""

from __future__ import annotations

import argparse
import getpass
import os
import sys

from client.api import Client
from client.command import EXIT_OK, Command, UsageError
from client.config import config_path, read_config, write_config


def _password(args: argparse.Namespace) -> str:
    if args.password_stdin:
        password = sys.stdin.readline().rstrip("\n")
    elif sys.stdin.isatty():
        password = getpass.getpass(f"password of {args.user} on the login node: ")
    else:
        raise UsageError("no terminal to ask for the password on: pipe it in with --password-stdin")
    if not password:
        raise UsageError("an empty password signs nobody in")
    return password


# How long the token `scalelab login` keeps lasts unless told otherwise: a forgotten laptop's token ends by itself.
DEFAULT_TOKEN_DAYS = 30


def login(client: Client, args: argparse.Namespace) -> int:
    if args.days is not None and args.days <= 0:
        raise UsageError("--days must be more than 0 (--no-expiry: a token that lasts until revoked)")
    lifetime_days = None if args.no_expiry else (args.days or DEFAULT_TOKEN_DAYS)
    made = client.create_token(args.user, _password(args), lifetime_days)
    if args.print:
        print(made.token)
        return EXIT_OK
    path = config_path(os.environ)
    write_config(path, {**read_config(path), "url": client.url, "token": made.token})
    until = f"until {made.expires_at:%Y-%m-%d %H:%M} UTC" if made.expires_at else "until revoked"
    print(f"signed in to {client.url} as {args.user}: token {made.id} ({until}) saved in {path} (readable by you only)")
    return EXIT_OK


def _login_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--user", default=getpass.getuser(), help="the user name to sign in as (default: yours, %(default)s)"
    )
    parser.add_argument(
        "--password-stdin", action="store_true", help="read the password from the first line of stdin (for scripts)"
    )
    parser.add_argument("--print", action="store_true", help="print the token instead of saving it in the config file")
    lifetime = parser.add_mutually_exclusive_group()
    lifetime.add_argument(
        "--days", type=float, metavar="N", help=f"the token ends after N days (default: {DEFAULT_TOKEN_DAYS})"
    )
    lifetime.add_argument("--no-expiry", action="store_true", help="the token lasts until it is revoked")


COMMANDS = (
    Command(
        "login",
        login,
        "Sign in with your user name and password and keep an API token for the next commands",
        "The server checks the password as its sign-in page does (on a shared instance: your cluster account's, "
        "through PAM) and makes you a new API token, saved with the server's URL in the config file, mode 0600. "
        f"The token ends after {DEFAULT_TOKEN_DAYS} days unless --days or --no-expiry says otherwise; revoke it "
        "sooner with DELETE /api/tokens/ID.",
        _login_arguments,
        ("scalelab --url http://login1:8000 login", "scalelab login --user alice --password-stdin < pw.txt"),
    ),
)
