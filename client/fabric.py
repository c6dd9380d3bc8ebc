"""The command about the clusters' interconnect: the fabric probes' fits."""

from __future__ import annotations

import argparse

from client.api import Client
from client.command import EXIT_OK, Command
from client.output import print_json, print_table, wrapped
from client.schemas import FabricEntryView


def _peak_busbw(entry: FabricEntryView) -> float | None:
    """The highest bus bandwidth any of the probe's collectives reached, GB/s."""
    return max((point.busbw_bytes_per_s / 1e9 for point in entry.points), default=None)


def fabric(client: Client, args: argparse.Namespace) -> int:
    names = ("profile", "partition", "backend", "nodes", "processes_per_node")
    filters = {name: str(value) for name in names if (value := getattr(args, name)) is not None}
    if args.json:
        print_json(client.fabric_json(filters))
        return EXIT_OK
    listing = client.fabric(filters)
    headers = ["TIER", "PROFILE", "PARTITION", "NODES", "PER NODE", "BACKEND", "KIND", "ALPHA US", "BETA GB/S",
               "FIT ERROR", "PEAK BUSBW GB/S", "RUN", "MEASURED (UTC)", "DEGRADED"]  # fmt: skip
    rows = [
        [
            entry.shape.tier,
            entry.shape.profile or "-",
            entry.shape.partition or "-",
            entry.shape.nodes,
            entry.shape.processes_per_node,
            entry.shape.backend,
            "pre-flight" if entry.preflight else "probe",
            f"{entry.alpha_s * 1e6:.3g}",
            f"{entry.beta_bytes_per_s / 1e9:.3g}",
            f"{entry.fit_error:.0%}",
            f"{peak:.3g}" if (peak := _peak_busbw(entry)) is not None else "-",
            entry.run_id,
            entry.measured_at.strftime("%Y-%m-%d %H:%M"),
            "yes" if entry.degraded else "",
        ]
        for entry in listing.data
    ]
    print_table(headers, rows, flexible=len(headers) - 1)
    if not listing.data:
        print(wrapped("no probe yet: submit an experiment with base.kind 'probe' (README: The fabric probe)", "  "))
    return EXIT_OK


def _arguments(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("--profile", metavar="NAME", help="only this cluster profile's probes")
    sub.add_argument("--partition", metavar="NAME", help="only this partition's")
    sub.add_argument("--backend", metavar="NAME", help="only this backend's: gloo or nccl")
    sub.add_argument("--nodes", type=int, metavar="N", help="only the probes over N nodes")
    sub.add_argument("--processes-per-node", type=int, metavar="N", help="only those with N processes per node")
    sub.add_argument("--json", action="store_true", help="JSON, as the API returns it: every point of every curve")


COMMANDS = (
    Command(
        "fabric",
        fabric,
        "List the fabric probes' fits: each tier's latency and bandwidth",
        "Each probed tier (intra_node: within a node; inter_node: one rank per node), newest first, with its shape, "
        "its fitted latency (alpha) and bus bandwidth (beta), the fit's error (the root mean square of each point's "
        "relative miss: predictions read from the fit carry it), the highest busbw it measured, the run it came from, "
        "and whether a training run's pre-flight was below its fabric's reference (fabric_degraded). --json gives "
        "every point of every curve, as the Fabric page draws them.",
        _arguments,
        (
            "scalelab fabric",
            "scalelab fabric --profile twonode --backend gloo",
            "scalelab fabric --nodes 2 --processes-per-node 2",
            "scalelab fabric --json",
        ),
    ),
)
