"""Grid expansion: one run per combination, in order; impossible combinations named, not dropped."""

from __future__ import annotations

import pytest

from contract.spec import RunSpec
from server.models import MAX_RUNS_PER_EXPERIMENT, SpecBase, SpecGrid
from server.services.sweep import SweepError, changed_spec, expand


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
    with pytest.raises(SweepError, match=f"makes 4096 runs; at most {MAX_RUNS_PER_EXPERIMENT}"):
        expand(base_of(), grid_of(seed=values, epochs=values, gpus=values), nodes=1)


def test_repeats_come_round_by_round_with_the_next_seed():
    specs, _ = expand(base_of(), grid_of(gpus=[1, 2]), nodes=1, repeats=3)
    assert [(s.gpus, s.seed) for s in specs] == [(1, 0), (2, 0), (1, 1), (2, 1), (1, 2), (2, 2)]


@pytest.mark.parametrize(("base", "grid"), [({"seed": 5}, {}), ({}, {"seed": [5]})])
def test_a_fixed_seed_stays_fixed_over_repeats(base, grid):
    specs, _ = expand(base_of(**base), grid_of(gpus=[1, 2], **grid), nodes=1, repeats=2)
    assert [s.seed for s in specs] == [5, 5, 5, 5]


def test_repeats_count_against_the_run_limit():
    with pytest.raises(SweepError, match="x 3 repeats makes"):
        expand(
            base_of(),
            grid_of(gpus=[1, 2], lr=[0.01 * n for n in range(1, MAX_RUNS_PER_EXPERIMENT // 4)]),
            nodes=1,
            repeats=3,
        )


def test_weak_scaling_keeps_the_batch_per_gpu_of_the_smallest_count():
    specs, _ = expand(base_of(global_batch_size=32), grid_of(gpus=[2, 4, 8]), nodes=1, weak=True)
    assert [(s.gpus, s.global_batch_size) for s in specs] == [(2, 32), (4, 64), (8, 128)]


def test_a_weak_batch_that_cannot_be_shared_equally_is_named():
    """The batch of the smallest count must divide by it; the larger counts' batches then divide by theirs."""
    _, unrunnable = expand(base_of(global_batch_size=10), grid_of(gpus=[4, 6]), nodes=1, weak=True)
    assert [item.combination for item in unrunnable] == [{"gpus": 4}, {"gpus": 6}]
    assert "global_batch_size (15) must be divisible by gpus (6)" in unrunnable[1].reason


def test_a_learning_rate_rule_scales_from_the_grids_smallest_global_batch_and_keeps_the_rate_given():
    base = base_of(lr=0.05, global_batch_size=32, lr_scaling="linear", strategy="ddp")
    specs, _ = expand(base, grid_of(gpus=[1, 2, 4]), 1, weak=True)
    assert [(s.global_batch_size, s.lr, s.reference_lr, s.reference_batch) for s in specs] == [
        (32, 0.05, 0.05, 32),
        (64, 0.1, 0.05, 32),
        (128, 0.2, 0.05, 32),
    ]
    square_root = base_of(lr=0.05, global_batch_size=32, lr_scaling="sqrt", strategy="ddp")
    assert [s.lr for s in expand(square_root, grid_of(gpus=[1, 4]), 1, weak=True)[0]] == pytest.approx([0.05, 0.1])


def test_a_swept_rule_scales_only_its_own_runs_and_a_swept_batch_sets_the_reference():
    base = base_of(lr=0.1, strategy="ddp", gpus=2)
    specs, _ = expand(base, grid_of(global_batch_size=[64, 256], lr_scaling=["none", "linear"]), 1)
    rates = {(s.global_batch_size, s.lr_scaling.value): (s.lr, s.reference_batch) for s in specs}
    assert rates == {
        (64, "none"): (0.1, None),
        (256, "none"): (0.1, None),
        (64, "linear"): (0.1, 64),
        (256, "linear"): (0.4, 64),
    }


def test_a_reruns_changes_lay_over_its_spec_and_its_rate_follows_a_changed_batch_by_its_rule():
    base = base_of(lr=0.05, global_batch_size=32, lr_scaling="linear", strategy="ddp")
    scaled = expand(base, grid_of(gpus=[1, 2]), 1, weak=True)[0][1].model_dump(mode="json")
    assert (scaled["lr"], scaled["global_batch_size"]) == (0.1, 64)
    halved = RunSpec.model_validate(changed_spec(scaled, {"global_batch_size": 32, "seed": None}))
    assert (halved.global_batch_size, halved.lr, halved.reference_lr, halved.reference_batch) == (32, 0.05, 0.05, 32)
    assert halved.seed == RunSpec.model_fields["seed"].default
    given = RunSpec.model_validate(changed_spec(scaled, {"lr": 0.2}))
    assert (given.lr, given.reference_lr) == (0.4, 0.2)  # the rate given is the reference batch's, as in a request
    ruleless = RunSpec.model_validate(changed_spec(scaled, {"lr_scaling": "none"}))
    assert (ruleless.lr, ruleless.reference_lr, ruleless.reference_batch) == (0.05, None, None)
    plain = runs(base_of(lr=0.3, strategy="ddp"), grid_of(gpus=[2]), 1)[0]
    changed = RunSpec.model_validate(changed_spec(plain.model_dump(mode="json"), {"global_batch_size": 32}))
    assert changed == plain.model_copy(update={"global_batch_size": 32})


def test_a_scaled_rate_beyond_the_bound_is_a_combination_that_cannot_run():
    base = base_of(lr=4.0, global_batch_size=32, lr_scaling="linear", strategy="ddp")
    specs, unrunnable = expand(base, grid_of(gpus=[1, 4]), 1, weak=True)
    assert [s.gpus for s in specs] == [1]
    assert unrunnable[0].combination == {"gpus": 4} and "lr" in unrunnable[0].reason


def test_the_target_reaches_every_run_from_the_server_and_cannot_be_set_in_base_or_grid():
    target = {"metric": "val_accuracy", "at_least": 0.9}
    specs, _ = expand(base_of(), grid_of(gpus=[1, 2]), 1, server_fields={"target": target})
    assert {s.target.describe() for s in specs if s.target} == {"val_accuracy >= 0.9"} and len(specs) == 2
    for section in (SpecBase, SpecGrid):
        assert not {"target", "reference_lr", "reference_batch"} & set(section.model_fields)
