"""Time to accuracy's rules on plain values: when a run reached its target and how long its training took, and how
a point of repeats is scored (MLPerf: olympic mean from 5 runs, a run that did not reach counting as the slowest;
the mean with its interval below that)."""

from __future__ import annotations

import pytest

from contract.target import Target
from server.models import EpochPoint
from server.services import statistics
from server.services.targets import as_point, run_target, score

ACCURACY = Target(metric="val_accuracy", at_least=0.9)


def epochs(accuracies: list[float | None], seconds: float = 2.0) -> list[EpochPoint]:
    return [
        EpochPoint(epoch=n, train_loss=1.0 / n, val_accuracy=a, epoch_time_s=seconds + n)
        for n, a in enumerate(accuracies, 1)
    ]


def test_a_target_reached_mid_run_counts_the_epochs_and_their_time_to_it():
    got = run_target(ACCURACY, epochs([0.5, 0.8, 0.91, 0.95, 0.97]))
    assert (got.reached, got.epochs, got.at_last_epoch) == (True, 3, False)
    assert got.time_s == pytest.approx(3.0 + 4.0 + 5.0)  # the sum of the epoch times to the end of the third


def test_a_target_never_reached_gives_no_time_and_keeps_the_best_figure():
    got = run_target(ACCURACY, epochs([0.5, 0.85, 0.8, None]))
    assert (got.reached, got.epochs, got.time_s) == (False, None, None)
    assert (got.best, got.best_epoch) == (0.85, 2)


def test_a_target_reached_at_the_first_epoch():
    got = run_target(ACCURACY, epochs([0.93, 0.95]))
    assert (got.reached, got.epochs, got.time_s) == (True, 1, 3.0)


def test_a_run_that_stopped_at_the_target_reached_it_at_its_last_epoch():
    assert run_target(ACCURACY, epochs([0.5, 0.92])).at_last_epoch
    assert not run_target(ACCURACY, []).reached


def test_a_loss_target_is_reached_at_or_under_its_bound():
    loss = Target(metric="train_loss", at_most=0.25)
    got = run_target(loss, epochs([0.1] * 5))  # train_loss 1/n: 0.25 at epoch 4
    assert (got.epochs, got.best, got.best_epoch) == (4, 0.25, 4)


def test_a_programs_own_metric_is_read_from_its_epochs_metrics():
    target = Target(metric="bleu", at_least=30)
    history = [
        EpochPoint(epoch=0, train_loss=1.0, epoch_time_s=1.5, metrics={"bleu": bleu}) for bleu in (12.0, 29.9, 31.0)
    ]
    got = run_target(target, history)
    # Counted by position: a program that numbers its epochs from 0 still needed three.
    assert (got.reached, got.epochs, got.time_s) == (True, 3, 4.5)


def test_fewer_than_five_runs_score_the_mean_of_those_that_reached_with_its_interval():
    scored = score([10.0, 12.0, 11.0], not_reached=1)
    assert (scored.scoring, scored.n) == ("mean", 3)
    assert scored.time_s == pytest.approx(11.0)
    assert scored.ci_low_s is not None and scored.ci_high_s is not None
    assert scored.ci_low_s < 11.0 < scored.ci_high_s
    single = score([10.0], not_reached=0)
    assert (single.scoring, single.time_s, single.ci_low_s) == ("mean", 10.0, None)


def test_five_runs_score_the_olympic_mean_without_the_fastest_and_the_slowest():
    scored = score([10.0, 30.0, 11.0, 12.0, 1.0], not_reached=0)
    assert (scored.scoring, scored.n, scored.time_s) == ("olympic", 3, 11.0)
    # The interval is the kept runs' (10, 11, 12): Student's t with 2 degrees of freedom, 4.303 x 1 / sqrt(3).
    assert (scored.ci_low_s, scored.ci_high_s) == pytest.approx((11.0 - 2.4843, 11.0 + 2.4843), abs=1e-3)


def test_an_olympic_score_counts_a_run_that_did_not_reach_as_the_slowest():
    scored = score([10.0, 30.0, 11.0, 1.0], not_reached=1)
    assert (scored.scoring, scored.n) == ("olympic", 3)
    assert scored.time_s == pytest.approx((10.0 + 30.0 + 11.0) / 3)  # the fastest (1.0) and the one unreached dropped


def test_two_runs_that_did_not_reach_leave_five_without_a_score():
    assert score([10.0, 11.0, 12.0], not_reached=2).scoring is None
    assert score([], not_reached=3).time_s is None
    assert score([], not_reached=0).n == 0


def test_a_figure_becomes_a_point_only_where_there_is_one():
    assert as_point(2, None, None, None, 0) is None
    assert as_point(2, 3.0, 2.0, 4.0, 3) == statistics.Point(gpus=2, mean=3.0, ci_low=2.0, ci_high=4.0, n=3)
