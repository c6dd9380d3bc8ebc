"""The command about the clusters runs can go to: profiles."""

from __future__ import annotations

import argparse
import shlex

from client.api import Client
from client.command import EXIT_OK, Command
from client.output import print_fields, print_json, print_table, wrapped
from client.schemas import ProfilesView, ProfileView, SbatchOptionView


def _option_values(option: SbatchOptionView) -> str:
    if option.kind == "choice":
        return ", ".join(option.choices)
    if option.kind == "int":
        if option.min is not None and option.max is not None:
            return f"a whole number, {option.min} to {option.max}"
        if option.min is not None:
            return f"a whole number, {option.min} or more"
        return "a whole number" if option.max is None else f"a whole number, up to {option.max}"
    if option.kind == "time":
        return "a time, [D-]HH:MM:SS"
    return "a word: letters, digits, _ . : + -"


def _profiles_table(listing: ProfilesView) -> None:
    headers = ["PROFILE", "RUNTIME", "PARTITION", "MAX NODES", "GPUS/NODE", "MAX TIME", "GRES", "DESCRIPTION"]
    rows: list[list[object]] = []
    for profile in listing.data:
        for index, (name, partition) in enumerate(profile.partitions.items()):
            first = index == 0  # the profile's own columns go on its first partition's line
            rows.append(
                [
                    (profile.name + (" *" if profile.name == listing.default else "")) if first else "",
                    profile.container.runtime if first else "",
                    name + (" *" if name == profile.default_partition else ""),
                    partition.max_nodes,
                    partition.gpus_per_node,
                    partition.max_time,
                    partition.gres,
                    profile.description if first else "",
                ]
            )
    print_table(headers, rows, flexible=len(headers) - 1)
    print(wrapped("* the default, for runs that name no resources.profile or resources.partition", "  "))


def _profile_details(profile: ProfileView, default: bool) -> None:
    container = profile.container
    fields: list[tuple[str, object]] = [
        ("profile", f"{profile.name} (the default)" if default else profile.name),
        ("description", profile.description),
        ("runtime", container.runtime),
        ("image", container.image),
        ("edf", container.edf),
        ("python", profile.worker_python if container.runtime == "none" else container.python),
        ("mounts", " ".join(container.mounts)),
        ("account", profile.account),
        ("qos", profile.qos),
        ("modules", " ".join(profile.modules)),
        ("env", " ".join(f"{key}={shlex.quote(value)}" for key, value in profile.env.items())),
        (
            "at the time limit",
            f"Slurm signals the worker to save {profile.signal_before_end_s} s before it; "
            f"the saved job runs again, up to {profile.max_requeues} times",
        ),
    ]
    print_fields([(key, value) for key, value in fields if value not in (None, "")])
    print()
    headers = ["PARTITION", "MAX NODES", "GPUS/NODE", "MAX TIME", "GRES", "GPU MEMORY (GIB)", "CPUS/TASK"]
    rows = [
        [
            name + (" *" if name == profile.default_partition else ""),
            partition.max_nodes,
            partition.gpus_per_node,
            partition.max_time,
            partition.gres,
            partition.gpu_memory_gib,
            partition.cpus_per_task,
        ]
        for name, partition in profile.partitions.items()
    ]
    print_table(headers, rows)
    print("* the default partition")
    if not profile.sbatch_options:
        print("\nsbatch options users may set: none")
        return
    print("\nsbatch options users may set (resources.sbatch_options):")
    rows = [
        [name, _option_values(option), option.description] for name, option in sorted(profile.sbatch_options.items())
    ]
    print_table(["OPTION", "VALUES", "DESCRIPTION"], rows, flexible=2)


def profiles(client: Client, args: argparse.Namespace) -> int:
    if args.name is None:
        if args.json:
            print_json(client.profiles_json())
        else:
            _profiles_table(client.profiles())
        return EXIT_OK
    if args.json:
        print_json(client.profile_json(args.name))
        return EXIT_OK
    profile = client.profile(args.name)
    _profile_details(profile, client.profiles().default == profile.name)
    return EXIT_OK


def _arguments(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("name", nargs="?", metavar="NAME", help="show this profile")
    sub.add_argument("--json", action="store_true", help="JSON, as the API returns it")


COMMANDS = (
    Command(
        "profiles",
        profiles,
        "List the cluster profiles runs can use, or show one",
        "Without NAME: each profile's container runtime and partitions with their limits, the defaults marked "
        "with *. With NAME: the profile's runtime and image, account, environment, partitions, and the sbatch "
        "options users may set. An experiment chooses one with resources.profile and resources.partition.",
        _arguments,
        ("scalelab profiles", "scalelab profiles pyxis", "scalelab profiles --json"),
    ),
)
