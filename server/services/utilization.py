"""A run's model FLOPs utilisation (MFU) and hardware FLOPs utilisation (HFU), computed on the server from stored
figures, in this one place: throughput (samples/s) x FLOPs per sample over peak x devices (contract.flops), against
the peak the run's compute probe measured and against the datasheet's dense peak (contract.peaks).

Nothing a job writes is trusted more than it must be: the FLOPs per sample of the built-in worker's run are the
server's own count from its spec (contract.flops), whatever its records say; a program's are what it reported
(model_flops_per_sample), bounded by the record's rules, and the mfu_impossible flag says when they cannot be true.
The datasheet peak is matched here from the device's name, never read from a record.
"""

from __future__ import annotations

from dataclasses import dataclass

from contract import flops, peaks
from contract.records import ComputeRecord, StartRecord
from contract.spec import Precision, RunKind, RunSpec
from server.models import CompareRow, EpochPoint, Flag
from server.services import flags

OPERATOR_SOURCE = "SCALELAB_PEAK_TFLOPS: the operator's figure for this device (no datasheet entry matched it)"


@dataclass(frozen=True)
class Utilization:
    """What the row shows, and what the flag is decided from."""

    samples_per_s: float | None = None
    model_flops_per_sample: float | None = None
    hardware_flops_per_sample: float | None = None
    flops_source: str | None = None  # "counted" (the server's own count) or "reported" (the program's)
    devices: int = 1
    peak_measured: float | None = None
    peak_datasheet: float | None = None
    peak_source: str | None = None
    mfu: float | None = None
    mfu_datasheet: float | None = None
    hfu: float | None = None
    hfu_datasheet: float | None = None


def _flops(spec: RunSpec, epoch: EpochPoint) -> tuple[float | None, float | None, str | None]:
    if spec.kind is RunKind.train:
        counted = flops.training_flops(spec)
        return float(counted.model), float(counted.hardware), "counted"
    model = epoch.model_flops_per_sample
    if model is None or model <= 0:
        return None, None, None
    hardware = epoch.hardware_flops_per_sample
    return model, hardware if hardware is not None and hardware >= model else model, "reported"


def _datasheet(
    spec: RunSpec, start: StartRecord | None, compute: ComputeRecord | None
) -> tuple[float | None, str | None]:
    """The device's dense peak at the run's precision, and where it comes from; None on a CPU or an unknown GPU."""
    name = compute.device_name if compute is not None else None
    if name is None and start is not None and start.nodes_hardware:
        name = start.nodes_hardware[0].gpu_model
    precision_name = compute.precision if compute is not None else start.precision if start is not None else None
    if precision_name is None and spec.kind is RunKind.train:
        precision_name = spec.precision.value
    entry = peaks.datasheet_peak(name)
    if entry is not None and precision_name is not None and precision_name in Precision.__members__:
        figure = entry.tflops(Precision(precision_name))
        if figure is not None:
            return figure, f"{entry.gpu}, {precision_name}: {entry.source}"
    if compute is not None and compute.operator_peak_tflops is not None:
        return compute.operator_peak_tflops, OPERATOR_SOURCE
    return None, None


def _throughput_epoch(epochs: list[EpochPoint], median_epoch: EpochPoint | None) -> EpochPoint | None:
    """The epoch whose throughput the row's utilisation reads: the median timed epoch where there is one (the
    first is warm-up), else the last that has a throughput."""
    if median_epoch is not None and median_epoch.samples_per_s:
        return median_epoch
    return next((epoch for epoch in reversed(epochs) if epoch.samples_per_s), None)


def _ratio(samples_per_s: float, per_sample: float | None, peak: float | None, devices: int) -> float | None:
    if per_sample is None or not peak:
        return None
    return flops.utilization(samples_per_s, per_sample, peak, devices)


def run_utilization(
    spec: RunSpec,
    epochs: list[EpochPoint],
    median_epoch: EpochPoint | None,
    start: StartRecord | None,
    compute: ComputeRecord | None,
) -> Utilization:
    """The run's utilisation: none where it has no throughput, no FLOPs per sample, or no peak at all."""
    devices = start.world_size if start is not None and start.world_size > 0 else spec.gpus
    measured = compute.measured_tflops if compute is not None else None
    datasheet, source = _datasheet(spec, start, compute)
    epoch = _throughput_epoch(epochs, median_epoch)
    if epoch is None or epoch.samples_per_s is None:
        return Utilization(devices=devices, peak_measured=measured, peak_datasheet=datasheet, peak_source=source)
    model, hardware, flops_source = _flops(spec, epoch)
    recomputes = hardware is not None and model is not None and hardware > model
    samples = epoch.samples_per_s
    return Utilization(
        samples_per_s=samples,
        model_flops_per_sample=model,
        hardware_flops_per_sample=hardware,
        flops_source=flops_source,
        devices=devices,
        peak_measured=measured,
        peak_datasheet=datasheet,
        peak_source=source,
        mfu=_ratio(samples, model, measured, devices),
        mfu_datasheet=_ratio(samples, model, datasheet, devices),
        hfu=_ratio(samples, hardware, measured, devices) if recomputes else None,
        hfu_datasheet=_ratio(samples, hardware, datasheet, devices) if recomputes else None,
    )


def write_row(row: CompareRow, figures: Utilization) -> None:
    """The figures on the run's comparison row."""
    row.model_flops_per_sample = figures.model_flops_per_sample
    row.hardware_flops_per_sample = figures.hardware_flops_per_sample
    row.peak_tflops_measured = figures.peak_measured
    row.peak_tflops_datasheet = figures.peak_datasheet
    row.peak_datasheet_source = figures.peak_source
    row.mfu = figures.mfu
    row.mfu_datasheet = figures.mfu_datasheet
    row.hfu = figures.hfu
    row.hfu_datasheet = figures.hfu_datasheet


def check_impossible(figures: Utilization) -> Flag | None:
    """mfu_impossible on the run's figures: against the measured peak, or the datasheet's where none was measured."""
    measured = figures.mfu is not None
    return flags.check_mfu_impossible(
        figures.mfu if measured else figures.mfu_datasheet,
        figures.samples_per_s,
        figures.model_flops_per_sample,
        figures.flops_source == "reported",
        figures.peak_measured if measured else figures.peak_datasheet,
        figures.devices,
        measured,
    )
