"""The fabric probe: collectives timed over the allocation's processes, per tier, as nccl-tests would time them.

Every rank of the job calls `probe` (or `preflight`): the groups are made collectively, and each collective at each
size is run by every rank of its group. A tier's groups are the ranks of each node (intra_node: a subgroup per node,
all nodes measuring at once, as a training run's nodes would) and one rank per node (inter_node, when the job has
more than one node). Rank 0 belongs to both and prints the records: node 0's subgroup speaks for the intra tier.

Sizes double from 1 KiB while the time allows: each collective of each tier gets an equal share of the probe's
seconds, and a size is tried only when its predicted cost (twice the last size's, as bandwidth-bound collectives
grow) fits in what is left of that share. Every rank of a group takes the same decision from the same figures: the
group agrees on the slowest rank's median before anything is decided, so that no rank waits in a collective that
another has skipped.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist

from contract.fabric import Collective, Sample, Tier, algorithm_bandwidth, bus_bandwidth, fit_alpha_beta
from contract.records import FabricFitRecord, FabricRecord
from worker.distributed import DistEnv, backend_for
from worker.report import Reporter

FIRST_BYTES = 1024
# No buffer beyond this, whatever the time allows: a CPU probe must not take a node's memory (each rank holds a few
# buffers of this size).
MAX_BYTES = 256 * 2**20
WARMUP = 2
TIMED = 5
# The pre-flight: all-reduce only, at sizes from 1 KiB by 16x up to 64 MiB, in about PREFLIGHT_SECONDS (the profile's
# fabric_reference is a band for its largest all-reduce).
PREFLIGHT_SECONDS = 3.0
PREFLIGHT_MAX_BYTES = 64 * 2**20
PREFLIGHT_GROWTH = 16


@dataclass(frozen=True)
class TierGroup:
    """One tier as this rank sees it: its group (None: this rank takes no part) and the ranks of each group."""

    tier: Tier
    group: dist.ProcessGroup | None
    ranks: list[int]  # the global ranks of this rank's group (empty: none)
    size: int  # the ranks of every group of the tier


def tier_groups(dist_env: DistEnv) -> list[TierGroup]:
    """The tiers this job can measure, their groups made by every rank (new_group is collective). Ranks are placed
    on nodes in blocks, as srun's default distribution and torchrun place them."""
    per_node = dist_env.local_world_size
    node = dist_env.rank // per_node
    tiers: list[TierGroup] = []
    if per_node > 1:
        mine: dist.ProcessGroup | None = None
        for index in range(dist_env.nodes):
            ranks = list(range(index * per_node, (index + 1) * per_node))
            group = dist.new_group(ranks)
            if index == node and isinstance(group, dist.ProcessGroup):
                mine = group
        own = list(range(node * per_node, (node + 1) * per_node))
        tiers.append(TierGroup(Tier.intra_node, mine, own, per_node))
    if dist_env.nodes > 1:
        leaders = [index * per_node for index in range(dist_env.nodes)]
        group = dist.new_group(leaders)  # a rank outside is given a marker, not a group
        inside = isinstance(group, dist.ProcessGroup) and dist_env.rank in leaders
        tiers.append(
            TierGroup(
                Tier.inter_node,
                group if isinstance(group, dist.ProcessGroup) and inside else None,
                leaders if inside else [],
                len(leaders),
            )
        )
    return tiers


