"""Rank and world size from torchrun's or Slurm's environment."""

from __future__ import annotations

import pytest

from worker.distributed import DistEnv, LaunchError, allocated_threads, read_dist_env


def test_slurm_environment():
    env = {"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1", "SLURM_NNODES": "2"}
    assert read_dist_env(env) == DistEnv(rank=5, world_size=8, local_rank=1, local_world_size=4, nodes=2)


def test_torchrun_wins_over_slurm():
    env = {
        "RANK": "1",
        "WORLD_SIZE": "2",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "2",
        "SLURM_PROCID": "0",
        "SLURM_NTASKS": "1",
    }
    assert read_dist_env(env) == DistEnv(rank=1, world_size=2, local_rank=1, local_world_size=2, nodes=1)


def test_no_launcher_is_one_process():
    assert read_dist_env({}) == DistEnv(rank=0, world_size=1, local_rank=0, local_world_size=1, nodes=1)
    assert read_dist_env({}).is_main


def test_garbage_is_refused_by_name():
    with pytest.raises(LaunchError, match="SLURM_NTASKS='four'"):
        read_dist_env({"SLURM_PROCID": "0", "SLURM_NTASKS": "four"})


# ---- the threads each process runs ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "processes", "affinity", "threads"),
    [
        # The README's baseline on the local Slurm (no binding): 1 CPU allocated, both cores in its affinity.
        ({"SLURM_CPUS_ON_NODE": "1"}, 1, 2, 1),
        # srun, --cpus-per-task=4, 2 tasks on the node: each its 4.
        ({"SLURM_CPUS_ON_NODE": "8", "SLURM_CPUS_PER_TASK": "4"}, 2, 16, 4),
        # torchrun in one srun task given all the node's CPUs: its processes share them.
        ({"SLURM_CPUS_ON_NODE": "8", "SLURM_CPUS_PER_TASK": "8"}, 4, 16, 2),
        # A Slurm that binds: each task may run only on its own CPUs.
        ({"SLURM_CPUS_ON_NODE": "8"}, 2, 4, 4),
        # Slurm counts more CPUs than the node has (the local one's 8 on 2 cores): never beyond the affinity.
        ({"SLURM_CPUS_ON_NODE": "8"}, 1, 2, 2),
        # More processes than CPUs: one thread each, never none.
        ({"SLURM_CPUS_ON_NODE": "2"}, 4, 2, 1),
        # Only the CPUs per task (an older Slurm, a runtime that passes no more).
        ({"SLURM_CPUS_PER_TASK": "3"}, 2, 8, 3),
        # No Slurm (torchrun on this machine): a share of what the process may run on; garbage is no figure.
        ({}, 2, 8, 4),
        ({"SLURM_CPUS_ON_NODE": "many", "SLURM_CPUS_PER_TASK": "0"}, 1, 2, 2),
    ],
)
def test_threads_come_from_what_slurm_allocated_not_from_the_affinity(env, processes, affinity, threads):
    assert allocated_threads(env, processes, affinity) == threads
