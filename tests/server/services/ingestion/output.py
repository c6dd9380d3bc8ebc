"""A run's output as the ingestion tests write it, and the records ingestion stored of it."""

from __future__ import annotations

from pathlib import Path

from sqlmodel import Session, col, select

from contract.records import EpochRecord, ResumeRecord, StartRecord, format_record
from contract.rundir import OUTPUT_FILE
from server.models import Metric, Run
from server.services.ingestion.parsing import ingest

START = format_record(
    StartRecord(world_size=2, nodes=1, device="cpu", backend="gloo", strategy="ddp", torch_version="2", hostname="h")
)


def epoch_line(epoch: int, time_s: float = 2.0, memory: int = 100) -> str:
    return format_record(
        EpochRecord(
            epoch=epoch,
            train_loss=1.0 / epoch,
            val_loss=1.5 / epoch,
            val_accuracy=0.5 + epoch / 100,
            epoch_time_s=time_s,
            samples_per_s=1000.0,
            peak_memory_bytes=memory,
        )
    )


def resume_line(epoch: int) -> str:
    return format_record(ResumeRecord(epoch=epoch))


def append(run: Run, text: str | bytes) -> None:
    data = text.encode() if isinstance(text, str) else text
    with (Path(run.run_dir) / OUTPUT_FILE).open("ab") as handle:
        handle.write(data)


def cycle(session: Session, run: Run) -> int:
    lines = ingest(session, run)
    session.commit()
    return lines


def stored(session: Session, run: Run) -> list[Metric]:
    return list(session.exec(select(Metric).where(Metric.run_id == run.id).order_by(col(Metric.offset))).all())
