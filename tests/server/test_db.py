"""The schema comes from migrations, and they describe exactly the models."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from pydantic import ValidationError
from sqlalchemy import text, update
from sqlmodel import Session, SQLModel, col, select

from contract import records as rec
from contract.rundir import OUTPUT_FILE
from contract.states import RunState
from server.config import Settings
from server.db import MIGRATIONS, alembic_config, init_db, make_engine
from server.models import Metric, Run, RunSummary
from server.services.comparison import epoch_histories
from server.services.ingestion.parsing import ingest
from tests.factories import experiment_row, run_row

HEAD = ScriptDirectory(str(MIGRATIONS)).get_current_head()


def test_migrations_match_the_models(database_url):
    engine = make_engine(database_url)
    init_db(engine)
    with engine.connect() as connection:
        differences = compare_metadata(MigrationContext.configure(connection), SQLModel.metadata)
    engine.dispose()
    assert differences == [], "add a migration: server/migrations/versions"


def test_byte_counts_and_offsets_beyond_32_bits_are_kept(session):
    """A GPU's memory and a long output's offsets pass 2**31, which PostgreSQL's INTEGER cannot hold."""
    run = run_row(session, experiment_row(session), Path("/r"))
    large = 2**40 + 3
    run.log_offset = large
    session.add(Metric(run_id=run.id, offset=large, kind="end", record={"v": 1}))
    session.add(RunSummary(run_id=run.id, peak_memory_bytes=large, peak_rss_bytes=large))
    session.commit()
    session.expire_all()
    assert session.exec(select(Metric.offset)).one() == large
    assert session.exec(select(Run.log_offset)).one() == large
    assert session.exec(select(RunSummary.peak_memory_bytes, RunSummary.peak_rss_bytes)).one() == (large, large)


def test_every_change_of_a_run_bumps_its_row_version_whoever_makes_it(database_url):
    """What the server keeps of a run is keyed by its row_version (server/services/runs.py, server/web/pages.py):
    were a writer able to change a run without bumping it, a stale answer would be served. The database bumps it,
    after a downgrade and upgrade again too."""
    engine = make_engine(database_url)
    init_db(engine)
    with Session(engine) as session:
        runs = [run_row(session, experiment_row(session), Path("/r"), position=i) for i in range(2)]
        changed, other = runs[0].id, runs[1].id

        def version(run_id: str) -> int:
            return session.exec(select(Run.row_version).where(Run.id == run_id)).one()

        assert version(changed) == version(other) == 0
        runs[0].state = RunState.running  # through the ORM
        session.add(runs[0])
        session.commit()
        assert version(changed) == 1
        session.execute(update(Run).where(col(Run.id) == changed).values(message="m"))  # a set-based update
        session.commit()
        assert version(changed) == 2
        # Another program's SQL, as an admin's or an older server's.
        session.execute(text("UPDATE run SET log_offset = 7 WHERE id = :id"), {"id": changed})
        session.commit()
        assert (version(changed), version(other)) == (3, 0)
        session.commit()  # the read's transaction ended, which the downgrade's DDL would wait for

        with engine.begin() as connection:
            command.downgrade(alembic_config(connection), "0011")
        init_db(engine)
        session.execute(update(Run).where(col(Run.id) == other).values(message="m"))
        session.commit()
        assert (version(changed), version(other)) == (0, 1)
    engine.dispose()


def test_upgrade_is_idempotent_and_keeps_data(database_url):
    engine = make_engine(database_url)
    init_db(engine)
    with engine.begin() as connection:
        connection.execute(
            text("INSERT INTO experiment (id, name, created_at, request) VALUES ('e1', 'x', '2026-01-01', '{}')")
        )
    init_db(engine)
    with engine.connect() as connection:
        assert connection.execute(text("SELECT name FROM experiment")).scalar_one() == "x"
        assert connection.execute(text("SELECT version_num FROM alembic_version")).scalar_one() == HEAD
    engine.dispose()


