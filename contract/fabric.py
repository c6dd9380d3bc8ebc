"""The fabric's arithmetic, as nccl-tests defines it, shared by the probe (worker), the store (server) and the
prediction.

A collective moving `nbytes` (the size of one rank's buffer, as nccl-tests counts it) in `seconds` has the algorithm
bandwidth nbytes / seconds. Its bus bandwidth multiplies that by the share of the data each link must carry, so that
a fabric's figure does not depend on the number of ranks and can be set against the hardware's link speed:
2(n-1)/n for an all-reduce, (n-1)/n for an all-gather and a reduce-scatter, 1 for a broadcast and a point-to-point
send. (nccl-tests, doc/PERFORMANCE.md.)

The time model is the latency-bandwidth one, per tier (within a node, across nodes): a collective costs
alpha + nbytes x factor / beta, where beta is the bus bandwidth large messages reach. One (alpha, beta) per tier then
predicts every collective at every size and rank count. It can miss by about 20 % (GenModel), which the prediction's
tolerance states.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal


class Collective(StrEnum):
    all_reduce = "all_reduce"
    all_gather = "all_gather"
    reduce_scatter = "reduce_scatter"
    broadcast = "broadcast"
    send_recv = "send_recv"


class Tier(StrEnum):
    """Where the ranks of a collective are: all on one node, or on several."""

    intra_node = "intra_node"
    inter_node = "inter_node"


# What a pre-flight's expected band rests on: the cluster profile's fabric_reference for its tier and backend, or the
# spread of earlier probes of its shape (server/services/fabric.py: expected). A scaling card carries it.
BandBasis = Literal["profile_reference", "earlier_probes"]


def bus_factor(collective: Collective, ranks: int) -> float:
    """nccl-tests' factor from algorithm to bus bandwidth."""
    if ranks < 1:
        raise ValueError(f"a collective needs at least one rank, not {ranks}")
    if collective is Collective.all_reduce:
        return 2 * (ranks - 1) / ranks
    if collective in (Collective.all_gather, Collective.reduce_scatter):
        return (ranks - 1) / ranks
    return 1.0


def algorithm_bandwidth(nbytes: int, seconds: float) -> float:
    """Bytes per second: the buffer's size over the collective's time."""
    if seconds <= 0:
        raise ValueError(f"a collective takes a positive time, not {seconds}")
    return nbytes / seconds


def bus_bandwidth(collective: Collective, ranks: int, nbytes: int, seconds: float) -> float:
    return algorithm_bandwidth(nbytes, seconds) * bus_factor(collective, ranks)


@dataclass(frozen=True)
class AlphaBeta:
    """One tier's latency (seconds per collective) and bus bandwidth (bytes per second)."""

    alpha_s: float
    beta_bytes_per_s: float

    def time_s(self, collective: Collective, ranks: int, nbytes: float) -> float:
        """A collective's predicted time; nothing moves, and nothing is waited for, on one rank."""
        factor = bus_factor(collective, ranks)
        if factor == 0:
            return 0.0
        return self.alpha_s + nbytes * factor / self.beta_bytes_per_s


@dataclass(frozen=True)
class Sample:
    """One timed collective: what the probe measured."""

    collective: Collective
    ranks: int
    nbytes: int
    seconds: float


def fit_alpha_beta(samples: Sequence[Sample]) -> AlphaBeta:
    """Least squares of time = alpha + (nbytes x factor) / beta, in relative error.

    Relative error, because the sizes span six orders of magnitude: in absolute error the largest messages alone would
    set both parameters and the latency would be lost. alpha is kept at or above zero.
    """
    points = [(s.nbytes * bus_factor(s.collective, s.ranks), s.seconds) for s in samples]
    points = [(x, t) for x, t in points if x > 0 and t > 0 and math.isfinite(t)]
    if len({x for x, _ in points}) < 2:
        raise ValueError("fitting latency and bandwidth needs timings at two or more message sizes")
    # Weighted normal equations for t = a + b x with weights 1 / t^2 (b = 1 / beta).
    weights = [1 / (t * t) for _, t in points]
    sw = sum(weights)
    sx = sum(w * x for w, (x, _) in zip(weights, points, strict=True))
    sxx = sum(w * x * x for w, (x, _) in zip(weights, points, strict=True))
    st = sum(w * t for w, (_, t) in zip(weights, points, strict=True))
    sxt = sum(w * x * t for w, (x, t) in zip(weights, points, strict=True))
    det = sw * sxx - sx * sx
    a = (st * sxx - sx * sxt) / det
    b = (sw * sxt - sx * st) / det
    if a < 0:  # no latency can be negative: fit the bandwidth alone, through the origin
        a, b = 0.0, sxt / sxx
    if b <= 0:
        raise ValueError("the timings do not grow with the message size: no bandwidth can be fitted from them")
    return AlphaBeta(alpha_s=a, beta_bytes_per_s=1 / b)


def fit_error(fit: AlphaBeta, samples: Sequence[Sample]) -> float:
    """How well `fit` explains `samples`: the root mean square of each timing's relative error, in the relative error
    fit_alpha_beta minimises (0.1: its times are typically 10 % off the measured ones). 0 without samples."""
    errors = [
        (fit.time_s(s.collective, s.ranks, s.nbytes) - s.seconds) / s.seconds
        for s in samples
        if s.seconds > 0 and math.isfinite(s.seconds) and bus_factor(s.collective, s.ranks) > 0
    ]
    return math.sqrt(sum(e * e for e in errors) / len(errors)) if errors else 0.0
