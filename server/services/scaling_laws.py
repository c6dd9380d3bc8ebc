"""Amdahl's law and the Universal Scalability Law fitted to a series' speed-ups, their curves and what they advise.

Speed-ups are relative to the series' smallest GPU count N0, which may be more than one GPU, so both laws are
written in the relative count p = N / N0, where the baseline has p = 1 and speed-up 1:
    Amdahl: S(p) = p / (1 + s (p - 1))
    USL:    S(p) = p / (1 + sigma (p - 1) + kappa p (p - 1))
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import NDArray
from scipy.optimize import least_squares  # type: ignore[import-untyped]  # scipy ships no type information

from server.services import rounding

# Two parameters for the USL and the baseline, which every curve passes through by construction.
MIN_COUNTS = 3
# Below this efficiency, the extra GPUs buy too little to be worth asking for.
EFFICIENT = 0.8
# How far past the largest count measured the curves are drawn and the advice looks.
HORIZON = 4
# Curves over wider ranges than this many integer counts are drawn at this many geometrically spaced counts.
MAX_CURVE_POINTS = 64
# Below this r², a law does not describe the points it was fitted to (r² = 0.9: it leaves a tenth of their spread
# unexplained, where a law that holds leaves rounding): it is said so, not drawn, and advises nothing.
R2_BOUND = 0.9
# A fitted parameter whose effect on the speed-up up to the horizon stays under this share is rounding: shown as 0.
MEANINGFUL = 0.005

Floats = NDArray[np.float64]


@dataclass(frozen=True)
class AmdahlFit:
    """Amdahl's law fitted: the serial fraction s and the fit's coefficient of determination."""

    serial_fraction: float
    r2: float

    @property
    def describes_points(self) -> bool:
        return describes(self.r2)


@dataclass(frozen=True)
class UslFit:
    """The USL fitted: contention sigma, coherency kappa, r2, and the GPU count of peak speed (None: no peak)."""

    sigma: float
    kappa: float
    r2: float
    peak_gpus: float | None

    @property
    def describes_points(self) -> bool:
        return describes(self.r2)


@dataclass(frozen=True)
class Fits:
    """Both laws fitted to one series relative to its baseline, or the sentence saying why they were not."""

    amdahl: AmdahlFit | None
    usl: UslFit | None
    refused: str | None
    baseline_gpus: int | None = None


@dataclass(frozen=True)
class Predicted:
    """One law's predicted speed-up at one GPU count."""

    gpus: int
    law: Literal["amdahl", "usl"]
    speedup: float


def amdahl(p: Floats, serial_fraction: float) -> Floats:
    """Amdahl's speed-up at relative counts p."""
    return p / (1 + serial_fraction * (p - 1))


def usl(p: Floats, sigma: float, kappa: float) -> Floats:
    """The USL's speed-up at relative counts p."""
    return p / (1 + sigma * (p - 1) + kappa * p * (p - 1))


def usl_peak(sigma: float, kappa: float) -> float | None:
    """The relative count where the USL's speed-up peaks, sqrt((1 - sigma) / kappa); None when kappa is 0."""
    return math.sqrt((1 - sigma) / kappa) if kappa > 0 else None


def describes(r2: float) -> bool:
    """Whether a law with this r² describes the points it was fitted to (R2_BOUND)."""
    return r2 >= R2_BOUND


def r_squared(observed: Floats, fitted: Floats) -> float:
    """1 - SS_res / SS_tot; r2 may be negative for a fit worse than the mean.

    When all speed-ups are equal (SS_tot = 0) the ratio is undefined: r2 is 1 when the fit passes through them
    (residual below 1e-12 of the speed-ups' sum of squares, i.e. rounding), else 0.
    """
    ss_res = float(np.sum((observed - fitted) ** 2))
    ss_tot = float(np.sum((observed - observed.mean()) ** 2))
    if ss_tot == 0:
        return 1.0 if ss_res <= 1e-12 * float(np.sum(observed**2)) else 0.0
    return 1 - ss_res / ss_tot


def _least_squares(
    model: Callable[..., Floats], p: Floats, speedups: Floats, start: list[float], upper: list[float]
) -> list[float]:
    """The parameters in [0, upper] that minimise the squared residuals of model(p, *parameters)."""
    result = least_squares(
        lambda params: model(p, *params) - speedups,
        start,
        bounds=([0.0] * len(start), upper),
        # kappa is typically a thousandth of sigma: scale steps by the Jacobian so both converge alike.
        x_scale="jac",
        ftol=1e-15,
        xtol=1e-15,
        gtol=1e-15,
        max_nfev=10_000,
    )
    return [float(value) for value in result.x]


