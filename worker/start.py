"""The start record, built one way for every kind of run: where it runs, on what, and from which image."""

from __future__ import annotations

import os
import socket

import torch

from contract.records import StartRecord
from contract.spec import RunSpec
from worker.distributed import DistEnv, backend_for
from worker.hardware import gather_nodes
from worker.provenance import provenance


def start_record(spec: RunSpec, dist_env: DistEnv, device: torch.device, parameters: int) -> StartRecord:
    """What training and inference report first; a collective (the nodes' hardware is gathered from every rank),
    so every rank calls it, and rank 0's reporter prints it.

    Both kinds carry the provenance: "run again" pins a run to the image digest recorded here, whatever its kind.
    """
    return StartRecord(
        world_size=dist_env.world_size,
        nodes=dist_env.nodes,
        device=device.type,
        backend=backend_for(device),
        strategy=spec.strategy.value,
        torch_version=torch.__version__,
        hostname=socket.gethostname(),
        parameters=parameters,
        precision=spec.precision.value,
        nodes_hardware=gather_nodes(dist_env.rank, dist_env.world_size, device),
        **provenance(os.environ),
    )