def test_upgrade_from_the_first_schema_keeps_runs_and_metrics(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'db.sqlite'}")
    with engine.begin() as connection:
        command.upgrade(alembic_config(connection), "0001")
        connection.execute(
            text("INSERT INTO experiment (id, name, created_at, request) VALUES ('e1', 'x', '2026-01-01', '{}')")
        )
        for run_id, job_id in (("r1", "41"), ("r2", None)):
            connection.execute(
                text(
                    "INSERT INTO run (id, experiment_id, position, state, job_id, scheduler, run_dir, created_at, "
                    "spec, log_offset, ingest_done, parse_errors) VALUES "
                    "(:id, 'e1', 0, 'COMPLETED', :job, 'slurm', '/r', '2026-01-01', '{}', 7, 1, 0)"
                ),
                {"id": run_id, "job": job_id},
            )
        connection.execute(
            text("INSERT INTO metric (run_id, offset, kind, record) VALUES ('r1', 0, 'start', '{\"v\": 1}')")
        )
    init_db(engine)
    with engine.connect() as connection:
        rows = connection.execute(text("SELECT id, state, attempt, waiting, log_offset FROM run ORDER BY id")).all()
        assert [tuple(row) for row in rows] == [("r1", "COMPLETED", 1, 0, 7), ("r2", "COMPLETED", 0, 0, 7)]
        assert connection.execute(text("SELECT count(*) FROM metric")).scalar_one() == 1


def test_sqlite_runs_in_wal_mode(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'db.sqlite'}")
    with engine.connect() as connection:
        assert connection.execute(text("PRAGMA journal_mode")).scalar_one() == "wal"
        assert connection.execute(text("PRAGMA foreign_keys")).scalar_one() == 1


# Rows of every table as the schema at each revision had them, with the values a real database holds: every run
# state of the time, JSON records, non-ASCII text, NULLs, large offsets.
SEED_0002: dict[str, list[dict[str, Any]]] = {
    "experiment": [
        {"id": "e1", "name": "scaling ✓", "created_at": "2026-01-01 10:00:00.000000", "request": '{"name": "a"}',
         "max_concurrent": None},
        {"id": "e2", "name": "limited", "created_at": "2026-01-02 10:00:00.000000", "request": "{}",
         "max_concurrent": 2},
    ],
    "run": [
        {"id": f"r{index}", "experiment_id": "e1" if index % 2 else "e2", "position": index, "state": state,
         "job_id": None if state in ("created", "submit_failed") else str(100 + index), "scheduler": "slurm",
         "scheduler_state": state.upper(), "scheduler_reason": "None", "exit_code": "0:0",
         "message": "die Größe" if index == 3 else None, "run_dir": f"/runs/r{index}",
         "created_at": "2026-01-01 10:00:00.000000", "submitted_at": "2026-01-01 10:00:01.000000",
         "started_at": None, "ended_at": "2026-01-01 11:00:00.000000", "spec": '{"gpus": 2}',
         "log_offset": 2**40 + index, "ingest_done": index % 2, "parse_errors": index, "profile": "local",
         "attempt": 1 + index % 3, "waiting": int(state == "created")}
        for index, state in enumerate(
            ["created", "submitted", "pending", "running", "completed", "failed", "cancelled", "timeout",
             "node_fail", "out_of_memory", "preempted", "submit_failed"]
        )
    ],
    "metric": [
        {"id": index + 1, "run_id": "r4", "offset": index * 200, "kind": kind, "epoch": epoch,
         "record": f'{{"v": 1, "kind": "{kind}", "loss": {1 / (index + 1)}}}'}
        for index, (kind, epoch) in enumerate([("start", None), ("epoch", 1), ("epoch", 2), ("end", None)])
    ],
    "runsummary": [
        {"run_id": "r4", "world_size": 2, "device": "cpu", "epochs_done": 2, "first_epoch_time_s": 1.5,
         "epoch_time_sum_s": 3.25, "last_train_loss": 0.125, "last_val_loss": None, "last_val_accuracy": 0.875,
         "last_samples_per_s": 1234.5, "peak_memory_bytes": 2**33, "total_time_s": 4.0, "end_status": "completed"},
    ],
    "runevent": [
        {"id": index + 1, "run_id": "r3", "at": "2026-01-01 10:00:00.000000", "kind": kind, "job_id": "103",
         "state": state, "scheduler_state": None, "detail": detail}
        for index, (kind, state, detail) in enumerate(
            [("submitted", "submitted", None), ("state", "running", "Resources"), ("requeued", "pending", "x")]
        )
    ],
}  # fmt: skip
SEED_0003: dict[str, list[dict[str, Any]]] = {
    "user": [
        {"name": "admin", "is_admin": 1, "slurm_account": None, "max_concurrent_runs": None, "max_gpus_in_use": 8,
         "max_runs_per_day": 100, "created_at": "2026-01-03 10:00:00.000000", "revoked_at": None,
         "password_hash": "scrypt$x"},
        {"name": "ana", "is_admin": 0, "slurm_account": "proj1", "max_concurrent_runs": 2, "max_gpus_in_use": None,
         "max_runs_per_day": None, "created_at": "2026-01-03 10:00:00.000000",
         "revoked_at": "2026-01-04 10:00:00.000000", "password_hash": None},
    ],
    "apitoken": [
        {"id": "t1", "user_name": "ana", "token_hash": "a" * 64, "created_at": "2026-01-03 10:00:00.000000",
         "last_used_at": None, "revoked_at": None},
    ],
    "websession": [
        {"id_hash": "b" * 64, "user_name": "admin", "csrf_token": "c" * 43,
         "created_at": "2026-01-03 10:00:00.000000", "expires_at": "2026-01-03 22:00:00.000000"},
    ],
    "experiment": [
        {"id": "e3", "name": "ana's", "created_at": "2026-01-03 10:00:00.000000", "request": "{}",
         "max_concurrent": None, "owner": "ana"},
    ],
    "run": [
        {**SEED_0002["run"][4], "id": "r99", "experiment_id": "e3", "owner": "ana"},
    ],
}  # fmt: skip


