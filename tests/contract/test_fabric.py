"""The fabric's arithmetic against nccl-tests' definitions, and the latency-bandwidth fit and its error."""

from __future__ import annotations

import random

import pytest

from contract.fabric import AlphaBeta, Collective, Sample, bus_bandwidth, bus_factor, fit_alpha_beta, fit_error


@pytest.mark.parametrize(
    ("collective", "ranks", "factor"),
    [
        # nccl-tests doc/PERFORMANCE.md: all-reduce 2(n-1)/n, all-gather and reduce-scatter (n-1)/n, broadcast 1.
        (Collective.all_reduce, 2, 1.0),
        (Collective.all_reduce, 4, 1.5),
        (Collective.all_reduce, 8, 1.75),
        (Collective.all_gather, 4, 0.75),
        (Collective.reduce_scatter, 8, 0.875),
        (Collective.broadcast, 8, 1.0),
        (Collective.send_recv, 2, 1.0),
        (Collective.all_reduce, 1, 0.0),
    ],
)
def test_bus_factors_are_nccl_tests(collective, ranks, factor):
    assert bus_factor(collective, ranks) == pytest.approx(factor)


def test_bus_bandwidth_of_an_all_reduce_on_eight_ranks():
    # 1 GiB in 10 ms: algbw 107.4 GB/s, busbw 1.75 times that.
    assert bus_bandwidth(Collective.all_reduce, 8, 2**30, 0.01) == pytest.approx(2**30 / 0.01 * 1.75)


def test_one_rank_moves_nothing():
    assert AlphaBeta(1e-5, 1e9).time_s(Collective.all_reduce, 1, 2**20) == 0


@pytest.mark.parametrize(("alpha", "beta"), [(20e-6, 10e9), (5e-3, 200e6), (0.0, 1e9)])
def test_the_fit_recovers_known_latency_and_bandwidth_from_noisy_timings(alpha, beta):
    truth = AlphaBeta(alpha, beta)
    noise = random.Random(7)
    samples = [
        Sample(collective, ranks, 2**k, truth.time_s(collective, ranks, 2**k) * noise.uniform(0.97, 1.03))
        for k in range(10, 28, 2)
        for collective, ranks in ((Collective.all_reduce, 4), (Collective.all_gather, 4), (Collective.broadcast, 2))
    ]
    fitted = fit_alpha_beta(samples)
    assert fitted.beta_bytes_per_s == pytest.approx(beta, rel=0.05)
    assert fitted.alpha_s == pytest.approx(alpha, rel=0.1, abs=1e-7)


def test_a_fit_needs_two_sizes_and_time_that_grows():
    with pytest.raises(ValueError, match="two or more message sizes"):
        fit_alpha_beta([Sample(Collective.all_reduce, 2, 1024, 1e-4)] * 3)
    flat = [Sample(Collective.all_reduce, 2, 2**k, 1e-3 / k) for k in range(10, 20)]
    with pytest.raises(ValueError, match="do not grow"):
        fit_alpha_beta(flat)


def test_the_fit_s_error_is_the_root_mean_square_of_its_relative_errors():
    fit = AlphaBeta(1e-4, 1e9)
    exact = [Sample(Collective.all_reduce, 2, 2**k, fit.time_s(Collective.all_reduce, 2, 2**k)) for k in range(10, 20)]
    assert fit_error(fit, exact) == pytest.approx(0, abs=1e-12)
    # Measured 10 % slower at one size and 20 % faster at another: each the model's time over the measured one, less 1.
    off = [
        Sample(Collective.broadcast, 2, 1000, fit.time_s(Collective.broadcast, 2, 1000) * 1.1),
        Sample(Collective.broadcast, 2, 10**6, fit.time_s(Collective.broadcast, 2, 10**6) * 0.8),
    ]
    expected = ((1 / 1.1 - 1) ** 2 / 2 + (1 / 0.8 - 1) ** 2 / 2) ** 0.5
    assert fit_error(fit, off) == pytest.approx(expected)
    # One rank moves nothing: no error to count; nothing at all, none either.
    assert fit_error(fit, [Sample(Collective.all_reduce, 1, 1024, 1e-3)]) == 0
    assert fit_error(fit, []) == 0
