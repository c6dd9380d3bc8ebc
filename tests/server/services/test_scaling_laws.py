"""The scaling laws recover known parameters, refuse too short a series, and advise in plain words."""

from __future__ import annotations

import math

import numpy as np
import pytest

from server.services.scaling_laws import (
    HORIZON,
    MAX_CURVE_POINTS,
    AmdahlFit,
    Fits,
    UslFit,
    amdahl,
    curve_counts,
    fit,
    predict,
    recommendation,
    usl,
)

COUNTS = [1, 2, 4, 8, 16, 32]


def speedups(law, counts, *params):
    """Exact synthetic speed-ups relative to the smallest count."""
    return amdahl_or_usl(law, np.asarray(counts, dtype=np.float64) / min(counts), *params).tolist()


def amdahl_or_usl(law, p, *params):
    return amdahl(p, *params) if law == "amdahl" else usl(p, *params)


def test_amdahl_recovers_its_serial_fraction():
    fits = fit(COUNTS, speedups("amdahl", COUNTS, 0.1))
    assert fits.refused is None and fits.amdahl is not None
    assert fits.amdahl.serial_fraction == pytest.approx(0.1, rel=0.01)
    assert fits.amdahl.r2 == pytest.approx(1.0, abs=1e-9)


def test_usl_recovers_sigma_and_kappa():
    fits = fit(COUNTS, speedups("usl", COUNTS, 0.05, 0.001))
    assert fits.usl is not None
    assert fits.usl.sigma == pytest.approx(0.05, rel=0.01)
    assert fits.usl.kappa == pytest.approx(0.001, rel=0.01)
    assert fits.usl.r2 == pytest.approx(1.0, abs=1e-9)
    # Amdahl's law cannot bend down: it fits this series worse.
    assert fits.amdahl is not None and fits.amdahl.r2 < fits.usl.r2


def test_a_baseline_of_two_gpus_is_fitted_in_relative_counts():
    counts = [2, 4, 8, 16, 32, 64]
    fits = fit(counts, speedups("usl", counts, 0.05, 0.001))
    assert fits.baseline_gpus == 2
    assert fits.usl is not None and fits.usl.peak_gpus is not None
    assert fits.usl.sigma == pytest.approx(0.05, rel=0.01)
    assert fits.usl.kappa == pytest.approx(0.001, rel=0.01)
    assert fits.usl.peak_gpus == pytest.approx(2 * math.sqrt(0.95 / 0.001), rel=0.01)
    amdahl_fits = fit(counts, speedups("amdahl", counts, 0.1))
    assert amdahl_fits.amdahl is not None
    assert amdahl_fits.amdahl.serial_fraction == pytest.approx(0.1, rel=0.01)


def test_peak_matches_the_analytic_peak():
    fits = fit(COUNTS, speedups("usl", COUNTS, 0.05, 0.001))
    assert fits.usl is not None and fits.usl.peak_gpus is not None
    assert fits.usl.peak_gpus == pytest.approx(math.sqrt(0.95 / 0.001), rel=0.01)
    # The curve is highest there: one GPU either side is slower.
    peak = fits.usl.peak_gpus
    at = usl(np.array([peak - 1, peak, peak + 1]), fits.usl.sigma, fits.usl.kappa)
    assert at[1] > at[0] and at[1] > at[2]


def test_amdahl_data_gives_the_usl_no_peak():
    fits = fit(COUNTS, speedups("amdahl", COUNTS, 0.1))
    assert fits.usl is not None
    assert fits.usl.kappa == 0.0 and fits.usl.peak_gpus is None
    assert fits.usl.sigma == pytest.approx(0.1, rel=0.01)


def test_repeats_are_fitted_as_points_of_their_own():
    counts = [1, 1, 2, 2, 4, 4, 8, 8]
    values = speedups("amdahl", counts, 0.2)
    noisy = [v * f for v, f in zip(values, [1.0, 1.0, 1.02, 0.98, 1.03, 0.97, 1.01, 0.99], strict=True)]
    fits = fit(counts, noisy)
    assert fits.amdahl is not None
    assert fits.amdahl.serial_fraction == pytest.approx(0.2, rel=0.05)
    assert 0.9 < fits.amdahl.r2 < 1.0


