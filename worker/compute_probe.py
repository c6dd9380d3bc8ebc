"""The compute probe: a dense matrix multiply at the run's precision on its device, the best sustained TFLOP/s over a
few sizes being the measured peak a run's MFU is divided by.

A datasheet's peak is a ceiling no real kernel reaches, and on a CPU there is none; the measured peak says what this
device, its clocks, its threads and its libraries really give a matrix multiply at this precision now. Cheap by
design: sizes stop at a time budget (well under a second on CPU, a second or two on a GPU).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import torch

from contract.records import MAX_TFLOPS, ComputeRecord
from contract.spec import Precision

_DTYPES = {Precision.fp32: torch.float32, Precision.bf16: torch.bfloat16, Precision.fp16: torch.float16}
# n of each n x n multiply: a GPU needs large ones to reach its peak, a CPU's cores are saturated by small ones.
CPU_SIZES = (256, 512, 1024)
GPU_SIZES = (2048, 4096, 8192)
# Each size is timed for about this long after its warm-up, and the probe stops trying larger sizes past its budget.
SIZE_SECONDS = {"cpu": 0.12, "cuda": 0.3}
BUDGET_SECONDS = {"cpu": 0.8, "cuda": 3.0}


def operator_peak_tflops() -> float | None:
    """SCALELAB_PEAK_TFLOPS: the operator's figure for one device's peak, which the worker's own MFU divides by
    instead of the measured one where it is set (a GPU the datasheet table does not know, say)."""
    value = os.environ.get("SCALELAB_PEAK_TFLOPS")
    return float(value) if value else None


@dataclass(frozen=True)
class Probe:
    sizes: list[int]
    size_tflops: list[float]
    seconds: float

    @property
    def best_tflops(self) -> float:
        return max(self.size_tflops)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _sustained(a: torch.Tensor, b: torch.Tensor, seconds: float) -> float:
    """TFLOP/s of a @ b repeated for about `seconds`, after one warm-up."""
    n = a.shape[0]
    torch.matmul(a, b)
    _sync(a.device)
    # A first timing sizes the batch of repeats, so that the clock is read rarely (a GPU's launches are queued).
    started = time.perf_counter()
    torch.matmul(a, b)
    _sync(a.device)
    once = max(time.perf_counter() - started, 1e-6)
    repeats = max(1, min(1000, int(seconds / once)))
    started = time.perf_counter()
    done = 0
    while done < repeats:
        torch.matmul(a, b)
        done += 1
        # On a CPU each product ends before the next starts: a machine that turned busy after the first timing
        # stops the probe at twice its time instead of stretching it (a GPU's queued products cannot be clocked so).
        if a.device.type == "cpu" and time.perf_counter() - started > 2 * seconds:
            break
    _sync(a.device)
    elapsed = time.perf_counter() - started
    return 2 * n**3 * done / elapsed / 1e12


def measure(device: torch.device, precision: Precision, sizes: tuple[int, ...] | None = None) -> Probe:
    """The sustained TFLOP/s of a dense n x n matrix multiply at each size, largest first, until the budget is
    spent. Largest first: it comes nearest the peak, and on a busy machine (the CPUs here, shared) the budget may
    leave time for one size only, which must not be a small one that underrates the peak and so overrates MFU.
    fp32 runs as training's fp32 does: with torch's default matmul precision (TF32 off unless the program turned it
    on)."""
    kind = "cuda" if device.type == "cuda" else "cpu"
    sizes = sizes or (GPU_SIZES if kind == "cuda" else CPU_SIZES)
    dtype = _DTYPES[precision]
    generator = torch.Generator(device="cpu").manual_seed(0)
    started = time.perf_counter()
    tried: list[int] = []
    rates: list[float] = []
    for n in sorted(sizes, reverse=True):
        if tried and time.perf_counter() - started > BUDGET_SECONDS[kind]:
            break
        a = torch.randn(n, n, generator=generator).to(device=device, dtype=dtype)
        b = torch.randn(n, n, generator=generator).to(device=device, dtype=dtype)
        tried.append(n)
        rates.append(min(_sustained(a, b, SIZE_SECONDS[kind]), MAX_TFLOPS))
        del a, b
    return Probe(tried, rates, time.perf_counter() - started)


def compute_record(device: torch.device, precision: Precision, sizes: tuple[int, ...] | None = None) -> ComputeRecord:
    """The probe's record, naming the device so that the server can match its datasheet peak."""
    probe = measure(device, precision, sizes)
    return ComputeRecord(
        device=device.type,
        device_name=torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        precision=precision.value,
        measured_tflops=probe.best_tflops,
        sizes=probe.sizes,
        size_tflops=probe.size_tflops,
        seconds=probe.seconds,
        operator_peak_tflops=operator_peak_tflops(),
    )
