"""The learning-rate rules give the documented rates (contract.target): scaled from the reference batch, warmed up
step by step; and a target's bound, met or not."""

from __future__ import annotations

import itertools
import math

import pytest

from contract.target import LrScaling, Target, scaled_lr, warmup_lr


@pytest.mark.parametrize(
    ("rule", "batch", "expected"),
    [
        # 0.1 at 64 samples: four times the batch is four times the rate (linear), twice it (sqrt), the same (none).
        (LrScaling.linear, 256, 0.4),
        (LrScaling.sqrt, 256, 0.2),
        (LrScaling.none, 256, 0.1),
        # The reference batch itself keeps the reference rate under every rule.
        (LrScaling.linear, 64, 0.1),
        (LrScaling.sqrt, 64, 0.1),
        # Twice the batch: 2 x 0.1, sqrt(2) x 0.1 = 0.141421...
        (LrScaling.linear, 128, 0.2),
        (LrScaling.sqrt, 128, 0.1414213562373095),
    ],
)
def test_scaled_lr_gives_the_documented_rate(rule, batch, expected):
    assert scaled_lr(0.1, 64, batch, rule) == pytest.approx(expected, rel=1e-12)


def test_warmup_rises_linearly_from_the_start_rate_to_the_rate():
    # From 0.1 to 0.4 over 10 steps: 0.03 a step.
    assert warmup_lr(0.1, 0.4, 0, 10) == pytest.approx(0.1)  # the first step takes the start rate
    assert warmup_lr(0.1, 0.4, 1, 10) == pytest.approx(0.13)
    assert warmup_lr(0.1, 0.4, 5, 10) == pytest.approx(0.25)  # half way, half the rise
    assert warmup_lr(0.1, 0.4, 9, 10) == pytest.approx(0.37)  # the last warm-up step, one step short of the rate
    assert warmup_lr(0.1, 0.4, 10, 10) == 0.4  # the warm-up is over: the rate itself
    assert warmup_lr(0.1, 0.4, 10_000, 10) == 0.4


def test_warmup_rates_rise_every_step():
    rates = [warmup_lr(0.05, 0.2, step, 8) for step in range(12)]
    assert all(a < b for a, b in itertools.pairwise(rates[:9]))
    assert rates[8:] == [0.2] * 4


def test_no_warmup_is_the_rate_from_the_first_step():
    assert warmup_lr(0.1, 0.4, 0, 0) == 0.4
    assert warmup_lr(0.1, 0.4, 3, 0) == 0.4


def test_a_warmup_to_the_same_rate_changes_nothing():
    assert {warmup_lr(0.1, 0.1, step, 10) for step in range(12)} == {0.1}


def test_a_target_is_reached_on_its_side_of_the_bound_only():
    accuracy = Target(metric="val_accuracy", at_least=0.9)
    assert accuracy.reached(0.9) and accuracy.reached(0.95)
    assert not accuracy.reached(0.89) and not accuracy.reached(None) and not accuracy.reached(math.nan)
    loss = Target(metric="val_loss", at_most=0.2)
    assert loss.reached(0.2) and loss.reached(0.1)
    assert not loss.reached(0.21) and not loss.reached(math.inf)
    assert (accuracy.describe(), loss.describe()) == ("val_accuracy >= 0.9", "val_loss <= 0.2")


def test_a_figure_that_is_no_accuracy_never_reaches_an_accuracy_target():
    target = Target(metric="val_accuracy", at_least=0.9)
    # A percentage printed as one (95.0), a hostile 2^70, an infinity, a NaN: none is an accuracy.
    assert [target.reached(value) for value in (95.0, 2.0**70, float("inf"), float("nan"), 0.95)] == [
        False,
        False,
        False,
        False,
        True,
    ]
