"""Numbers as sentences show them: rounded to what they can mean, in plain decimals (never `5e-324`), and GPU counts
in whole GPUs (never fewer than one). Every sentence of the scaling analysis writes its numbers through here."""

from __future__ import annotations

import math

# Significant digits a sentence gives a fitted figure: the speed-ups it is fitted to rarely hold more.
DIGITS = 2


def rounded(value: float, resolution: float, digits: int = DIGITS) -> str:
    """`value` to `digits` significant digits, in plain decimals; `≈ 0` where it is smaller than `resolution`, the
    least that means anything (a fit's parameter whose effect is below rounding), and `0` where it is 0."""
    if not math.isfinite(value):
        return "not finite"
    if value == 0:
        return "0"
    if abs(value) < resolution:
        return "≈ 0"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    text = f"{value:.{decimals}f}"
    return text


def gpus(count: float) -> str:
    """A GPU count in words, rounded to a whole GPU and at least one: `1 GPU`, `16 GPUs`."""
    whole = max(1, round(count)) if math.isfinite(count) else 1
    return f"{whole} GPU" if whole == 1 else f"{whole} GPUs"