def fit(gpus: Sequence[int], speedups: Sequence[float]) -> Fits:
    """Fit both laws to a series' speed-ups relative to its smallest GPU count, by bounded least squares.

    Repeats of a GPU count are fitted as they are, each a point of its own (not their mean): a count repeated
    more often weighs more, as its mean is surer. Bounds: 0 <= s <= 1, 0 <= sigma <= 1, kappa >= 0; the USL's
    kappa is 0 (no peak) unless it fits the speed-ups better than Amdahl's law does.
    """
    if len(gpus) != len(speedups):
        raise ValueError(f"{len(gpus)} GPU counts but {len(speedups)} speed-ups")
    distinct = len(set(gpus))
    if distinct < MIN_COUNTS:
        return Fits(
            amdahl=None,
            usl=None,
            refused=f"a fit needs at least {MIN_COUNTS} distinct GPU counts; this series has {distinct}",
        )
    if min(gpus) < 1:
        raise ValueError(f"GPU counts must be positive, not {min(gpus)}")
    if not all(math.isfinite(value) and value > 0 for value in speedups):
        return Fits(amdahl=None, usl=None, refused="a fit needs finite, positive speed-ups; this series has others")
    baseline = min(gpus)
    p = np.asarray(gpus, dtype=np.float64) / baseline
    observed = np.asarray(speedups, dtype=np.float64)

    (serial,) = _least_squares(amdahl, p, observed, [0.05], [1.0])
    # Contention is a fraction of the work, so sigma lies in [0, 1] as s does.
    sigma, kappa = _least_squares(usl, p, observed, [0.05, 1e-4], [1.0, np.inf])
    # The USL with kappa = 0 is Amdahl's law. The optimiser stops a rounding step short of the bound, leaving a
    # kappa like 1e-20 whose "peak" lies at billions of GPUs: keep kappa only where it betters Amdahl's fit by
    # more than rounding.
    rounding = 1e-12 * float(np.sum(observed**2))
    amdahl_residual = float(np.sum((amdahl(p, serial) - observed) ** 2))
    if float(np.sum((usl(p, sigma, kappa) - observed) ** 2)) >= amdahl_residual - rounding:
        sigma, kappa = serial, 0.0
    peak = usl_peak(sigma, kappa)
    return Fits(
        amdahl=AmdahlFit(serial_fraction=serial, r2=r_squared(observed, amdahl(p, serial))),
        usl=UslFit(
            sigma=sigma,
            kappa=kappa,
            r2=r_squared(observed, usl(p, sigma, kappa)),
            peak_gpus=None if peak is None else baseline * peak,
        ),
        refused=None,
        baseline_gpus=baseline,
    )


def curve_counts(gpus_from: int, gpus_to: int) -> list[int]:
    """Every integer count from gpus_from to gpus_to, or MAX_CURVE_POINTS of them spaced evenly on a log scale."""
    if gpus_to - gpus_from + 1 <= MAX_CURVE_POINTS:
        return list(range(gpus_from, gpus_to + 1))
    spaced = np.geomspace(gpus_from, gpus_to, MAX_CURVE_POINTS)
    return sorted({gpus_from, gpus_to, *(int(value) for value in np.rint(spaced))})


def predict(fits: Fits, gpus_from: int, gpus_to: int) -> list[Predicted]:
    """Both laws' speed-ups at the counts of curve_counts(gpus_from, gpus_to), relative to the fits' baseline.

    The comparison draws from the series' smallest count to HORIZON times its largest. A refused fit predicts
    nothing.
    """
    if fits.refused is not None or fits.baseline_gpus is None:
        return []
    counts = curve_counts(gpus_from, gpus_to)
    p = np.asarray(counts, dtype=np.float64) / fits.baseline_gpus
    predicted: list[Predicted] = []
    if fits.amdahl is not None:
        values = amdahl(p, fits.amdahl.serial_fraction)
        predicted += [Predicted(gpus=n, law="amdahl", speedup=float(s)) for n, s in zip(counts, values, strict=True)]
    if fits.usl is not None:
        values = usl(p, fits.usl.sigma, fits.usl.kappa)
        predicted += [Predicted(gpus=n, law="usl", speedup=float(s)) for n, s in zip(counts, values, strict=True)]
    return predicted


def advising_law(fits: Fits) -> Literal["usl", "amdahl"] | None:
    """The law a recommendation reads: the USL where it describes the points (it alone can peak), else Amdahl's law
    where it does; None where no law was fitted or none describes the points."""
    if fits.usl is not None and fits.usl.describes_points:
        return "usl"
    if fits.amdahl is not None and fits.amdahl.describes_points:
        return "amdahl"
    return None


def _undescribed(fits: Fits) -> str:
    """Why no law advises: each fitted law's r² against R2_BOUND."""
    laws = [(name, law.r2) for name, law in (("Amdahl's law", fits.amdahl), ("the USL", fits.usl)) if law is not None]
    if not laws:
        return "No law could be fitted to this series."
    found = " and ".join(f"{name} r² {rounding.rounded(r2, 0.005)}" for name, r2 in laws)
    return (
        f"No recommendation: no law describes these points ({found}, below {R2_BOUND}), so neither can say how far "
        "adding GPUs pays off. Look at the points' flags, and add repeats or GPU counts."
    )


