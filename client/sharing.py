"""`scalelab share`: who besides its owner and the admins may see an experiment, read-only."""

from __future__ import annotations

import argparse

from client.api import Client
from client.command import EXIT_OK, Command


def share(client: Client, args: argparse.Namespace) -> int:
    if args.group is not None:
        experiment = client.share(args.experiment, "group", args.group)
    else:
        experiment = client.share(args.experiment, "everyone" if args.everyone else "private")
    if experiment.sharing == "group":
        print(f"{experiment.id}: shared read-only with the members of the Unix group {experiment.sharing_group}")
    elif experiment.sharing == "everyone":
        print(f"{experiment.id}: shared read-only with everyone signed in")
    else:
        print(f"{experiment.id}: private (its owner and the admins only)")
    return EXIT_OK


def _arguments(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("experiment", metavar="EXPERIMENT")
    whom = sub.add_mutually_exclusive_group(required=True)
    whom.add_argument("--group", metavar="GROUP", help="the members of this Unix group (one you are in)")
    whom.add_argument("--everyone", action="store_true", help="everyone who signs in to this server")
    whom.add_argument("--private", action="store_true", help="nobody but you and the admins (the default)")


COMMANDS = (
    Command(
        "share",
        share,
        "Let a Unix group or everyone see an experiment, read-only; or make it private again",
        "Those it is shared with see the experiment, its runs, their output, metrics and report, but cannot cancel, "
        "resubmit or delete anything. Only its owner or an admin may change who sees it; the owner shares only "
        "with a group they are a member of.",
        _arguments,
        (
            "scalelab share 0a1b2c3d4e --group physics-lab",
            "scalelab share 0a1b2c3d4e --everyone",
            "scalelab share 0a1b2c3d4e --private",
        ),
    ),
)
