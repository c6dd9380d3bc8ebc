"""A quality target for time to accuracy, and the learning-rate rules that scale a run's rate with its global batch.

A target names one epoch metric and a bound (`val_accuracy` at least 0.95, `val_loss` at most 0.2); a run reaches it
at the end of the first epoch whose figure meets the bound. The learning-rate rules are Goyal et al.'s ("Accurate,
Large Minibatch SGD", 2017): the rate given is the one for the grid's smallest global batch, and a run whose batch is
k times that takes k times the rate (linear) or sqrt(k) times (sqrt), reached by a linear warm-up over the first
epochs. Torch-free: the server validates and scores with these, the worker stops and schedules with them.
"""

from __future__ import annotations

import math
from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from contract.metrics import CUSTOM_NAME

# The built-in worker's quality figures, one per epoch: what a target on its runs may name. (Perplexity is
# exp(val_loss): a perplexity target P is `val_loss` at most ln P.)
WORKER_METRICS = ("val_accuracy", "val_loss", "train_loss")
# Figures every run reports that measure speed or memory, not quality: no target can name them.
NOT_QUALITY = frozenset(
    {
        "epoch",
        "epoch_time_s",
        "comm_time_s",
        "samples_per_s",
        "tokens_per_s",
        "model_tflops_per_s",
        "mfu",
        "peak_memory_bytes",
        "peak_rss_bytes",
        "step_time_s",
        "step_time_fastest_s",
        "step_time_slowest_s",
    }
)
ACCURACY = "val_accuracy"


class Target(BaseModel):
    """A quality target: `metric` at least `at_least`, or at most `at_most` (exactly one of the two)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    metric: Annotated[
        str,
        Field(
            min_length=1,
            max_length=64,
            description="the epoch metric: val_accuracy, val_loss or train_loss for the built-in worker; for a "
            "program, any figure it prints in its epoch records (its own custom metrics included)",
        ),
    ]
    at_least: Annotated[float | None, Field(allow_inf_nan=False, description="reached when metric >= this")] = None
    at_most: Annotated[float | None, Field(allow_inf_nan=False, description="reached when metric <= this")] = None

    @field_validator("metric")
    @classmethod
    def _quality_name(cls, metric: str) -> str:
        # A field's own check, so that a refusal names `target.metric` rather than the target as a whole.
        if not CUSTOM_NAME.match(metric):
            raise ValueError(f"target metric {metric[:64]!r}: a metric's name is lowercase letters, digits and _")
        if metric in NOT_QUALITY:
            raise ValueError(
                f"target metric {metric!r} measures speed or memory, not quality: name one such as val_accuracy "
                "or val_loss"
            )
        return metric

    @model_validator(mode="after")
    def _one_bound(self) -> Target:
        if (self.at_least is None) == (self.at_most is None):
            raise ValueError(
                f"target on {self.metric!r}: give exactly one bound, at_least (a figure to reach, such as accuracy) "
                "or at_most (a loss to get under)"
            )
        if self.metric == ACCURACY and not 0 < self.bound <= 1:
            raise ValueError(f"target val_accuracy {self.bound}: accuracy is a fraction in (0, 1]; 0.95 is 95 %")
        return self

    @property
    def bound(self) -> float:
        return self.at_least if self.at_least is not None else self.at_most  # type: ignore[return-value]

    def reached(self, value: float | None) -> bool:
        """Whether an epoch's figure meets the target (an epoch without the figure, or with a non-finite one or an
        accuracy outside [0, 1], does not)."""
        if value is None or not math.isfinite(value):
            return False
        if self.metric == ACCURACY and not 0 <= value <= 1:
            return False  # no accuracy at all: a program's bug (a percentage) or a hostile figure, never the target
        return value >= self.bound if self.at_least is not None else value <= self.bound

    def describe(self) -> str:
        """The target in words: 'val_accuracy >= 0.95'."""
        return f"{self.metric} {'>=' if self.at_least is not None else '<='} {self.bound:g}"


def worker_refusal(target: Target, model: str) -> str | None:
    """Why the built-in worker's `model` cannot report the target's metric, or None where it can."""
    if target.metric in WORKER_METRICS:
        return None
    hint = " (perplexity P: val_loss at_most ln P)" if "perplexity" in target.metric else ""
    return (
        f"target metric {target.metric!r}: model '{model}' does not report it; the built-in worker reports "
        f"{', '.join(WORKER_METRICS)} each epoch{hint}"
    )


class LrScaling(StrEnum):
    """How a run's learning rate follows its global batch against the grid's smallest (the reference)."""

    none = "none"
    linear = "linear"  # k times the batch, k times the rate (Goyal et al.)
    sqrt = "sqrt"  # k times the batch, sqrt(k) times the rate (Krizhevsky 2014; Hoffer et al. 2017)


def scaled_lr(reference_lr: float, reference_batch: int, batch: int, rule: LrScaling) -> float:
    """The rate for a run of `batch` samples per step, by `rule`, from the rate at the reference batch."""
    ratio = batch / reference_batch
    if rule is LrScaling.linear:
        return reference_lr * ratio
    if rule is LrScaling.sqrt:
        return reference_lr * math.sqrt(ratio)
    return reference_lr


def warmup_lr(start_lr: float, lr: float, step: int, warmup_steps: int) -> float:
    """The rate at optimizer step `step` (0 first) of a linear warm-up from `start_lr` to `lr` over `warmup_steps`
    steps (Goyal et al.'s gradual warm-up: the rate rises a little every step, not every epoch); `lr` after it."""
    if warmup_steps <= 0 or step >= warmup_steps:
        return lr
    return start_lr + (lr - start_lr) * step / warmup_steps
