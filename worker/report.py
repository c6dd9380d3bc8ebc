"""The one place that writes to stdout: metric records and progress lines, on rank 0 only."""

from __future__ import annotations

import sys

from contract.records import WorkerRecord, format_record


class Reporter:
    def __init__(self, is_main: bool) -> None:
        self.is_main = is_main

    def record(self, record: WorkerRecord) -> None:
        if self.is_main:
            # flush per line: Slurm's output file is what the server follows while the job runs.
            print(format_record(record), flush=True)

    def progress(self, message: str) -> None:
        if self.is_main:
            print(message, flush=True)


def error(message: str) -> None:
    """Errors go to stderr from every rank: the failing rank may not be rank 0."""
    print(message, file=sys.stderr, flush=True)
