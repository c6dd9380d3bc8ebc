"""The fabric store: a run's fabric records kept per tier with the server's own fit, and the fits the prediction
reads by shape (fits_for), on both databases."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest
from sqlmodel import Session, select

from contract.fabric import AlphaBeta, Collective, Tier, algorithm_bandwidth, bus_bandwidth
from contract.records import FabricRecord, WorkerRecord, format_record
from contract.rundir import OUTPUT_FILE
from contract.spec import RunSpec
from contract.states import RunState
from server.models import Experiment, FabricProbe, FlagCode, Run
from server.models.common import utcnow
from server.profiles import FabricBand
from server.services import fabric
from server.services.comparison import compare_rows
from server.services.ingestion.parsing import ingest
from tests.factories import experiment_row, run_row, start

INTRA = AlphaBeta(alpha_s=2e-5, beta_bytes_per_s=4e9)
INTER = AlphaBeta(alpha_s=1e-4, beta_bytes_per_s=5e8)


def measured(
    tier: Tier,
    fit: AlphaBeta,
    *,
    nodes: int,
    per_node: int,
    backend: str = "gloo",
    preflight: bool = False,
    collectives: tuple[Collective, ...] = (Collective.all_reduce, Collective.broadcast),
    sizes: int = 8,
    scale: float = 1.0,
) -> list[FabricRecord]:
    """The records a probe of this tier prints when the fabric follows `fit` exactly (times x `scale`)."""
    ranks = per_node if tier is Tier.intra_node else nodes
    records = []
    for collective in collectives:
        for step in range(sizes):
            nbytes = 1024 * 2**step
            seconds = fit.time_s(collective, ranks, nbytes) * scale
            records.append(
                FabricRecord(
                    tier=tier, ranks=ranks, backend=backend, nodes=nodes, processes_per_node=per_node,
                    preflight=preflight, collective=collective, nbytes=nbytes, seconds=seconds, iterations=5,
                    algbw_bytes_per_s=algorithm_bandwidth(nbytes, seconds),
                    busbw_bytes_per_s=bus_bandwidth(collective, ranks, nbytes, seconds),
                )
            )  # fmt: skip
    return records


def probe_run(
    session: Session,
    experiment: Experiment,
    tmp_path,
    records: list[FabricRecord],
    *,
    nodes: int,
    per_node: int,
    profile: str = "twonode",
    partition: str = "debug",
    ended_ago_s: float = 0,
) -> Run:
    """A probe run whose output holds these records, read to its end as the monitor reads one."""
    run_dir = tmp_path / f"run{len(list(tmp_path.iterdir()))}"
    run_dir.mkdir()
    printed: list[WorkerRecord] = list(records)
    (run_dir / OUTPUT_FILE).write_text("".join(format_record(record) + "\n" for record in printed))
    spec = RunSpec(kind="probe", nodes=nodes, gpus=nodes * per_node)
    run = run_row(
        session, experiment, run_dir, run_spec=spec, state=RunState.completed, profile=profile, partition=partition,
        ended_at=utcnow() - timedelta(seconds=ended_ago_s),
    )  # fmt: skip
    ingest(session, run)
    fabric.conclude(session, run)
    session.commit()
    return run


def close(fit: AlphaBeta, expected: AlphaBeta) -> bool:
    return math.isclose(fit.alpha_s, expected.alpha_s, rel_tol=1e-3) and math.isclose(
        fit.beta_bytes_per_s, expected.beta_bytes_per_s, rel_tol=1e-3
    )


def test_a_probe_is_stored_per_tier_with_its_points_and_the_servers_fit(session, tmp_path):
    experiment = experiment_row(session)
    records = measured(Tier.intra_node, INTRA, nodes=2, per_node=2) + measured(
        Tier.inter_node, INTER, nodes=2, per_node=2
    )
    run = probe_run(session, experiment, tmp_path, records, nodes=2, per_node=2)
    stored = {probe.tier: probe for probe in session.exec(select(FabricProbe)).all()}
    assert set(stored) == {"intra_node", "inter_node"}
    intra, inter = stored["intra_node"], stored["inter_node"]
    assert (intra.run_id, intra.profile, intra.partition, intra.nodes, intra.processes_per_node) == (
        run.id, "twonode", "debug", 2, 2,
    )  # fmt: skip
    assert (intra.ranks, inter.ranks, intra.backend, intra.preflight) == (2, 2, "gloo", False)
    assert len(intra.points) == len(inter.points) == 16
    assert close(AlphaBeta(intra.alpha_s, intra.beta_bytes_per_s), INTRA)
    assert close(AlphaBeta(inter.alpha_s, inter.beta_bytes_per_s), INTER)


def test_reading_a_run_again_replaces_its_rows_and_a_size_measured_twice_keeps_its_latest(session, tmp_path):
    experiment = experiment_row(session)
    first = measured(Tier.intra_node, INTRA, nodes=1, per_node=2)
    again = measured(Tier.intra_node, INTRA, nodes=1, per_node=2, scale=2.0)  # a requeued job measured again
    run = probe_run(session, experiment, tmp_path, first + again, nodes=1, per_node=2)
    fabric.conclude(session, run)
    session.commit()
    (probe,) = session.exec(select(FabricProbe)).all()
    assert len(probe.points) == 16
    # Twice the time at every size: half the bandwidth and twice the latency.
    assert close(
        AlphaBeta(probe.alpha_s, probe.beta_bytes_per_s), AlphaBeta(2 * INTRA.alpha_s, INTRA.beta_bytes_per_s / 2)
    )


def test_a_run_without_fabric_records_stores_nothing(session, tmp_path):
    experiment = experiment_row(session)
    run = run_row(session, experiment, tmp_path, state=RunState.completed)
    assert fabric.conclude(session, run) == 0
    assert session.exec(select(FabricProbe)).all() == []


def test_fits_for_reads_the_newest_probe_of_the_shape(session, tmp_path):
    experiment = experiment_row(session)
    slow = AlphaBeta(alpha_s=3e-5, beta_bytes_per_s=1e9)
    probe_run(session, experiment, tmp_path, measured(Tier.intra_node, slow, nodes=1, per_node=2), nodes=1,
              per_node=2, ended_ago_s=3600)  # fmt: skip
    probe_run(session, experiment, tmp_path, measured(Tier.intra_node, INTRA, nodes=1, per_node=2), nodes=1, per_node=2)
    fits = fabric.fits_for(session, "twonode", "debug", 1, 2, "gloo")
    assert set(fits) == {Tier.intra_node}
    assert close(fits[Tier.intra_node], INTRA)


def test_fits_for_reads_each_tier_by_its_own_ranks_and_else_the_closest(session, tmp_path):
    experiment = experiment_row(session)
    four = AlphaBeta(alpha_s=5e-5, beta_bytes_per_s=2e9)
    records = measured(Tier.intra_node, INTRA, nodes=2, per_node=2) + measured(
        Tier.inter_node, INTER, nodes=2, per_node=2
    )
    probe_run(session, experiment, tmp_path, records, nodes=2, per_node=2, ended_ago_s=60)
    probe_run(session, experiment, tmp_path, measured(Tier.intra_node, four, nodes=1, per_node=4), nodes=1, per_node=4)
    # Two per node over two nodes: the intra tier of two per node (not the newer four), the inter tier of two nodes.
    fits = fabric.fits_for(session, "twonode", "debug", 2, 2, "gloo")
    assert close(fits[Tier.intra_node], INTRA) and close(fits[Tier.inter_node], INTER)
    # Eight per node was never probed: four is closer than two. Four nodes neither: two stands in.
    fits = fabric.fits_for(session, "twonode", "debug", 4, 8, "gloo")
    assert close(fits[Tier.intra_node], four) and close(fits[Tier.inter_node], INTER)
    # One process per node on one node has no fabric; another backend, partition or profile, no probe.
    assert fabric.fits_for(session, "twonode", "debug", 1, 1, "gloo") == {}
    assert fabric.fits_for(session, "twonode", "debug", 2, 2, "nccl") == {}
    assert fabric.fits_for(session, "twonode", "gpu", 2, 2, "gloo") == {}
    assert fabric.fits_for(session, "local", "debug", 2, 2, "gloo") == {}


def test_fits_for_leaves_pre_flights_out(session, tmp_path):
    experiment = experiment_row(session)
    records = measured(
        Tier.intra_node, INTRA, nodes=1, per_node=2, preflight=True, collectives=(Collective.all_reduce,)
    )
    probe_run(session, experiment, tmp_path, records, nodes=1, per_node=2)
    (probe,) = session.exec(select(FabricProbe)).all()
    assert probe.preflight
    assert fabric.fits_for(session, "twonode", "debug", 1, 2, "gloo") == {}


@pytest.mark.parametrize("field", ["algbw_bytes_per_s", "busbw_bytes_per_s"])
def test_a_record_whose_bandwidth_does_not_follow_from_its_size_and_time_is_refused(field):
    (record,) = measured(Tier.intra_node, INTRA, nodes=1, per_node=2, collectives=(Collective.all_reduce,), sizes=1)
    with pytest.raises(ValueError, match=field):
        FabricRecord.model_validate({**record.model_dump(), field: getattr(record, field) * 10})


# ---- a pre-flight judged against its fabric: fabric_degraded --------------------------------------------------------

BAND = {Tier.intra_node: {"gloo": FabricBand(busbw_gb_per_s=(2.0, 5.0), source="nccl-tests on n1, 2026-11")}}


def preflight(fit: AlphaBeta, per_node: int = 2) -> list[FabricRecord]:
    return measured(
        Tier.intra_node, fit, nodes=1, per_node=per_node, preflight=True, collectives=(Collective.all_reduce,), sizes=5
    )


def training_run(session: Session, experiment: Experiment, tmp_path, records, reference=None, ago: float = 0) -> Run:
    """A training run with a pre-flight, its output read to its end and concluded against `reference`."""
    run_dir = tmp_path / f"train{len(list(tmp_path.iterdir()))}"
    run_dir.mkdir()
    (run_dir / OUTPUT_FILE).write_text("".join(format_record(record) + "\n" for record in [start(), *records]))
    spec = RunSpec(epochs=1, gpus=2, fabric_preflight=True)
    run = run_row(
        session, experiment, run_dir, run_spec=spec, state=RunState.completed, profile="twonode", partition="debug",
        ended_at=utcnow() - timedelta(seconds=ago),
    )  # fmt: skip
    ingest(session, run)
    fabric.conclude(session, run, reference)
    session.commit()
    return run


def degraded(session: Session, run: Run) -> str | None:
    (probe,) = session.exec(select(FabricProbe).where(FabricProbe.run_id == run.id)).all()
    assert probe.preflight
    return probe.degraded


def test_a_pre_flight_below_its_profile_s_band_is_flagged_naming_measured_expected_and_source(session, tmp_path):
    experiment = experiment_row(session)
    # 0.38 GB/s of bus bandwidth at its largest all-reduce (16 KiB, 10 us of latency): below the band of 2-5 GB/s.
    slow = training_run(session, experiment, tmp_path, preflight(AlphaBeta(1e-5, 0.5e9)), BAND)
    message = degraded(session, slow)
    assert message is not None
    assert "measured 0.383 GB/s" in message and "(intra_node, all-reduce of 16 KiB)" in message
    assert "2-5 GB/s expected" in message and "profile twonode's fabric_reference: nccl-tests on n1, 2026-11" in message
    (row,) = compare_rows(session, experiment_ids=[experiment.id])
    (flag,) = [flag for flag in row.flags if flag.code == FlagCode.fabric_degraded]
    assert (flag.severity, flag.message) == ("warning", message)


def test_a_pre_flight_inside_its_band_or_with_no_reference_at_all_is_not_flagged(session, tmp_path):
    experiment = experiment_row(session)
    # No band in the profile and nothing measured before of its shape: nothing to judge by, no flag.
    alone = training_run(session, experiment_row(session, "other"), tmp_path, preflight(AlphaBeta(1e-5, 0.01e9)))
    assert degraded(session, alone) is None
    healthy = training_run(session, experiment, tmp_path, preflight(AlphaBeta(1e-7, 4e9)), BAND)
    assert degraded(session, healthy) is None
    assert not [f for row in compare_rows(session, experiment_ids=[experiment.id]) for f in row.flags
                if f.code == FlagCode.fabric_degraded]  # fmt: skip


def test_without_a_band_a_pre_flight_is_judged_by_the_earlier_measurements_of_its_shape(session, tmp_path):
    experiment = experiment_row(session)
    earlier = [
        training_run(session, experiment, tmp_path, preflight(AlphaBeta(1e-7, beta)), ago=600 - index)
        for index, beta in enumerate((4e9, 5e9))
    ]
    # Within 20 % of the lowest earlier figure: the noise of a shared machine, not a degraded fabric.
    assert degraded(session, training_run(session, experiment, tmp_path, preflight(AlphaBeta(1e-7, 3.4e9)))) is None
    slow = training_run(session, experiment, tmp_path, preflight(AlphaBeta(1e-7, 1e9)))
    message = degraded(session, slow)
    assert message is not None
    assert "no fabric_reference in profile twonode: the spread of" in message
    assert all(run.id in message for run in earlier)
    # Another shape (four per node) has no earlier measurement: no flag, however slow.
    four = measured(Tier.intra_node, AlphaBeta(1e-7, 1e8), nodes=1, per_node=4, preflight=True,
                    collectives=(Collective.all_reduce,), sizes=5)  # fmt: skip
    other = training_run(session, experiment, tmp_path, four)
    assert degraded(session, other) is None
