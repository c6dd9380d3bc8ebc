"""Rank and world size from torchrun's or Slurm's environment."""

from __future__ import annotations

import pytest

from worker.distributed import DistEnv, LaunchError, read_dist_env


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
