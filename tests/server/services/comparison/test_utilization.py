"""MFU and HFU on the comparison row, computed by the server from stored figures against the measured and the
datasheet peak, and the mfu_impossible flag: from a real worker run on CPU, and from programs reporting their own
FLOPs per sample."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from contract import flops
from contract.records import (
    ComputeRecord,
    NodeHardware,
    StartRecord,
    WorkerRecord,
    format_record,
)
from contract.rundir import OUTPUT_FILE
from contract.spec import RunSpec
from contract.states import RunState
from server.models import FlagCode
from server.services import flags
from server.services.comparison import compare_csv, compare_rows
from server.services.ingestion.parsing import ingest
from tests.factories import epoch, experiment_row, printed_run, run_row
from tests.server.services.comparison.timed import codes
from tests.worker.launch import run_worker

FEW_STEPS: dict[str, Any] = {"epochs": 2, "steps_per_epoch": 4, "global_batch_size": 16}
PROGRAM = {"kind": "program", "gpus": 1, "program": {"command": ["python", "t.py"], "workdir": "/w"}}


@pytest.fixture(scope="module")
def worker_records(tmp_path_factory) -> list[Any]:
    """A real training run's records: the worker on CPU, gpt for two short epochs."""
    run = run_worker(tmp_path_factory.mktemp("worker"), 1, model="gpt", strategy="single", **FEW_STEPS)
    assert run.returncode == 0, run.stderr[-3000:]
    return run.records


def output_of(printed: list[Any]) -> str:
    return "".join(format_record(record) + "\n" for record in printed)


def stored_run(session, experiment, run_dir: Path, output: str, run_spec: RunSpec):
    run_dir.mkdir(parents=True)
    (run_dir / OUTPUT_FILE).write_text(output)
    run = run_row(session, experiment, run_dir, run_spec=run_spec, state=RunState.completed)
    ingest(session, run)
    run.ingest_done = True
    session.add(run)
    session.commit()
    return run


@pytest.mark.torch
def test_a_real_cpu_run_is_within_its_measured_peak_and_a_program_claiming_twice_is_flagged(
    session, tmp_path, worker_records
):
    experiment = experiment_row(session)
    run_spec = RunSpec.model_validate({"model": "gpt", "strategy": "single", **FEW_STEPS})
    run = stored_run(session, experiment, tmp_path / "worker", output_of(worker_records), run_spec)
    (row,) = compare_rows(session, run_ids=[run.id])
    probe = next(record for record in worker_records if isinstance(record, ComputeRecord))
    assert row.peak_tflops_measured == probe.measured_tflops
    assert row.model_flops_per_sample == flops.training_flops(run_spec).model
    epochs = [record for record in worker_records if record.kind == "epoch"]
    # The server's MFU is the median timed epoch's FLOP rate (here the second's: the first is warm-up) over the
    # measured peak; not asserted at most 1: on a shared machine the probe can meet a busier moment than the
    # epochs, and then the flag says so.
    assert row.mfu == pytest.approx(
        row.model_flops_per_sample * epochs[-1].samples_per_s / (probe.measured_tflops * 1e12)
    )
    assert row.mfu is not None and row.mfu > 0
    # CPU: no datasheet figure, and no recomputation, so no HFU.
    assert (row.peak_tflops_datasheet, row.mfu_datasheet, row.hfu) == (None, None, None)
    assert (FlagCode.mfu_impossible in codes(row)) is (row.mfu > 1)

    # The same output as a program's that reports FLOPs per sample: the server divides what it reported. Twice the
    # FLOPs give twice the MFU; FLOPs past what the device could do at its measured peak give an impossible one.
    at_peak = probe.measured_tflops * 1e12 / epochs[-1].samples_per_s  # the FLOPs per sample the peak allows
    for name, per_sample in (("doubled", 2 * row.model_flops_per_sample), ("past_peak", 2 * at_peak)):
        claims = [
            record.model_copy(update={"model_flops_per_sample": per_sample}) if record.kind == "epoch" else record
            for record in worker_records
        ]
        program = stored_run(session, experiment, tmp_path / name, output_of(claims), RunSpec.model_validate(PROGRAM))
        (claimed,) = compare_rows(session, run_ids=[program.id])
        assert claimed.model_flops_per_sample == per_sample
        assert claimed.mfu is not None
        if name == "doubled":
            assert claimed.mfu == pytest.approx(2 * row.mfu)
            assert (FlagCode.mfu_impossible in codes(claimed)) is (claimed.mfu > 1)
        else:
            assert claimed.mfu == pytest.approx(2.0)
            flag = next(flag for flag in claimed.flags if flag.code == FlagCode.mfu_impossible)
            assert "MFU 2.00 is above 1" in flag.message and "the program reported" in flag.message
            assert f"{probe.measured_tflops:.4g} TFLOP/s, the peak its compute probe measured" in flag.message


