"""Datasheet DENSE peaks per GPU model and precision, each with its source, matched from the device's name.

MFU is reported against the wrong peak again and again (torchtitan #668; 563 % MFU in AMD-AGI/Primus #772): vendors
print their tensor-core figures "with sparsity", twice what a dense matrix multiply can reach, and training is
dense. Every figure here is the dense one (a datasheet's sparse figure halved where it prints only that), in
TFLOP/s for one device:

- fp32: a float32 matrix multiply as torch runs it by default (TF32 off: torch's matmul precision "highest"), so
  the plain FP32 figure on NVIDIA GPUs; AMD's Instinct GPUs run float32 GEMMs on their matrix cores, so their
  FP32 matrix figure.
- bf16, fp16: the tensor (matrix) core figure, dense. None where the GPU has no such cores for the type (V100's
  bf16): a figure made up for it would be a wrong peak.

No figure on CPU: a CPU's peak depends on its cores, clock and vector units, which no table here knows; the compute
probe's measured peak is the only one there. Torch-free: the server matches a run's device name itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from contract.spec import Precision


@dataclass(frozen=True)
class DatasheetPeak:
    """One GPU model's dense peaks and where they come from."""

    gpu: str
    fp32: float
    bf16: float | None
    fp16: float | None
    source: str

    def tflops(self, precision: Precision) -> float | None:
        value: float | None = getattr(self, precision.value)
        return value


_HALVED = "tensor-core figures printed with sparsity, halved"
_H100 = f"NVIDIA H100 Tensor Core GPU datasheet ({_HALVED})"
_H200 = f"NVIDIA H200 Tensor Core GPU datasheet ({_HALVED})"
# (a pattern torch.cuda.get_device_name() matches, case-insensitive, the peaks); the first that matches wins, so the
# more specific names come first (GH200 before H200, H100 PCIe before H100, A100 before A10).
_TABLE: tuple[tuple[str, DatasheetPeak], ...] = (
    (r"GH200", DatasheetPeak("GH200", 67.0, 989.4, 989.4, f"NVIDIA GH200 Superchip datasheet ({_HALVED})")),
    (r"H200.*NVL", DatasheetPeak("H200 NVL", 60.0, 835.5, 835.5, _H200)),
    (r"H200", DatasheetPeak("H200 SXM", 67.0, 989.4, 989.4, _H200)),
    (r"H100.*PCIe", DatasheetPeak("H100 PCIe", 51.2, 756.5, 756.5, _H100)),
    (r"H100.*NVL", DatasheetPeak("H100 NVL", 60.0, 835.5, 835.5, _H100)),
    (r"H100", DatasheetPeak("H100 SXM", 67.0, 989.4, 989.4, _H100)),
    (r"B200", DatasheetPeak("B200", 75.0, 2250.0, 2250.0, f"NVIDIA HGX B200 datasheet (8-GPU figures / 8; {_HALVED})")),
    (r"A100.*PCIe", DatasheetPeak("A100 PCIe", 19.5, 312.0, 312.0, "NVIDIA A100 Tensor Core GPU datasheet (dense)")),
    (r"A100", DatasheetPeak("A100 SXM", 19.5, 312.0, 312.0, "NVIDIA A100 Tensor Core GPU datasheet (dense)")),
    (r"V100.*PCIe", DatasheetPeak("V100 PCIe", 14.0, None, 112.0, "NVIDIA Tesla V100 GPU datasheet (no bf16 cores)")),
    (r"V100", DatasheetPeak("V100 SXM2", 15.7, None, 125.0, "NVIDIA Tesla V100 GPU datasheet (no bf16 cores)")),
    (r"L40S", DatasheetPeak("L40S", 91.6, 362.1, 362.1, f"NVIDIA L40S GPU datasheet ({_HALVED})")),
    (r"\bL4\b", DatasheetPeak("L4", 30.3, 121.0, 121.0, f"NVIDIA L4 Tensor Core GPU datasheet ({_HALVED})")),
    (r"\bA10\b", DatasheetPeak("A10", 31.2, 125.0, 125.0, f"NVIDIA A10 Tensor Core GPU datasheet ({_HALVED})")),
    (r"MI300X", DatasheetPeak("MI300X", 163.4, 1307.4, 1307.4, f"AMD Instinct MI300X data sheet ({_HALVED})")),
    (r"MI250X", DatasheetPeak("MI250X", 95.7, 383.0, 383.0, "AMD Instinct MI250X data sheet (matrix FP32; dense)")),
)
_MATCHERS = tuple((re.compile(pattern, re.IGNORECASE), peak) for pattern, peak in _TABLE)


def datasheet_peak(device_name: str | None) -> DatasheetPeak | None:
    """The datasheet entry of a device, by the name torch gives it ("NVIDIA H100 80GB HBM3", "AMD Instinct MI300X");
    None for a CPU (no name) or a GPU the table does not know."""
    if not device_name:
        return None
    return next((peak for pattern, peak in _MATCHERS if pattern.search(device_name)), None)


def table() -> list[DatasheetPeak]:
    """Every entry, in matching order: for the README and the device check."""
    return [peak for _, peak in _TABLE]