def seed(connection, tables: dict[str, list[dict]]) -> None:
    # The users first: experiments and runs point at them.
    for table in sorted(tables, key=lambda name: name not in ("user", "apitoken", "websession")):
        for row in tables[table]:
            columns = ", ".join(f'"{column}"' for column in row)
            values = ", ".join(f":{column}" for column in row)
            # Table and column names come from the constants above, values are bound.
            connection.execute(text(f'INSERT INTO "{table}" ({columns}) VALUES ({values})'), row)  # noqa: S608


def snapshot(connection) -> dict[str, list[dict]]:
    """Every row of every table, in a stable order, as SQLite returns it."""
    tables = connection.execute(text("SELECT name FROM sqlite_master WHERE type = 'table'")).scalars().all()
    found = {}
    for table in tables:
        if table == "alembic_version":
            continue
        query = text(f'SELECT * FROM "{table}"')  # noqa: S608 - a name from sqlite_master
        rows = [dict(row._mapping) for row in connection.execute(query)]
        found[table] = sorted(rows, key=repr)
    return found


@pytest.mark.parametrize(("revision", "seeds"), [("0002", [SEED_0002]), ("0003", [SEED_0002, SEED_0003])])
def test_upgrade_from_the_previous_schemas_keeps_every_row(tmp_path, revision, seeds):
    engine = make_engine(f"sqlite:///{tmp_path / 'db.sqlite'}")
    with engine.begin() as connection:
        command.upgrade(alembic_config(connection), revision)
        for tables in seeds:
            seed(connection, tables)
        before = snapshot(connection)
    assert sum(map(len, before.values())) == sum(len(rows) for tables in seeds for rows in tables.values())
    assert all(before.values()), "seed every table of the old schema"

    init_db(engine)  # as a server started on the old database does
    with engine.connect() as connection:
        after = snapshot(connection)
        assert connection.execute(text("SELECT version_num FROM alembic_version")).scalar_one() == HEAD
    for table, rows in before.items():
        # Each old column of each row holds what it held; new columns may have been added beside them.
        kept = sorted(({column: row[column] for column in rows[0]} for row in after[table]), key=repr)
        assert kept == rows, table
    engine.dispose()


def _start() -> rec.StartRecord:
    return rec.StartRecord(
        world_size=2, nodes=1, device="cpu", backend="gloo", strategy="tp", torch_version="2", hostname="h"
    )


def _epoch(epoch: int, time_s: float) -> rec.EpochRecord:
    return rec.EpochRecord(epoch=epoch, train_loss=1.0, val_loss=1.0, val_accuracy=0.5, epoch_time_s=time_s)


def _memory(rank: int, peak: int) -> rec.MemoryRecord:
    return rec.MemoryRecord(epoch=0, rank=rank, peak_allocated_bytes=peak, memory_kind="cpu")


def _figures(tokens_per_s: float) -> rec.InferenceRecord:
    return rec.InferenceRecord(
        tp=2, compile=False, precision="fp32", batch_size=1, requests=1, new_tokens=8, load_time_s=1.0, ttft_s=0.1,
        ttft_p50_s=0.1, tokens_per_s=tokens_per_s, request_tokens_per_s=1.0, latency_p50_s=0.1, latency_p95_s=0.1,
        generation_time_s=1.0, peak_memory_bytes=1, memory_kind="cpu",
    )  # fmt: skip


