"""The accounting service: which ended runs are asked about, in one call, and what their rows say."""

from __future__ import annotations

import subprocess
from datetime import timedelta

import pytest
from alembic import command
from sqlalchemy import text
from sqlmodel import Session, select

from contract.states import RunState
from server.db import alembic_config, init_db, make_engine
from server.models import GATHERABLE, AccountingPublic, RunAccounting, utcnow
from server.scheduler import JobAccounting
from server.scheduler.naming import job_name
from server.scheduler.slurm import SlurmScheduler
from server.services.accounting import GIVE_UP_AFTER, SETTLE, account_ended, cpu_efficiency, row_of
from tests.factories import batch_script, experiment_row, run_row, wait_final
from tests.server.scheduler.test_slurm import settle


def test_cpu_efficiency_is_cpu_time_over_allocated_time():
    assert cpu_efficiency(30.0, 10, 4) == 0.75
    assert cpu_efficiency(0.0, 0, 4) is None  # ran no time: no efficiency, rather than a division by zero


def test_a_row_names_the_figures_the_cluster_did_not_gather():
    figures = JobAccounting(
        nodes="n[1-2]", start=None, end=None, elapsed_s=10, alloc_cpus=2, total_cpu_s=5.0, max_rss_bytes=2**20,
        gpu_util=None, gpu_mem_bytes=None, energy_j=None, shared_with=("7",),
    )  # fmt: skip
    row = row_of("r1", "12", figures)
    assert (row.cpu_efficiency, row.not_gathered) == (0.25, ["gpu_util", "gpu_mem_bytes", "energy_j"])
    public = AccountingPublic.of(row)
    assert (public.shared_node, public.shared_with, public.run_id) == (True, ["7"], "r1")


def test_runs_of_a_scheduler_without_accounting_get_no_row(engine, session, tmp_path, local_scheduler):
    run_row(session, experiment_row(session), tmp_path, state=RunState.completed, job_id="local-1",
            scheduler="local", nodes=None, ended_at=utcnow())  # fmt: skip
    assert account_ended(engine, local_scheduler) == 0
    assert session.exec(select(RunAccounting)).all() == []


def node_of_the_cluster() -> str:
    listed = subprocess.run(["sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True, check=True)
    return listed.stdout.split()[0]


@pytest.mark.slurm
def test_a_job_never_recorded_gets_a_message_once_the_wait_is_over(slurm, engine, session, tmp_path):
    experiment = experiment_row(session)
    node, now = node_of_the_cluster(), utcnow()
    long_ago = now - GIVE_UP_AFTER - timedelta(minutes=1)
    old = run_row(session, experiment, tmp_path / "a", state=RunState.completed, job_id="999999991", nodes=node,
                  submitted_at=long_ago, ended_at=long_ago)  # fmt: skip
    settled = now - SETTLE
    run_row(session, experiment, tmp_path / "b", state=RunState.completed, job_id="999999992", nodes=node,
            submitted_at=settled, ended_at=settled)  # fmt: skip
    assert account_ended(engine, SlurmScheduler()) == 1
    rows = session.exec(select(RunAccounting)).all()
    assert [(row.run_id, row.job_id, row.elapsed_s) for row in rows] == [(old.id, "999999991", None)]
    assert rows[0].message is not None and "no record of job 999999991" in rows[0].message


@pytest.mark.slurm
def test_a_resubmitted_run_is_accounted_for_again(slurm, engine, session, tmp_path):
    scheduler = SlurmScheduler()
    since = utcnow()
    run = run_row(session, experiment_row(session), tmp_path, state=RunState.completed)
    # Both attempts' jobs are named after the run, as scalelab names them: its accounting is told apart by that name.
    script = batch_script(tmp_path, "srun true", name=job_name(run.id))
    first, second = (scheduler.submit(script, tmp_path) for _ in range(2))
    statuses = wait_final(scheduler, [first, second])
    settle()
    run.job_id, run.nodes, run.submitted_at, run.ended_at = (
        first,
        statuses[first].nodes,
        since - SETTLE,
        utcnow() - SETTLE,
    )
    session.add(run)
    session.commit()
    assert account_ended(engine, scheduler) == 1
    assert account_ended(engine, scheduler) == 0  # accounted for: not asked again
    run.job_id, run.nodes = second, statuses[second].nodes
    session.add(run)
    session.commit()
    assert account_ended(engine, scheduler) == 1
    session.expire_all()
    row = session.get(RunAccounting, run.id)
    assert row is not None and row.job_id == second and row.elapsed_s is not None
    assert row.not_gathered == [name for name in GATHERABLE if getattr(row, name) is None]


def test_an_unreachable_accounting_database_stores_nothing(engine, session, tmp_path):
    def sacct_down(argv):
        return subprocess.CompletedProcess(argv, 1, "", "sacct: error: Problem talking to the database")

    settled = utcnow() - SETTLE
    run_row(session, experiment_row(session), tmp_path, state=RunState.failed, job_id="5", nodes="n1",
            submitted_at=settled, ended_at=settled)  # fmt: skip
    with pytest.raises(Exception, match="Slurm cannot be reached"):
        account_ended(engine, SlurmScheduler(run=sacct_down))
    assert session.exec(select(RunAccounting)).all() == []


def test_upgrading_to_0007_keeps_the_runs_and_adds_no_accounting(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'db.sqlite'}")
    with engine.begin() as connection:
        command.upgrade(alembic_config(connection), "0006")
        connection.execute(
            text("INSERT INTO experiment (id, name, created_at, request) VALUES ('e1', 'x', '2026-01-01', '{}')")
        )
        connection.execute(
            text(
                "INSERT INTO run (id, experiment_id, position, state, job_id, scheduler, run_dir, created_at, spec, "
                "log_offset, ingest_done, parse_errors, attempt, waiting, ended_at) VALUES "
                "('r1', 'e1', 0, 'completed', '41', 'slurm', '/r', '2026-01-01', '{}', 7, 1, 0, 1, 0, '2026-01-02')"
            )
        )
    init_db(engine)
    with engine.connect() as connection:
        rows = connection.execute(text("SELECT id, job_id, log_offset, nodes FROM run")).all()
        assert [tuple(row) for row in rows] == [("r1", "41", 7, None)]
        assert connection.execute(text("SELECT count(*) FROM runaccounting")).scalar_one() == 0
    # A run that ended before the upgrade has no nodes: it is not asked about (the pages say not gathered).
    with Session(engine) as session:
        assert account_ended(engine, SlurmScheduler(run=_never_called)) == 0
        assert session.exec(select(RunAccounting)).all() == []
    engine.dispose()


def _never_called(argv):
    raise AssertionError(f"no command was expected: {argv}")