def _operation(
    collective: Collective, tier: TierGroup, rank: int, nbytes: int, device: torch.device
) -> Callable[[], object]:
    """One collective of `nbytes` (nccl-tests' count: all-gather's output, reduce-scatter's input) in this group,
    run synchronously (async_op is False: the call returns once the collective is done, but for the device)."""
    group, ranks = tier.group, tier.ranks
    elements = max(1, nbytes // 4)  # float32
    if collective is Collective.all_reduce:
        buffer = torch.ones(elements, device=device)
        return lambda: dist.all_reduce(buffer, group=group)
    if collective is Collective.broadcast:
        buffer = torch.ones(elements, device=device)
        return lambda: dist.broadcast(buffer, src=ranks[0], group=group)
    share = max(1, elements // len(ranks))
    if collective is Collective.all_gather:
        part, whole = torch.ones(share, device=device), torch.empty(share * len(ranks), device=device)
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor  # torch < 2.14 names it so
        return lambda: gather(whole, part, group=group)
    if collective is Collective.reduce_scatter:
        whole, part = torch.ones(share * len(ranks), device=device), torch.empty(share, device=device)
        scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        return lambda: scatter(part, whole, group=group)
    # Point-to-point: ranks paired in the group (first with second, third with fourth ...), a message there and
    # back; one way is half of that. A rank left without a partner (an odd group) waits.
    buffer = torch.ones(elements, device=device)
    position = ranks.index(rank)
    partner = position ^ 1
    if partner >= len(ranks):
        return lambda: None
    other = ranks[partner]

    def ping_pong() -> None:
        if position % 2 == 0:
            dist.send(buffer, dst=other, group=group)
            dist.recv(buffer, src=other, group=group)
        else:
            dist.recv(buffer, src=other, group=group)
            dist.send(buffer, dst=other, group=group)

    return ping_pong


def _timed(operation: Callable[[], object], device: torch.device, repeats: int, halve: bool) -> float:
    """The median of `repeats` timings of the operation, after WARMUP untimed ones."""

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    for _ in range(WARMUP):
        operation()
    sync()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        operation()
        sync()
        times.append(time.perf_counter() - started)
    median = statistics.median(times)
    return median / 2 if halve else median


def _agreed(seconds: float, tier: TierGroup, device: torch.device) -> float:
    """The slowest rank's time in the group: every rank then decides the same."""
    value = torch.tensor([seconds], dtype=torch.float64, device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX, group=tier.group)
    return float(value.item())


@dataclass(frozen=True)
class Plan:
    """What to measure: which collectives, how long each may take, how sizes grow, and up to which."""

    collectives: Sequence[Collective]
    seconds: float
    max_bytes: int
    growth: int
    preflight: bool


def probe_plan(seconds: float) -> Plan:
    return Plan(list(Collective), seconds, MAX_BYTES, 2, preflight=False)


def preflight_plan() -> Plan:
    return Plan([Collective.all_reduce], PREFLIGHT_SECONDS, PREFLIGHT_MAX_BYTES, PREFLIGHT_GROWTH, preflight=True)


def _measure_tier(
    plan: Plan, tier: TierGroup, dist_env: DistEnv, device: torch.device, budget: float
) -> list[tuple[Collective, int, float]]:
    """(collective, nbytes, seconds) for this rank's group of the tier, each collective within `budget` seconds."""
    measured: list[tuple[Collective, int, float]] = []
    for collective in plan.collectives:
        spent, nbytes, last = 0.0, FIRST_BYTES, 0.0
        while nbytes <= plan.max_bytes:
            # One size costs its warm-up and timed runs; predicted from the last as growing with the size.
            if last and spent + last * plan.growth * (WARMUP + TIMED) > budget:
                break
            operation = _operation(collective, tier, dist_env.rank, nbytes, device)
            started = time.perf_counter()
            seconds = _timed(operation, device, TIMED, halve=collective is Collective.send_recv)
            cost = _agreed(time.perf_counter() - started, tier, device)
            last = _agreed(seconds, tier, device)
            spent += cost
            measured.append((collective, nbytes, max(last, 1e-9)))
            nbytes *= plan.growth
    return measured


def run_plan(plan: Plan, dist_env: DistEnv, device: torch.device, reporter: Reporter) -> None:
    """Measure every tier the job has and print each measurement and each tier's fit (rank 0)."""
    tiers = tier_groups(dist_env)
    if not tiers:
        reporter.progress("fabric probe: one process, so no fabric to measure")
        return
    backend = backend_for(device)
    budget = plan.seconds / (len(tiers) * len(plan.collectives))
    for tier in tiers:
        measured = _measure_tier(plan, tier, dist_env, device, budget) if tier.group is not None else []
        dist.barrier()  # the tiers one after another: a node's ranks measuring alone would not be the fabric's
        if not dist_env.is_main:
            continue
        shape = {
            "tier": tier.tier,
            "backend": backend,
            "nodes": dist_env.nodes,
            "processes_per_node": dist_env.local_world_size,
            "preflight": plan.preflight,
        }
        samples = []
        for collective, nbytes, seconds in measured:
            ranks = 2 if collective is Collective.send_recv else tier.size
            samples.append(Sample(collective, ranks, nbytes, seconds))
            reporter.record(
                FabricRecord(
                    **shape,
                    ranks=ranks,
                    collective=collective,
                    nbytes=nbytes,
                    seconds=seconds,
                    iterations=TIMED,
                    algbw_bytes_per_s=algorithm_bandwidth(nbytes, seconds),
                    busbw_bytes_per_s=bus_bandwidth(collective, ranks, nbytes, seconds),
                )
            )
        try:
            fit = fit_alpha_beta(samples)
        except ValueError as exc:
            reporter.progress(f"fabric probe: no fit for {tier.tier}: {exc}")
            continue
        reporter.record(
            FabricFitRecord(
                **shape,
                ranks=tier.size,
                alpha_s=fit.alpha_s,
                beta_bytes_per_s=fit.beta_bytes_per_s,
                points=len(samples),
            )
        )
