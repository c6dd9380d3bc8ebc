"""The one place that writes to stdout: metric records and progress lines, on rank 0 only."""

from __future__ import annotations

import resource
import sys

import torch

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


def peak_memory(device: torch.device) -> tuple[int, int | None, str]:
    """This process's peak memory in bytes: allocated, reserved (CUDA only), and what was measured."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device), torch.cuda.max_memory_reserved(device), "cuda"
    # Linux reports ru_maxrss in KiB; on CPU there is no allocator to ask, only the resident set.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, None, "cpu_max_rss"
