"""The datasheet table: each device name torch gives matches its own GPU's dense peaks, never a neighbour's."""

from __future__ import annotations

import pytest

from contract.peaks import datasheet_peak, table
from contract.spec import Precision

NAMES = [
    ("NVIDIA H100 80GB HBM3", "H100 SXM"),
    ("NVIDIA H100 PCIe", "H100 PCIe"),
    ("NVIDIA H100 NVL", "H100 NVL"),
    ("NVIDIA H200", "H200 SXM"),
    ("NVIDIA H200 NVL", "H200 NVL"),
    ("NVIDIA GH200 480GB", "GH200"),
    ("NVIDIA A100-SXM4-80GB", "A100 SXM"),
    ("NVIDIA A100-PCIE-40GB", "A100 PCIe"),
    ("NVIDIA A100 80GB PCIe", "A100 PCIe"),
    ("Tesla V100-SXM2-32GB", "V100 SXM2"),
    ("Tesla V100-PCIE-16GB", "V100 PCIe"),
    ("NVIDIA L40S", "L40S"),
    ("NVIDIA L4", "L4"),
    ("NVIDIA A10", "A10"),
    ("AMD Instinct MI250X", "MI250X"),
    ("AMD Instinct MI300X", "MI300X"),
    ("NVIDIA B200", "B200"),
]


@pytest.mark.parametrize(("name", "gpu"), NAMES)
def test_a_device_name_matches_its_gpu(name, gpu):
    peak = datasheet_peak(name)
    assert peak is not None and peak.gpu == gpu


def test_a_cpu_or_an_unknown_gpu_has_no_datasheet_figure():
    assert datasheet_peak(None) is None
    assert datasheet_peak("") is None
    assert datasheet_peak("NVIDIA GeForce GTX 1080") is None


def test_the_figures_are_dense_not_sparse():
    """The bug the table exists for: H100 SXM's bf16 is 989 TFLOP/s dense; its datasheet's 1979 is with sparsity."""
    h100 = datasheet_peak("NVIDIA H100 80GB HBM3")
    assert h100 is not None and h100.tflops(Precision.bf16) == pytest.approx(989.4)
    a100 = datasheet_peak("NVIDIA A100-SXM4-80GB")
    assert a100 is not None and a100.tflops(Precision.bf16) == 312.0 and a100.tflops(Precision.fp32) == 19.5


def test_every_entry_names_its_source_and_low_precision_is_never_below_fp32():
    for peak in table():
        assert "datasheet" in peak.source or "data sheet" in peak.source
        for low in (peak.bf16, peak.fp16):
            assert low is None or low > peak.fp32


def test_v100_has_no_bf16_figure():
    v100 = datasheet_peak("Tesla V100-SXM2-32GB")
    assert v100 is not None and v100.tflops(Precision.bf16) is None