# Outputs of runs ingested before revision 0006, each with what it tests of the rule.
HISTORIES_BEFORE_0006: dict[str, list[rec.WorkerRecord]] = {
    # Requeued after epoch 3, resumed from epoch 2's checkpoint: the first epoch 3 does not count.
    "resumed": [_start(), _epoch(1, 5), _epoch(2, 2), _epoch(3, 9), _start(), rec.ResumeRecord(epoch=2), _epoch(3, 3),
                _epoch(4, 4), rec.EndRecord(status="completed", total_time_s=20)],
    "restarted": [_start(), _epoch(1, 5), _epoch(2, 2), _start()],
    "repeated": [_start(), _epoch(1, 5), _epoch(2, 9), _epoch(2, 3)],
    "inference": [_start(), _memory(0, 10), _memory(1, 11), _figures(1.0), _start(), _memory(0, 20), _figures(2.0)],
    "steps": [_start(), rec.StepRecord(epoch=1, step=1, train_loss=2.0), _epoch(1, 5)],
}  # fmt: skip


def test_records_ingested_before_0006_get_the_verdicts_ingestion_gives(tmp_path, session):
    engine = make_engine(f"sqlite:///{tmp_path / 'old.sqlite'}")
    with engine.begin() as connection:
        command.upgrade(alembic_config(connection), "0005")
        connection.execute(
            text("INSERT INTO experiment (id, name, created_at, request) VALUES ('e1', 'x', '2026-01-01', '{}')")
        )
        for position, (run_id, records) in enumerate(HISTORIES_BEFORE_0006.items()):
            connection.execute(
                text(
                    "INSERT INTO run (id, experiment_id, position, state, scheduler, run_dir, created_at, spec, "
                    "log_offset, ingest_done, parse_errors, attempt, waiting) VALUES "
                    "(:id, 'e1', :position, 'completed', 'slurm', '/r', '2026-01-01', '{}', 0, 1, 0, 1, 0)"
                ),
                {"id": run_id, "position": position},
            )
            for offset, record in enumerate(records):
                connection.execute(
                    text("INSERT INTO metric (run_id, \"offset\", kind, epoch, record) VALUES (:r, :o, :k, :e, :j)"),
                    {"r": run_id, "o": offset * 100, "k": record.kind, "e": getattr(record, "epoch", None),
                     "j": record.model_dump_json(exclude_none=True)},
                )  # fmt: skip
    init_db(engine)

    # The same outputs ingested now, into the test's own database.
    experiment = experiment_row(session)
    ingested = {}
    for run_id, records in HISTORIES_BEFORE_0006.items():
        (tmp_path / run_id).mkdir()
        (tmp_path / run_id / OUTPUT_FILE).write_text("".join(rec.format_record(record) + "\n" for record in records))
        run = run_row(session, experiment, tmp_path / run_id)
        ingest(session, run)
        session.commit()
        ingested[run_id] = run.id
    with Session(engine) as old:
        dropped = {}
        for run_id, new_id in ingested.items():
            migrated = old.exec(select(Metric).where(Metric.run_id == run_id).order_by(col(Metric.offset))).all()
            fresh = session.exec(select(Metric).where(Metric.run_id == new_id).order_by(col(Metric.offset))).all()
            assert [(m.kind, m.counts) for m in migrated] == [(m.kind, m.counts) for m in fresh], run_id
            dropped[run_id] = [index for index, metric in enumerate(migrated) if not metric.counts]
        # By place in each output: the superseded epoch 3; both epochs of the restart; the first print of epoch 2;
        # the first attempt's memory and figures; nothing of a run that never restarted.
        assert dropped == {"resumed": [3], "restarted": [1, 2], "repeated": [2], "inference": [1, 2, 3], "steps": []}
        resumed = epoch_histories(old, ["resumed"])["resumed"]
        assert [(point.epoch, point.epoch_time_s) for point in resumed] == [(1, 5), (2, 2), (3, 3), (4, 4)]
    engine.dispose()


def test_upgrade_to_0008_makes_old_experiments_private_and_old_users_scalelabs_own(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'db.sqlite'}")
    with engine.begin() as connection:
        command.upgrade(alembic_config(connection), "0007")
        connection.execute(text("INSERT INTO user (name, is_admin, created_at) VALUES ('ann', 0, '2026-01-01')"))
        connection.execute(
            text(
                "INSERT INTO experiment (id, name, owner, created_at, request) "
                "VALUES ('e1', 'x', 'ann', '2026-01-01', '{}')"
            )
        )
    init_db(engine)
    with engine.connect() as connection:
        assert connection.execute(text("SELECT sharing, sharing_group FROM experiment")).one() == ("private", None)
        assert connection.execute(text("SELECT unix FROM user")).scalar_one() == 0


