"""The fabric: each probed tier's busbw curve and latency-bandwidth fit, by the shape it was measured on."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from server.api.deps import SessionDep
from server.models import FabricPublic
from server.services import fabric

router = APIRouter(prefix="/api/fabric", tags=["fabric"])

_NAME = r"^[A-Za-z0-9_.-]{1,64}$"
# A run spec's bounds (contract.spec.RunSpec): no probe has more nodes, or more processes on one node.
MAX_NODES = 1024
MAX_GPUS_PER_NODE = 8192


@router.get(
    "",
    response_model=FabricPublic,
    summary="List the fabric probes' curves and fits, newest first",
    description="One entry per probed tier of a run (a probe run, or a training run's pre-flight): the shape it "
    "measured (profile, partition, nodes, processes per node, backend, tier), every point with its algorithm and "
    "bus bandwidth by nccl-tests' definitions, the fitted latency (alpha) and bandwidth (beta) with the fit's "
    "error, the run it came "
    f"from and when. The fabric is the cluster's: every signed-in user sees every probe. At most "
    f"{fabric.MAX_ENTRIES} entries.",
)
def list_fabric(
    session: SessionDep,
    profile: Annotated[str | None, Query(pattern=_NAME, description="only this cluster profile's")] = None,
    partition: Annotated[str | None, Query(pattern=_NAME, description="only this partition's")] = None,
    backend: Annotated[
        str | None, Query(pattern=r"^[a-z]{1,16}$", description="only this backend's (gloo, nccl)")
    ] = None,
    preflight: Annotated[
        bool | None, Query(description="true: only pre-flights; false: only probe runs; unset: both")
    ] = None,
    nodes: Annotated[int | None, Query(ge=1, le=MAX_NODES, description="only probes over this many nodes")] = None,
    processes_per_node: Annotated[
        int | None, Query(ge=1, le=MAX_GPUS_PER_NODE, description="only probes of this many processes per node")
    ] = None,
) -> FabricPublic:
    return fabric.listing(
        session,
        profile=profile,
        partition=partition,
        backend=backend,
        preflight=preflight,
        nodes=nodes,
        processes_per_node=processes_per_node,
    )