@pytest.mark.parametrize(("counts", "distinct"), [([1, 2], 2), ([4, 4, 8, 8], 2), ([2], 1), ([], 0)])
def test_fewer_than_three_counts_are_refused(counts, distinct):
    fits = fit(counts, [1.0] * len(counts))
    assert (fits.amdahl, fits.usl) == (None, None)
    assert fits.refused == f"a fit needs at least 3 distinct GPU counts; this series has {distinct}"
    assert predict(fits, 1, 8) == []
    assert recommendation(fits, 1, 2) == f"A fit needs at least 3 distinct GPU counts; this series has {distinct}."


def test_speedups_that_are_no_numbers_are_refused():
    fits = fit([1, 2, 4], [1.0, float("nan"), 3.0])
    assert fits.refused is not None and "finite, positive" in fits.refused


def test_counts_and_speedups_must_pair_up():
    with pytest.raises(ValueError, match="3 GPU counts but 2 speed-ups"):
        fit([1, 2, 4], [1.0, 2.0])


def test_flat_speedups_fit_with_r2_one():
    fits = fit([1, 2, 4], [1.0, 1.0, 1.0])
    assert fits.amdahl is not None and fits.usl is not None
    assert fits.amdahl.serial_fraction == pytest.approx(1.0, abs=1e-6)
    assert fits.amdahl.r2 == 1.0
    assert fits.usl.peak_gpus is None


def test_predict_draws_both_laws_at_every_count_of_a_small_range():
    fits = fit(COUNTS, speedups("usl", COUNTS, 0.05, 0.001))
    curve = predict(fits, 1, HORIZON * 32)
    assert {p.law for p in curve} == {"amdahl", "usl"}
    usl_curve = {p.gpus: p.speedup for p in curve if p.law == "usl"}
    assert sorted(usl_curve) == curve_counts(1, 128)
    assert usl_curve[1] == pytest.approx(1.0)
    assert usl_curve[16] == pytest.approx(speedups("usl", [1, 16], 0.05, 0.001)[1], rel=1e-6)


def test_curve_counts():
    assert curve_counts(2, 10) == list(range(2, 11))
    wide = curve_counts(4, 4096)
    assert wide[0] == 4 and wide[-1] == 4096
    assert len(wide) <= MAX_CURVE_POINTS
    assert wide == sorted(set(wide))


def test_predict_is_relative_to_the_fits_baseline():
    counts = [2, 4, 8]
    fits = fit(counts, speedups("amdahl", counts, 0.1))
    at = {p.gpus: p.speedup for p in predict(fits, 2, 32) if p.law == "amdahl"}
    assert at[2] == pytest.approx(1.0)
    assert at[32] == pytest.approx(16 / (1 + 0.1 * 15), rel=0.01)


def test_recommendation_names_the_peak():
    fits = fit(COUNTS, speedups("usl", COUNTS, 0.05, 0.001))
    text = recommendation(fits, 1, 32)
    # efficiency 1 / (1 + 0.05 (N - 1) + 0.001 N (N - 1)) >= 0.8 up to N = 5
    assert text == (
        "Efficiency stays at or above 80 % up to 5 GPUs (USL). Past 31 GPUs adding GPUs makes it slower (USL peak)."
    )


def test_recommendation_when_efficiency_never_drops():
    fits = fit(COUNTS, speedups("amdahl", COUNTS, 0.001))
    assert recommendation(fits, 1, 32) == (
        "Efficiency stays at or above 80 % up to 128 GPUs, 4x the largest count measured (USL). "
        "No peak within 4x the largest count measured (128 GPUs)."
    )


def test_recommendation_when_efficiency_drops_at_once():
    fits = Fits(amdahl=AmdahlFit(serial_fraction=0.9, r2=1.0), usl=None, refused=None, baseline_gpus=2)
    # 3 GPUs from a baseline of 2: efficiency 1 / (1 + 0.9 x 0.5) = 0.69
    assert recommendation(fits, 2, 16) == (
        "Efficiency falls under 80 % as soon as GPUs are added to the baseline of 2 GPUs (Amdahl). "
        "No peak within 4x the largest count measured (64 GPUs)."
    )


def test_recommendation_when_the_peak_is_at_the_baseline():
    fits = Fits(amdahl=None, usl=UslFit(sigma=0.9, kappa=0.5, r2=1.0, peak_gpus=0.45), refused=None, baseline_gpus=1)
    assert recommendation(fits, 1, 8).endswith(
        "Adding GPUs to the baseline of 1 GPU already makes it slower (USL peak)."
    )
