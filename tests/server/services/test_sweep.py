"""Grid expansion: one run per combination, in order; impossible combinations named, not dropped."""

from __future__ import annotations

import pytest

from server.models import MAX_RUNS, SpecBase, SpecGrid
from server.services.sweep import SweepError, expand


def runs(base, grid, nodes):
    specs, unrunnable = expand(base, grid, nodes)
    assert unrunnable == []
    return specs


def grid_of(**axes):
    return SpecGrid.model_validate(axes)


def base_of(**fields):
    return SpecBase.model_validate(fields)


def test_product_in_grid_order():
    specs = runs(base_of(epochs=3), grid_of(strategy=["single", "ddp"], gpus=[1]), nodes=1)
    assert [(s.strategy.value, s.gpus, s.epochs) for s in specs] == [("single", 1, 3), ("ddp", 1, 3)]


def test_every_spec_field_can_be_swept():
    specs = runs(base_of(), grid_of(gpus=[1, 2], global_batch_size=[32, 64], lr=[0.1, 0.01]), nodes=1)
    assert len(specs) == 8
    assert {(s.gpus, s.global_batch_size, s.lr) for s in specs} == {
        (g, b, lr) for g in (1, 2) for b in (32, 64) for lr in (0.1, 0.01)
    }


def test_nodes_come_from_resources_unless_swept():
    assert {s.nodes for s in runs(base_of(), grid_of(gpus=[2, 4]), nodes=2)} == {2}
    assert [s.nodes for s in runs(base_of(), grid_of(gpus=[4], nodes=[1, 2]), nodes=1)] == [1, 2]


def test_empty_grid_is_one_run_of_the_base():
    assert len(runs(base_of(gpus=2), grid_of(), nodes=1)) == 1


def test_impossible_combinations_are_each_named_beside_the_runnable_ones():
    specs, unrunnable = expand(base_of(global_batch_size=60), grid_of(gpus=[1, 3, 7, 8]), nodes=1)
    assert [spec.gpus for spec in specs] == [1, 3]
    assert [item.combination for item in unrunnable] == [{"gpus": 7}, {"gpus": 8}]
    assert str(unrunnable[0]).startswith("gpus=7: global_batch_size (60) must be divisible by gpus (7)")


def test_tp_degree_must_divide_the_gpus():
    _, unrunnable = expand(base_of(model="gpt", dataset="synthetic", strategy="fsdp_tp", tp_degree=2),
                           grid_of(gpus=[2, 3, 4]), nodes=1)  # fmt: skip
    assert [item.combination for item in unrunnable] == [{"gpus": 3}]
    assert "tp_degree that divides gpus (3)" in unrunnable[0].reason


def test_limits_of_the_cluster_make_combinations_unrunnable():
    def at_most_four(spec):
        return [f"{spec.gpus} GPUs are more than 4"] if spec.gpus > 4 else []

    specs, unrunnable = expand(base_of(), grid_of(gpus=[2, 4, 8]), nodes=1, limits=at_most_four)
    assert [spec.gpus for spec in specs] == [2, 4]
    assert str(unrunnable[0]) == "gpus=8: 8 GPUs are more than 4"


def test_too_many_runs_are_refused_before_expanding():
    values = list(range(1, 17))
    with pytest.raises(SweepError, match=f"makes 4096 runs; at most {MAX_RUNS}"):
        expand(base_of(), grid_of(seed=values, epochs=values, gpus=values), nodes=1)
