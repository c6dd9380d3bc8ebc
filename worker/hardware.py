"""The cores and threads each process got, gathered once at start so a run that shared its cores is marked."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from contract.records import NodeHardware


@dataclass(frozen=True)
class ProcessHardware:
    """What one rank sees of its node."""

    rank: int
    host: str
    physical_cores: int | None
    hardware_threads: int
    cpus: frozenset[int]
    intra_op_threads: int
    gpu_model: str | None
    cpus_allocated: int | None = None  # SLURM_CPUS_ON_NODE: the job's CPUs on this host


def physical_cores(cpuinfo: str) -> int | None:
    """Distinct (physical id, core id) pairs; None where the kernel does not say (some VMs, non-x86)."""
    cores: set[tuple[str, str]] = set()
    physical = core = None
    for line in [*cpuinfo.splitlines(), ""]:
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "physical id":
            physical = value.strip()
        elif key == "core id":
            core = value.strip()
        elif not key:  # a blank line ends one logical CPU's block
            if physical is not None and core is not None:
                cores.add((physical, core))
            physical = core = None
    return len(cores) or None


def cpu_ranges(cpus: Iterable[int]) -> str:
    """A CPU set as Linux writes it: "0-3,8"."""
    parts: list[str] = []
    ordered = sorted(set(cpus))
    start = 0
    for index, cpu in enumerate(ordered):
        if index + 1 == len(ordered) or ordered[index + 1] != cpu + 1:
            first = ordered[start]
            parts.append(str(first) if first == cpu else f"{first}-{cpu}")
            start = index + 1
    return ",".join(parts)


def this_process(rank: int, device: torch.device) -> ProcessHardware:
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
    except OSError:
        cpuinfo = ""
    return ProcessHardware(
        rank=rank,
        host=socket.gethostname(),
        physical_cores=physical_cores(cpuinfo),
        hardware_threads=os.cpu_count() or 1,
        cpus=frozenset(os.sched_getaffinity(0)),
        intra_op_threads=torch.get_num_threads(),
        gpu_model=torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        cpus_allocated=int(allocated) if (allocated := os.environ.get("SLURM_CPUS_ON_NODE", "")).isdigit() else None,
    )


def by_node(processes: Iterable[ProcessHardware]) -> list[NodeHardware]:
    """One entry per host: its ranks together, since they share its cores."""
    hosts: dict[str, list[ProcessHardware]] = {}
    for process in sorted(processes, key=lambda p: p.rank):
        hosts.setdefault(process.host, []).append(process)
    nodes = []
    for host, members in hosts.items():
        cpus = frozenset().union(*(member.cpus for member in members))
        first = members[0]
        nodes.append(
            NodeHardware(
                host=host,
                ranks=[member.rank for member in members],
                physical_cores=first.physical_cores,
                hardware_threads=first.hardware_threads,
                cpus_given=len(cpus),
                affinity=cpu_ranges(cpus),
                intra_op_threads=max(member.intra_op_threads for member in members),
                gpu_model=first.gpu_model,
                cpus_allocated=first.cpus_allocated,
            )
        )
    return nodes


def gather_nodes(rank: int, world_size: int, device: torch.device) -> list[NodeHardware]:
    """Every rank's view, gathered once (a collective: every rank calls it)."""
    everyone: list[ProcessHardware | None] = [None] * world_size
    dist.all_gather_object(everyone, this_process(rank, device))
    return by_node(process for process in everyone if process is not None)
