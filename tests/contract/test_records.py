"""The record rules the server relies on: oversubscription and the timing record, read back from a line."""

from __future__ import annotations

import pytest

from contract.records import (
    ComputeRecord,
    EndRecord,
    MetricParseError,
    NodeHardware,
    StartRecord,
    StepRecord,
    TimingRecord,
    current_start,
    format_record,
    parse_metric_line,
)


def node(host: str = "n1", ranks: int = 2, threads: int = 1, cpus: int = 2) -> NodeHardware:
    return NodeHardware(
        host=host,
        ranks=list(range(ranks)),
        physical_cores=cpus,
        hardware_threads=cpus,
        cpus_given=cpus,
        affinity=f"0-{cpus - 1}",
        intra_op_threads=threads,
    )


def start(*nodes: NodeHardware) -> StartRecord:
    return StartRecord(
        world_size=4,
        nodes=len(nodes),
        device="cpu",
        backend="gloo",
        strategy="ddp",
        torch_version="2",
        hostname="n1",
        nodes_hardware=list(nodes) or None,
    )


def test_processes_times_threads_beyond_the_cpus_given_is_oversubscribed():
    assert node(ranks=4, threads=1, cpus=2).oversubscribed
    assert node(ranks=1, threads=3, cpus=2).oversubscribed


def test_as_many_threads_as_cpus_is_not_oversubscribed():
    assert not node(ranks=2, threads=1, cpus=2).oversubscribed
    assert not node(ranks=2, threads=4, cpus=8).oversubscribed


def test_start_record_names_the_oversubscribed_hosts():
    record = start(node("a", ranks=4, cpus=2), node("b", ranks=2, cpus=2))
    assert record.oversubscribed_hosts() == ["a"]


def test_an_old_start_record_without_hardware_names_no_host():
    line = '[METRIC] {"v": 1, "kind": "start", "world_size": 1, "nodes": 1, "device": "cpu", "backend": "gloo", '
    line += '"strategy": "single", "torch_version": "2", "hostname": "h"}'
    record = parse_metric_line(line)
    assert isinstance(record, StartRecord)
    assert record.nodes_hardware is None and record.oversubscribed_hosts() == []


def test_hardware_survives_the_line():
    record = start(node("a", ranks=4, cpus=2))
    again = parse_metric_line(format_record(record))
    assert isinstance(again, StartRecord)
    assert again.nodes_hardware == record.nodes_hardware
    assert again.oversubscribed_hosts() == ["a"]


def test_timing_record_survives_the_line():
    record = TimingRecord(
        epoch=1,
        rank=1,
        steps=20,
        step_s=0.01,
        data_s=0.001,
        compute_s=0.006,
        optimizer_s=0.001,
        comm_s=0.002,
        comm_overlapped_s=0.003,
        method="sampled",
    )
    assert parse_metric_line(format_record(record)) == record


def test_an_end_at_the_target_survives_the_line_and_an_older_end_reads_as_not_stopped():
    record = EndRecord(status="completed", total_time_s=3.5, stopped_at_target=True, target_epoch=2)
    assert parse_metric_line(format_record(record)) == record
    older = parse_metric_line('[METRIC] {"v": 1, "kind": "end", "status": "completed", "total_time_s": 9.0}')
    assert isinstance(older, EndRecord) and (older.stopped_at_target, older.target_epoch) == (None, None)
    # A run that did not stop at the target prints its end as before: nothing about a target.
    assert "target" not in format_record(EndRecord(status="completed", total_time_s=1.0))


def test_a_steps_rate_survives_the_line_and_an_older_step_has_none():
    record = StepRecord(epoch=1, step=3, train_loss=0.5, lr=0.0625)
    assert parse_metric_line(format_record(record)) == record
    older = parse_metric_line('[METRIC] {"v": 1, "kind": "step", "epoch": 1, "step": 3, "train_loss": 0.5}')
    assert isinstance(older, StepRecord) and older.lr is None


# ---- a run's current start -----------------------------------------------------------------------------------


def _hardware(host: str) -> NodeHardware:
    return NodeHardware(
        host=host, ranks=[0, 1], physical_cores=2, hardware_threads=2, cpus_given=2, affinity="0-1", intra_op_threads=1
    )


def test_a_programs_own_start_keeps_the_hardware_the_batch_script_measured():
    script = StartRecord(world_size=2, nodes=1, strategy="ddp", hostname="a", nodes_hardware=[_hardware("a")])
    own = StartRecord(world_size=2, nodes=1, strategy="ddp", device="cpu", torch_version="2.5")
    current = current_start([script, own])
    assert current is not None and current.nodes_hardware == [_hardware("a")]
    assert (current.device, current.torch_version) == ("cpu", "2.5")  # the program's own words replace the spec's
    # A requeued job starts again elsewhere: the new attempt's hardware, never the first's.
    again = script.model_copy(update={"nodes_hardware": [_hardware("b")]})
    current = current_start([script, own, again, own])
    assert current is not None and current.nodes_hardware == [_hardware("b")]
    assert current_start([]) is None
    assert current_start([own]) == own


def test_a_compute_record_survives_the_line():
    record = ComputeRecord(
        device="cuda",
        device_name="NVIDIA H100 80GB HBM3",
        precision="bf16",
        measured_tflops=701.5,
        sizes=[2048, 4096],
        size_tflops=[512.0, 701.5],
        seconds=1.2,
    )
    assert parse_metric_line(format_record(record)) == record


HOSTILE_FLOPS = [
    (
        '{"v":1,"kind":"compute","device":"cpu","precision":"fp32","measured_tflops":1e9,"sizes":[1],'
        '"size_tflops":[1e9],"seconds":0.1}',
        "measured_tflops",
    ),
    (
        '{"v":1,"kind":"compute","device":"cpu","precision":"fp32","measured_tflops":-1,"sizes":[1],'
        '"size_tflops":[1],"seconds":0.1}',
        "measured_tflops",
    ),
    (
        '{"v":1,"kind":"compute","device":"cpu","precision":"fp32","measured_tflops":1,"sizes":[1],'
        '"size_tflops":[1],"seconds":0.1,"device_name":"' + "x" * 300 + '"}',
        "device_name",
    ),
    (
        '{"v":1,"kind":"epoch","epoch":1,"train_loss":1,"epoch_time_s":1,"model_flops_per_sample":1e30}',
        "model_flops_per_sample",
    ),
    (
        '{"v":1,"kind":"epoch","epoch":1,"train_loss":1,"epoch_time_s":1,"hardware_flops_per_sample":-5}',
        "hardware_flops_per_sample",
    ),
    (
        '{"v":1,"kind":"epoch","epoch":1,"train_loss":1,"epoch_time_s":1,"model_flops_per_sample":Infinity}',
        "model_flops_per_sample",
    ),
]


@pytest.mark.parametrize(("body", "field"), HOSTILE_FLOPS)
def test_flops_and_peaks_beyond_any_device_are_refused_naming_the_field(body, field):
    """A job's FLOPs per sample and measured peak are a stranger's figures: beyond the bounds, refused, never
    divided."""
    with pytest.raises(MetricParseError, match=field):
        parse_metric_line(f"[METRIC] {body}")
