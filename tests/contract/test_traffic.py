"""The traffic model's arithmetic where no real run on this machine can check it: more nodes, tiers, precision,
hybrid sharding and 2-D parallelism. (tests/worker/parallel/test_traffic.py holds it against real steps.)"""

from __future__ import annotations

import pytest

from contract import layers
from contract.fabric import Collective, Tier
from contract.traffic import DDP_BUCKET_BYTES, Traffic, ddp_buckets, pipeline_bubble, step_traffic
from tests.factories import spec


def test_the_bubble_is_p_minus_one_over_m_plus_p_minus_one():
    assert pipeline_bubble(1, 8) == 0
    assert pipeline_bubble(2, 1) == pytest.approx(1 / 2)  # naive model parallelism: half the time idle
    assert pipeline_bubble(4, 4) == pytest.approx(3 / 7)
    assert pipeline_bubble(4, 29) == pytest.approx(3 / 32)


def test_ddp_buckets_fill_from_the_last_parameter_first_bucket_one_mib():
    mib = 2**20 // 4  # fp32 elements in a MiB
    assert ddp_buckets([10, mib, 20]) == [mib + 20, 10]
    assert ddp_buckets([3 * DDP_BUCKET_BYTES // 4, mib]) == [mib, 3 * DDP_BUCKET_BYTES // 4]
    assert ddp_buckets([5, 6]) == [11]


def test_one_process_moves_nothing():
    assert step_traffic(spec(model="gpt", strategy="ddp", gpus=1)) == Traffic(())


def test_ddp_all_reduces_every_gradient_once_per_step_whatever_the_accumulation():
    run = spec(model="mlp", strategy="ddp", gpus=4, nodes=2, grad_accum_steps=2, global_batch_size=64)
    (bucket,) = step_traffic(run).transfers
    assert (bucket.collective, bucket.ranks, bucket.tier, bucket.per_step) == (
        Collective.all_reduce,
        4,
        Tier.inter_node,
        1,
    )
    assert bucket.nbytes == 4 * layers.parameter_count(run)


def test_hybrid_sharding_gathers_within_nodes_and_all_reduces_shards_across():
    run = spec(model="gpt", strategy="fsdp", fsdp_sharding="hybrid", gpus=4, nodes=2)
    transfers = step_traffic(run).transfers
    assert {(t.collective, t.tier, t.ranks) for t in transfers} == {
        (Collective.all_gather, Tier.intra_node, 2),
        (Collective.reduce_scatter, Tier.intra_node, 2),
        (Collective.all_reduce, Tier.inter_node, 2),
    }
    gathered = sum(t.nbytes for t in transfers if t.collective is Collective.reduce_scatter)
    across = sum(t.nbytes for t in transfers if t.collective is Collective.all_reduce)
    assert across * 2 == gathered  # each rank all-reduces its half-shard with its replica on the other node


def test_tensor_parallel_all_reduces_are_in_the_compute_dtype():
    fp32 = step_traffic(spec(model="gpt", strategy="tp", gpus=2)).by_collective()
    bf16 = step_traffic(spec(model="gpt", strategy="tp", gpus=2, precision="bf16")).by_collective()
    assert fp32[Collective.all_reduce] == 2 * bf16[Collective.all_reduce]


def test_fsdp_tp_runs_tp_within_groups_and_fsdp_across_them():
    run = spec(model="gpt", strategy="fsdp_tp", tp_degree=2, gpus=8, nodes=2, global_batch_size=64)
    transfers = step_traffic(run).transfers
    tp = [t for t in transfers if t.collective is Collective.all_reduce]
    fsdp = [t for t in transfers if t.collective is not Collective.all_reduce]
    assert {(t.ranks, t.groups, t.tier) for t in tp} == {(2, 4, Tier.intra_node)}
    assert {(t.ranks, t.groups, t.tier) for t in fsdp} == {(4, 2, Tier.inter_node)}


def test_a_pipeline_boundary_between_nodes_is_inter_node():
    run = spec(model="gpt", strategy="pp", gpus=4, nodes=2, depth=4, microbatches=4)
    traffic = step_traffic(run)
    tiers = {t.boundary: t.tier for t in traffic.transfers}
    assert tiers == {0: Tier.intra_node, 1: Tier.inter_node, 2: Tier.intra_node}
    assert traffic.bubble_fraction == pytest.approx(3 / 7)
    assert {t.per_step for t in traffic.transfers} == {4}
