"""Where this process sits in the job, read from the launcher's environment, and the process group."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.distributed as dist


class LaunchError(RuntimeError):
    """The environment does not describe a consistent distributed launch."""


@dataclass(frozen=True)
class DistEnv:
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    nodes: int

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def _int(env: Mapping[str, str], name: str) -> int:
    try:
        return int(env[name])
    except ValueError:
        raise LaunchError(f"{name}={env[name]!r} is not an integer") from None


def read_dist_env(env: Mapping[str, str] = os.environ) -> DistEnv:
    """torchrun's variables win over Slurm's, so `torchrun` inside an allocation works too."""
    if "RANK" in env and "WORLD_SIZE" in env:
        world = _int(env, "WORLD_SIZE")
        local_world = _int(env, "LOCAL_WORLD_SIZE") if "LOCAL_WORLD_SIZE" in env else world
        return DistEnv(
            rank=_int(env, "RANK"),
            world_size=world,
            local_rank=_int(env, "LOCAL_RANK") if "LOCAL_RANK" in env else 0,
            local_world_size=local_world,
            nodes=max(1, world // max(1, local_world)),
        )
    if "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
        world = _int(env, "SLURM_NTASKS")
        nodes = _int(env, "SLURM_NNODES") if "SLURM_NNODES" in env else 1
        return DistEnv(
            rank=_int(env, "SLURM_PROCID"),
            world_size=world,
            local_rank=_int(env, "SLURM_LOCALID") if "SLURM_LOCALID" in env else 0,
            local_world_size=max(1, world // nodes),
            nodes=nodes,
        )
    return DistEnv(rank=0, world_size=1, local_rank=0, local_world_size=1, nodes=1)


def pick_device(dist_env: DistEnv) -> torch.device:
    if torch.cuda.is_available():
        return torch.device("cuda", dist_env.local_rank % torch.cuda.device_count())
    return torch.device("cpu")


def backend_for(device: torch.device) -> str:
    return "nccl" if device.type == "cuda" else "gloo"


def _count(env: Mapping[str, str], name: str) -> int | None:
    """A positive count Slurm put in the environment; None where it is absent or not one."""
    text = env.get(name, "")
    return int(text) if text.isdigit() and int(text) > 0 else None


def allocated_threads(env: Mapping[str, str], local_processes: int, affinity_cpus: int) -> int:
    """The intra-op threads each of this node's `local_processes` processes runs: its share of the CPUs Slurm
    allocated the job on this node (SLURM_CPUS_ON_NODE, whether srun starts one task per process or torchrun starts
    them in one task), else the CPUs per task; without Slurm, its share of the CPUs it may run on.

    Not from the affinity under Slurm: a Slurm that binds no task to its CPUs (task/none, as the local one) leaves
    every process free to run on the whole node, and sized by that, a 1-process baseline given 1 CPU ran 2 threads
    (Slurm's CPU efficiency 1.32), faster than its allocation allows, and every speed-up against it was too low.
    Never more than the CPUs the process may run on, and never fewer than one."""
    on_node = _count(env, "SLURM_CPUS_ON_NODE")
    per_task = _count(env, "SLURM_CPUS_PER_TASK")
    if on_node is not None:
        share = on_node // max(1, local_processes)
    elif per_task is not None:
        share = per_task
    else:
        share = affinity_cpus // max(1, local_processes)
    return max(1, min(share, affinity_cpus))


def limit_cpu_threads(dist_env: DistEnv) -> None:
    """Share the CPUs Slurm allocated between the node's processes instead of letting each take them all."""
    torch.set_num_threads(allocated_threads(os.environ, dist_env.local_world_size, len(os.sched_getaffinity(0))))


def init_process_group(dist_env: DistEnv, device: torch.device) -> None:
    backend = backend_for(device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if dist_env.world_size == 1:
        # One process needs no rendezvous: no MASTER_ADDR, no port to find free.
        store = dist.HashStore()  # type: ignore[attr-defined]
        dist.init_process_group(backend, store=store, rank=0, world_size=1)
        return
    for name in ("MASTER_ADDR", "MASTER_PORT"):
        if name not in os.environ:
            raise LaunchError(
                f"{name} is not set: the batch script must export MASTER_ADDR (the first host of the allocation) "
                "and MASTER_PORT before srun"
            )
    dist.init_process_group(backend, init_method="env://", rank=dist_env.rank, world_size=dist_env.world_size)
