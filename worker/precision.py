"""Numeric precision of training: fp32, bf16 autocast, or fp16 autocast with loss scaling (CUDA only)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from contract.spec import Precision


class PrecisionError(ValueError):
    """The requested precision cannot run on this device."""


class PrecisionPolicy:
    def __init__(self, precision: Precision, device: torch.device) -> None:
        if precision is Precision.fp16 and device.type != "cuda":
            raise PrecisionError("fp16 needs CUDA (its loss scaling is for GPUs); on CPU use bf16 or fp32")
        self.precision = precision
        self.device = device
        dtypes = {Precision.bf16: torch.bfloat16, Precision.fp16: torch.float16}
        self.dtype = dtypes.get(precision)
        # fp16 gradients underflow without scaling; bf16 has fp32's range and needs none.
        self.scaler = torch.amp.GradScaler(device.type, enabled=precision is Precision.fp16)

    @contextlib.contextmanager
    def autocast(self) -> Iterator[None]:
        if self.dtype is None:
            yield
            return
        with torch.autocast(self.device.type, dtype=self.dtype):
            yield

    def backward(self, loss: torch.Tensor) -> None:
        self.scaler.scale(loss).backward()

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        self.scaler.step(optimizer)
        self.scaler.update()