def recommendation(fits: Fits, baseline_gpus: int, largest_gpus: int) -> str:
    """One or two sentences: how far efficiency stays at EFFICIENT or above, and where adding GPUs slows it down.

    It reads the law advising_law names, efficiency(N) = S(N) / (N / N0), up to HORIZON times the largest count
    measured; where no law describes the points (r² below R2_BOUND), it says so and advises nothing.
    """
    if fits.refused is not None:
        return fits.refused[0].upper() + fits.refused[1:] + "."
    law = advising_law(fits)
    if law is None:
        return _undescribed(fits)
    horizon = HORIZON * largest_gpus
    counts = np.arange(baseline_gpus, horizon + 1, dtype=np.float64)
    p = counts / baseline_gpus
    usl_fit = fits.usl if law == "usl" else None
    if usl_fit is not None:
        name, efficiency = "USL", usl(p, usl_fit.sigma, usl_fit.kappa) / p
    elif fits.amdahl is not None:
        name, efficiency = "Amdahl", amdahl(p, fits.amdahl.serial_fraction) / p
    else:  # advising_law named one of the two
        return _undescribed(fits)
    threshold = f"{EFFICIENT:.0%}".replace("%", " %")
    # Both laws' efficiency falls as p grows, so the efficient counts are the first ones.
    efficient = int(counts[efficiency >= EFFICIENT].max())
    if efficient >= horizon:
        first = (
            f"Efficiency stays at or above {threshold} up to {rounding.gpus(horizon)}, "
            f"{HORIZON}x the largest count measured ({name})."
        )
    elif efficient == baseline_gpus:
        first = (
            f"Efficiency falls under {threshold} as soon as GPUs are added "
            f"to the baseline of {rounding.gpus(baseline_gpus)} ({name})."
        )
    else:
        first = f"Efficiency stays at or above {threshold} up to {rounding.gpus(efficient)} ({name})."
    peak = usl_fit.peak_gpus if usl_fit else None
    second = _peak_words(peak, baseline_gpus, horizon)
    within = peak is not None and peak <= horizon
    return f"{first} {second[0].upper()}{second[1:]}{' (USL peak)' if within else ''}."


def _peak_words(peak: float | None, baseline_gpus: int, horizon: int) -> str:
    """Where adding GPUs starts to slow the series (a clause), said only where it lies within the range the advice
    looks at: a peak below the baseline or past the horizon is said as such, never as a count."""
    if peak is None or peak > horizon:
        return f"no peak within {HORIZON}x the largest count measured ({rounding.gpus(horizon)})"
    if peak <= baseline_gpus:
        return f"adding GPUs to the baseline of {rounding.gpus(baseline_gpus)} already makes it slower"
    return f"past {rounding.gpus(peak)} adding GPUs makes it slower"


def summary(fits: Fits, baseline_gpus: int, largest_gpus: int) -> str:
    """Each law's parameters in words, rounded to what they can mean (a parameter whose effect on the speed-up up to
    HORIZON times the largest count stays under MEANINGFUL shows as 0), each marked where it does not describe the
    points; or why none was fitted."""
    if fits.refused is not None:
        return f"No law fitted: {fits.refused}."
    horizon = HORIZON * largest_gpus
    p_far = max(horizon / baseline_gpus, 2.0)
    serial_unit, coherency_unit = MEANINGFUL / (p_far - 1), MEANINGFUL / (p_far * (p_far - 1))
    parts = []
    if fits.amdahl is not None:
        amdahl_fit = fits.amdahl
        parts.append(
            f"Amdahl: serial fraction {rounding.rounded(amdahl_fit.serial_fraction, serial_unit)}"
            f"{_r2_words(amdahl_fit.r2)}."
        )
    if fits.usl is not None:
        usl_fit = fits.usl
        # The peak of a law that does not describe the points is no peak of theirs.
        peak = f", {_peak_words(usl_fit.peak_gpus, baseline_gpus, horizon)}" if usl_fit.describes_points else ""
        parts.append(
            f"USL: contention \N{GREEK SMALL LETTER SIGMA} {rounding.rounded(usl_fit.sigma, serial_unit)}, "
            f"coherency \N{GREEK SMALL LETTER KAPPA} {rounding.rounded(usl_fit.kappa, coherency_unit)}"
            f"{_r2_words(usl_fit.r2)}{peak}."
        )
    return " ".join(parts)


def _r2_words(r2: float) -> str:
    shown = rounding.rounded(r2, 0.005)
    if describes(r2):
        return f" (r² {shown})"
    return f" (r² {shown}: does not describe the points, r² below {R2_BOUND}; not drawn)"
