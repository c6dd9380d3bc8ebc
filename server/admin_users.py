"""`python -m server users ...`: the operator's commands for accounts, run on the server's own database."""

from __future__ import annotations

import argparse
import getpass
import sys
from datetime import timedelta

from sqlmodel import Session

from server.config import get_settings
from server.db import init_db, make_engine
from server.models import User, utcnow
from server.services import signin_throttle, users

_QUOTA_FLAGS = (
    ("--max-concurrent-runs", "max_concurrent_runs", "runs not yet ended, at most"),
    ("--max-gpus-in-use", "max_gpus_in_use", "GPUs of runs not yet ended, at most"),
    ("--max-runs-per-day", "max_runs_per_day", "runs created in any 24 hours, at most"),
)


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "users",
        help="add, list, change and revoke users and their API tokens",
        description="Accounts of this server, in its database (SCALELAB_DATABASE_URL). Tokens are printed once; "
        "only their hashes are kept.",
    )
    commands = parser.add_subparsers(dest="users_command", required=True, metavar="COMMAND")
    add = commands.add_parser("add", help="a new user, with a first API token (printed once)")
    add.add_argument("name", help="lowercase letters, digits, _ . - (the user's Unix name is a good choice)")
    add.add_argument("--admin", action="store_true", help="may cancel, delete and resubmit anyone's runs")
    _common_options(add)
    change = commands.add_parser(
        "set", help="change a user's password (which ends their tokens and sessions), account, admin role or quotas"
    )
    change.add_argument("name")
    change.add_argument("--admin", choices=["yes", "no"], help="give or take away the admin role")
    _common_options(change)
    commands.add_parser("list", help="every user with role, account and quotas")
    revoke = commands.add_parser("revoke", help="end a user's tokens and sessions now; their runs stay")
    revoke.add_argument("name")
    token = commands.add_parser("token", help="another API token for a user (printed once)")
    token.add_argument("name")
    token.add_argument("--days", type=float, metavar="N", help="the token ends after N days (default: when revoked)")
    tokens = commands.add_parser("tokens", help="a user's API tokens: made, last used, expiry, maker, revoked")
    tokens.add_argument("name")
    unlock = commands.add_parser(
        "unlock", help="let a user name sign in again now, after too many failed passwords (see SCALELAB_SIGNIN_*)"
    )
    unlock.add_argument("name")


def _common_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--password", action="store_true", help="set a password for the web sign-in (asked for, or read from stdin)"
    )
    parser.add_argument("--slurm-account", help="sbatch --account of this user's runs")
    for flag, _, text in _QUOTA_FLAGS:
        parser.add_argument(flag, type=int, metavar="N", help=f"{text} (-1: no limit of the user's own)")


def _password() -> str:
    if sys.stdin.isatty():
        first = getpass.getpass("password: ")
        if getpass.getpass("again: ") != first:
            raise users.UserError("the two passwords differ")
        return first
    return sys.stdin.readline().rstrip("\n")


def _quotas(args: argparse.Namespace, current: users.Quotas | None = None) -> users.Quotas | None:
    given = {field: getattr(args, field) for _, field, _ in _QUOTA_FLAGS}
    if current is not None and all(value is None for value in given.values()):
        return None
    base = vars(current) if current is not None else {}
    merged = {field: (base.get(field) if value is None else value) for field, value in given.items()}
    return users.Quotas(**{field: None if value == -1 else value for field, value in merged.items()})


def run(args: argparse.Namespace) -> int:
    engine = make_engine(get_settings().database_url)
    init_db(engine)
    try:
        with Session(engine) as session:
            return _run(session, args)
    except users.UserError as exc:
        print(f"users: {exc}", file=sys.stderr)
        return 2
    finally:
        engine.dispose()


def _run(session: Session, args: argparse.Namespace) -> int:
    command = args.users_command
    if command == "add":
        password = _password() if args.password else None
        quotas = _quotas(args) or users.Quotas()
        token = users.add_user(
            session, args.name, is_admin=args.admin, password=password, slurm_account=args.slurm_account, quotas=quotas
        )
        print(f"added {args.name}{' (admin)' if args.admin else ''}; API token, shown only now:\n{token}")
    elif command == "set":
        user = users.active_user(session, args.name)
        current = users.Quotas(user.max_concurrent_runs, user.max_gpus_in_use, user.max_runs_per_day)
        users.change_user(
            session,
            args.name,
            is_admin=None if args.admin is None else args.admin == "yes",
            password=_password() if args.password else None,
            slurm_account=args.slurm_account,
            quotas=_quotas(args, current),
        )
        ended = "; the password changed, so every token and session of theirs ended" if args.password else ""
        print(f"changed {args.name}{ended}")
    elif command == "list":
        print(f"{'name':<20} {'role':<6} {'account':<16} {'runs':>5} {'gpus':>5} {'/day':>5}  state")
        for user in users.list_users(session):
            figures = [user.max_concurrent_runs, user.max_gpus_in_use, user.max_runs_per_day]
            limits = " ".join(f"{'-' if n is None else n:>5}" for n in figures)
            role = "admin" if user.is_admin else "user"
            state = f"revoked {user.revoked_at:%Y-%m-%d}" if user.revoked_at else "active"
            print(f"{user.name:<20} {role:<6} {user.slurm_account or '-':<16} {limits}  {state}")
    elif command == "revoke":
        users.revoke_user(session, args.name)
        print(f"revoked {args.name}: its tokens and sessions no longer work")
    elif command == "token":
        if args.days is not None and args.days <= 0:
            raise users.UserError("--days must be more than 0")
        print(users.issue_token(session, args.name, None if args.days is None else timedelta(days=args.days)))
    elif command == "tokens":
        _list_tokens(session, args.name)
    elif command == "unlock":
        opened = signin_throttle.unlock(session, args.name)
        print(f"{args.name} may sign in again" if opened else f"{args.name} was not locked out")
    return 0


def _list_tokens(session: Session, name: str) -> None:
    if session.get(User, name) is None:  # a revoked user's tokens are listed too
        raise users.UserError(f"no user {name!r}")
    print(f"{'id':<16} {'made':<16} {'last used':<16} {'expires':<16} {'made with':<16} state")
    now = utcnow()
    for token in users.tokens_of(session, name):
        times = [token.created_at, token.last_used_at, token.expires_at]
        made, used, expires = (f"{t:%Y-%m-%d %H:%M}" if t else "-" for t in times)
        if token.revoked_at is not None:
            state = f"revoked {token.revoked_at:%Y-%m-%d}"
        else:
            state = "expired" if token.expires_at is not None and token.expires_at <= now else "active"
        print(f"{token.id:<16} {made:<16} {used:<16} {expires:<16} {token.parent_id or '-':<16} {state}")
