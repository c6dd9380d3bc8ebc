"""The step model's arithmetic (server.services.prediction) and the off_model flag's condition, on plain values."""

from __future__ import annotations

import pytest

from contract import layers
from contract.fabric import AlphaBeta, Tier
from contract.traffic import step_traffic
from server.models import FlagCode
from server.services import flags
from server.services.prediction import (
    MeasuredStep,
    NoPrediction,
    Reference,
    StepPrediction,
    comm_total_s,
    flops_compute_s,
    predict_step,
    residual,
)
from tests.factories import spec

FAST = {Tier.intra_node: AlphaBeta(1e-4, 1e9), Tier.inter_node: AlphaBeta(1e-3, 1e8)}
ONE = Reference(spec(model="mlp", strategy="ddp", gpus=1, global_batch_size=64), MeasuredStep(0.01, 0.08, 0.01))


def predicted(**fields) -> StepPrediction:
    result = predict_step(ONE, spec(model="mlp", **fields), FAST)
    assert isinstance(result, StepPrediction), result
    return result


def test_one_process_predicts_itself():
    same = predicted(strategy="ddp", gpus=1, global_batch_size=64)
    assert (same.compute_s, same.comm_s, same.bubble_s) == pytest.approx((0.1, 0, 0))
    assert same.steps_per_epoch == layers.train_samples(ONE.spec) // 64


def test_strong_scaling_halves_forward_and_backward_but_not_ddps_optimizer():
    two = predicted(strategy="ddp", gpus=2, global_batch_size=64)
    assert two.compute_s == pytest.approx(0.09 / 2 + 0.01)
    assert two.comm_s == pytest.approx(FAST[Tier.intra_node].time_s(*_bucket(two)))
    weak = predicted(strategy="ddp", gpus=2, global_batch_size=128)
    assert weak.compute_s == pytest.approx(0.1)


def _bucket(prediction: StepPrediction):
    (transfer,) = step_traffic(spec(model="mlp", strategy="ddp", gpus=2, global_batch_size=64)).transfers
    return transfer.collective, transfer.ranks, transfer.nbytes


def test_fsdp_shards_the_optimizer_step():
    assert predicted(strategy="fsdp", gpus=2, global_batch_size=64).compute_s == pytest.approx(0.09 / 2 + 0.005)


def test_a_pipeline_stage_does_its_share_and_idles_p_minus_one_over_m_of_it():
    pp = predicted(strategy="pp", gpus=2, global_batch_size=64, microbatches=4)
    stage = 0.1 / 2
    assert pp.compute_s == pytest.approx(stage)
    assert pp.bubble_s == pytest.approx(stage * 1 / 4)
    assert pp.bubble_s / pp.step_s < 1 / 5  # (p-1)/(m+p-1) of the step, plus the sends


def test_no_fit_no_prediction_and_the_reason_says_which():
    result = predict_step(
        ONE, spec(model="mlp", strategy="ddp", gpus=4, nodes=2), {Tier.intra_node: FAST[Tier.intra_node]}
    )
    assert isinstance(result, NoPrediction)
    assert "no inter-node fabric fit for 2 node(s) x 2 process(es)" in result.reason


def test_measured_overlap_hides_its_share_of_communication():
    run = spec(model="mlp", strategy="ddp", gpus=2, global_batch_size=64)
    exposed = predict_step(ONE, run, FAST)
    half = predict_step(ONE, run, FAST, overlap_fraction=0.5)
    assert isinstance(exposed, StepPrediction) and isinstance(half, StepPrediction)
    assert half.comm_s == pytest.approx(exposed.comm_s / 2) and half.comm_total_s == exposed.comm_total_s


def test_an_inner_pipeline_stage_waits_on_both_neighbours():
    three = step_traffic(spec(model="gpt", strategy="pp", gpus=3, depth=3, microbatches=2))
    one_boundary = comm_total_s(step_traffic(spec(model="gpt", strategy="pp", gpus=2, depth=3, microbatches=2)), FAST)
    assert comm_total_s(three, FAST) == pytest.approx(2 * one_boundary)


def test_the_flops_hook_replaces_the_measured_compute():
    run = spec(model="mlp", strategy="ddp", gpus=2, global_batch_size=64)
    seconds = flops_compute_s(flops_per_sample=3e6, samples=32, peak_flops_per_s=1e12)
    result = predict_step(ONE, run, FAST, compute_s=seconds)
    assert isinstance(result, StepPrediction) and result.compute_s == seconds


def test_residual_names_the_part_that_does_not_add_up():
    two = predicted(strategy="ddp", gpus=2, global_batch_size=64)
    slow_comm = MeasuredStep(0.0, 0.045, 0.01, comm_s=two.comm_s + 0.2)
    off = residual(two, slow_comm)
    assert off.relative > 1 and off.comm_excess_s == pytest.approx(0.2) and abs(off.compute_excess_s) < 1e-9
    flag = flags.check_off_model(2, slow_comm.step_s, two.step_s, off.compute_excess_s, off.comm_excess_s, 0.5)
    assert flag is not None and flag.code is FlagCode.off_model
    assert "communication does not add up" in flag.message and "straggler" in flag.message
    slow_compute = MeasuredStep(0.005, 0.3, 0.01, comm_s=two.comm_s)
    off = residual(two, slow_compute)
    flag = flags.check_off_model(2, slow_compute.step_s, two.step_s, off.compute_excess_s, off.comm_excess_s, 0.5)
    assert flag is not None and "compute does not add up" in flag.message and "contention" in flag.message


def test_off_model_is_silent_within_the_tolerance_and_when_faster():
    assert flags.check_off_model(2, 1.49, 1.0, 0.0, 0.49, tolerance=0.5) is None
    assert flags.check_off_model(2, 0.5, 1.0, -0.5, 0.0, tolerance=0.5) is None
    assert flags.check_off_model(2, 1.51, 1.0, 0.0, 0.51, tolerance=0.5) is not None