def gpu_start(gpu: str, precision: str | None = None) -> StartRecord:
    host = NodeHardware(
        host="g1", ranks=[0, 1], hardware_threads=8, cpus_given=8, affinity="0-7", intra_op_threads=1, gpu_model=gpu
    )
    return StartRecord(world_size=2, nodes=1, device="cuda", strategy="ddp", precision=precision, nodes_hardware=[host])


def test_utilisation_against_both_peaks_and_hfu_under_checkpointing(session, tmp_path):
    """A worker run on two H100s under activation checkpointing: MFU and HFU against the measured and the
    datasheet's dense bf16 peak, the server's own count of FLOPs whatever the records say."""
    experiment = experiment_row(session)
    probe = ComputeRecord(
        device="cuda", device_name="NVIDIA H100 80GB HBM3", precision="bf16", measured_tflops=600.0, sizes=[4096],
        size_tflops=[600.0], seconds=1.0,
    )  # fmt: skip
    printed: list[WorkerRecord] = [
        gpu_start("NVIDIA H100 80GB HBM3"),
        probe,
        *(epoch(n, 2.0, samples_per_s=1e5, model_flops_per_sample=1.0) for n in (1, 2, 3)),
    ]
    fields = {"model": "gpt", "gpus": 2, "precision": "bf16", "activation_checkpointing": True, "epochs": 3}
    run = printed_run(session, experiment, tmp_path / "r", printed, **fields)
    (row,) = compare_rows(session, run_ids=[run.id])
    counted = flops.training_flops(RunSpec.model_validate({"epochs": 3, **fields}))
    assert counted.hardware > counted.model
    assert row.model_flops_per_sample == counted.model  # not the 1.0 the record claimed
    assert row.mfu == pytest.approx(1e5 * counted.model / (600e12 * 2))
    assert row.mfu_datasheet == pytest.approx(1e5 * counted.model / (989.4e12 * 2))
    assert row.hfu == pytest.approx(1e5 * counted.hardware / (600e12 * 2))
    assert row.hfu_datasheet == pytest.approx(1e5 * counted.hardware / (989.4e12 * 2))
    assert row.peak_datasheet_source is not None and "H100 SXM, bf16: NVIDIA H100" in row.peak_datasheet_source
    csv = compare_csv([row])
    header = csv.splitlines()[0].split(",")
    for column in ("mfu", "mfu_datasheet", "hfu", "peak_tflops_measured", "peak_tflops_datasheet"):
        assert column in header


def test_a_program_without_a_probe_is_judged_against_its_gpus_datasheet(session, tmp_path):
    """A program's batch script names the GPU but measures no peak: MFU against the datasheet only (at the precision
    its own start record names; none named, none assumed), and the flag against it where even that is passed."""
    experiment = experiment_row(session)
    program = RunSpec.model_validate({**PROGRAM, "gpus": 2})
    for name, precision in (("unnamed", None), ("bf16", "bf16")):
        printed: list[WorkerRecord] = [
            gpu_start("NVIDIA A100-SXM4-80GB", precision),
            *(epoch(n, 2.0, samples_per_s=1000.0, model_flops_per_sample=1e12) for n in (1, 2)),
        ]
        run = stored_run(session, experiment, tmp_path / name, output_of(printed), program)
        (row,) = compare_rows(session, run_ids=[run.id])
        assert row.mfu is None and row.peak_tflops_measured is None
        if precision is None:
            assert row.mfu_datasheet is None and FlagCode.mfu_impossible not in codes(row)
        else:
            # 1000 samples/s x 1e12 FLOPs = 1000 TFLOP/s on two A100s of 312 dense bf16 TFLOP/s each.
            assert row.mfu_datasheet == pytest.approx(1000 / 624)
            flag = next(flag for flag in row.flags if flag.code == FlagCode.mfu_impossible)
            assert "datasheet peak (no probe measured one)" in flag.message


def test_the_condition_fires_above_one_only_and_names_the_figures():
    assert flags.check_mfu_impossible(1.0, 10.0, 1e9, True, 1.0, 1) is None
    assert flags.check_mfu_impossible(None, 10.0, 1e9, True, 1.0, 1) is None
    flag = flags.check_mfu_impossible(1.5, 1500.0, 1e9, False, 1.0, 1)
    assert flag is not None and flag.code == FlagCode.mfu_impossible and flag.severity == "warning"
    assert "1500 samples/s x 1e+09 FLOPs per sample" in flag.message
    assert "scalelab counted from the model" in flag.message and "check the FLOPs per sample" in flag.message
    datasheet = flags.check_mfu_impossible(1.2, 1.0, 1.0, True, 312.0, 8, measured=False)
    assert datasheet is not None and "datasheet peak" in datasheet.message and "8 devices" in datasheet.message
