"""A run's time from its launch records (contract.records.LaunchRecord): the sum of its launches, each from the batch
script's start record to its end record, with no help from the program; the rule (run_time) is pure, and
launch_records reads the records it takes."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from sqlmodel import Session

from contract.records import LaunchRecord
from server.services.kept_records import records_by_run


@dataclass(frozen=True)
class RunTime:
    """The run's launches summed: `seconds` is None unless every launch that started has ended (a live one has not
    yet; one killed with its job never will, and its time is unknown), and `why_none` says which it is."""

    seconds: float | None
    launches: int
    why_none: str | None = None


def run_time(launches: Iterable[LaunchRecord], final: bool) -> RunTime:
    """The run's time from its launch records in output order (`final`: the run has ended, so a launch without its
    end was cut off). A requeued job launches again: its time is the sum of its launches."""
    total, ended, cut, mismatched = 0.0, 0, 0, 0
    open_launch: LaunchRecord | None = None
    for record in launches:
        if record.event == "start":
            cut += open_launch is not None  # started again before its end: killed with its job
            open_launch = record
        elif open_launch is None or open_launch.attempt != record.attempt or record.at < open_launch.at:
            mismatched += 1  # an end of no launch seen, or before its start: its time cannot be told
        else:
            total, ended, open_launch = total + record.at - open_launch.at, ended + 1, None
    if open_launch is not None:
        if not final:
            return RunTime(None, ended, "a launch is under way")
        cut += 1
    if cut or mismatched:
        why = f"{cut + mismatched} of its launches left no end record (killed with the job): their time is unknown"
        return RunTime(None, ended, why)
    if not ended:
        return RunTime(None, 0, "no launch record (a run from before scalelab timed launches, or imported)")
    return RunTime(total, ended)


def launch_records(session: Session, run_ids: Collection[str]) -> dict[str, list[LaunchRecord]]:
    """Each run's launch records, in output order (none for a run without any)."""
    return records_by_run(session, run_ids, "launch", LaunchRecord)