def test_upgrade_to_0009_labels_old_summaries_with_the_measure_their_runs_printed(database_url):
    """The latest counted epoch record's label: a superseded print (counts false) does not name the measure."""
    engine = make_engine(database_url)
    # (run, offset, the epoch record's label, counts)
    printed: list[tuple[str, int, str | None, bool]] = [("rss", 0, "cpu_max_rss", True), ("gpu", 0, "cuda", True)]
    printed += [("gpu", 100, "cpu_max_rss", False), ("none", 0, None, True)]
    with engine.begin() as connection:
        command.upgrade(alembic_config(connection), "0008")
        connection.execute(
            text("INSERT INTO experiment (id, name, created_at, request) VALUES ('e1', 'x', '2026-01-01', '{}')")
        )
        for position, run_id in enumerate(("rss", "gpu", "none")):
            connection.execute(
                text(
                    "INSERT INTO run (id, experiment_id, position, state, scheduler, run_dir, created_at, spec, "
                    "log_offset, ingest_done, parse_errors, attempt, waiting) VALUES "
                    "(:id, 'e1', :position, 'completed', 'slurm', '/r', '2026-01-01', '{}', 0, true, 0, 1, false)"
                ),
                {"id": run_id, "position": position},
            )
            connection.execute(
                text("INSERT INTO runsummary (run_id, epochs_done, epoch_time_sum_s, peak_memory_bytes) "
                     "VALUES (:id, 1, 1.0, 5)"),
                {"id": run_id},
            )  # fmt: skip
        for run_id, offset, kind, counts in printed:
            record = rec.EpochRecord(epoch=1, train_loss=1.0, epoch_time_s=1.0, peak_memory_bytes=5, memory_kind=kind)
            connection.execute(
                text("INSERT INTO metric (run_id, \"offset\", kind, epoch, record, counts) "
                     "VALUES (:r, :o, 'epoch', 1, :j, :c)"),
                {"r": run_id, "o": offset, "j": record.model_dump_json(exclude_none=True), "c": counts},
            )  # fmt: skip
    init_db(engine)
    with engine.connect() as connection:
        rows = connection.execute(text("SELECT run_id, peak_memory_kind FROM runsummary")).all()
        labels: dict[str, str | None] = {run_id: kind for run_id, kind in rows}
        assert labels == {"rss": "cpu_max_rss", "gpu": "cuda", "none": None}
        assert set(connection.execute(text("SELECT peak_rss_bytes FROM runsummary")).scalars()) == {None}
    engine.dispose()


def test_upgrade_to_0013_tells_imported_runs_by_their_origin_and_keeps_their_scheduler(database_url):
    engine = make_engine(database_url)
    with engine.begin() as connection:
        command.upgrade(alembic_config(connection), "0012")
        connection.execute(
            text("INSERT INTO experiment (id, name, created_at, request) VALUES ('e1', 'x', '2026-01-01', '{}')")
        )
        for position, (run_id, scheduler) in enumerate((("s", "slurm"), ("l", "local"), ("i", "import"))):
            connection.execute(
                text(
                    "INSERT INTO run (id, experiment_id, position, state, scheduler, run_dir, created_at, spec, "
                    "log_offset, ingest_done, parse_errors, attempt, waiting) VALUES "
                    "(:id, 'e1', :position, 'completed', :scheduler, '/r', '2026-01-01', '{}', 0, true, 0, 1, false)"
                ),
                {"id": run_id, "position": position, "scheduler": scheduler},
            )
    init_db(engine)
    with engine.connect() as connection:
        rows = connection.execute(text("SELECT id, scheduler, origin FROM run ORDER BY id")).all()
        assert [tuple(row) for row in rows] == [
            ("i", "import", "imported"),
            ("l", "local", "submitted"),
            ("s", "slurm", "submitted"),
        ]
    engine.dispose()


@pytest.mark.parametrize(
    ("given", "used"),
    [
        ("sqlite:////srv/scalelab.db", "sqlite:////srv/scalelab.db"),
        ("postgresql://scalelab:pw@db:5432/scalelab", "postgresql+psycopg://scalelab:pw@db:5432/scalelab"),
        ("postgresql+psycopg://scalelab:pw@db/scalelab", "postgresql+psycopg://scalelab:pw@db/scalelab"),
    ],
)
def test_a_database_url_names_postgresql_through_psycopg(given, used):
    assert Settings(database_url=given).database_url == used


@pytest.mark.parametrize("url", ["mysql://scalelab@db/scalelab", "postgresql+psycopg2://db/scalelab", "db.sqlite"])
def test_a_database_scalelab_does_not_support_is_refused_saying_which_it_does(url):
    with pytest.raises(ValidationError, match="postgresql\\+psycopg://USER:PASSWORD@HOST:PORT/DATABASE"):
        Settings(database_url=url)
