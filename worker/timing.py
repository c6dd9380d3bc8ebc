"""Where a rank's optimizer steps go: disjoint wall-clock parts that together make the step.

`data`, `compute` (forward and backward), `optimizer` and `comm` are timed around the training loop's own
calls, with a CUDA synchronize at each boundary so that one part's kernels are not billed to the next (on
the CPU the operators are synchronous). The loss reductions behind step records are timed directly as comm.

Communication inside forward and backward (DDP's gradient buckets, FSDP's all-gathers and reduce-scatters,
TP's activation all-reduces, PP's sends and receives between stages) is no call of the loop, so it is
measured with torch.profiler over a few sampled steps of each epoch, the same way for every strategy: the
collectives' events (gloo's, launch to completion, on the CPU; nccl kernels on a GPU) are laid against the
rank's compute (aten operators on the training thread; the other kernels on a GPU), inside the forward and
backward part only. Where communication runs and nothing computes, the rank waits for it; that share of the
sampled forward+backward time, applied to every step's, is `comm_s`, carved out of forward+backward, so
compute + comm is still that segment. Where both run, communication is hidden: `comm_overlapped_s`, the
same kind of share, already inside compute. A pipeline stage waiting for its neighbour's activations counts
as communication: the pipeline bubble is time spent waiting on a receive. DDP's comm hook still gives the
epoch record's `comm_time_s` (rank 0's bucket all-reduces, launch to completion, every step).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, fields

import torch
from torch.profiler import DeviceType, ProfilerActivity, profile, record_function

PARTS = ("data", "compute", "optimizer", "comm")
COMPUTE_MARK = "scalelab::compute"
# Steps 2 to 4 of each epoch: the first one pays for allocations and lazy initialisation.
FIRST_SAMPLED, SAMPLED = 1, 3

Interval = tuple[float, float]


@dataclass(frozen=True)
class StepTimes:
    """One rank's epoch: seconds per optimizer step, by part."""

    steps: int
    step_s: float
    data_s: float
    compute_s: float
    optimizer_s: float
    comm_s: float
    comm_overlapped_s: float | None

    def to_list(self) -> list[float]:
        """For a collective: None is sent as -1."""
        return [-1.0 if value is None else float(value) for value in (getattr(self, f.name) for f in fields(self))]

    @classmethod
    def from_list(cls, values: list[float]) -> StepTimes:
        steps, step_s, data_s, compute_s, optimizer_s, comm_s, overlapped = values
        return cls(int(steps), step_s, data_s, compute_s, optimizer_s, comm_s, None if overlapped < 0 else overlapped)

    def breakdown(self) -> dict[str, float]:
        return {part: getattr(self, f"{part}_s") for part in PARTS}


def union(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, disjoint intervals covering the same time."""
    merged: list[Interval] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def intersect(a: list[Interval], b: list[Interval]) -> list[Interval]:
    """The time two unions (as `union` returns them) share."""
    shared: list[Interval] = []
    i = j = 0
    while i < len(a) and j < len(b):
        start, end = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if start < end:
            shared.append((start, end))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return shared


def length(intervals: list[Interval]) -> float:
    return sum(end - start for start, end in intervals)


def _span(event: object) -> Interval:
    time_range = getattr(event, "time_range")  # noqa: B009  (FunctionEvent, untyped in torch)
    return float(time_range.start), float(time_range.end)


def waited_and_hidden(events: Iterable[object], on_gpu: bool) -> tuple[float, float]:
    """The shares of the forward+backward windows where communication ran with nothing computing, and with compute."""
    events = list(events)
    marks = [e for e in events if getattr(e, "name", "") == COMPUTE_MARK]
    windows = union(_span(e) for e in marks)
    main_thread = {getattr(e, "thread", None) for e in marks}
    comm: list[Interval] = []
    busy: list[Interval] = []
    for event in events:
        name = str(getattr(event, "name", ""))
        if on_gpu:
            if getattr(event, "device_type", None) != DeviceType.CUDA:
                continue
            (comm if "nccl" in name.lower() else busy).append(_span(event))
        elif name.startswith(("gloo:", "nccl:")):
            comm.append(_span(event))
        elif name.startswith("aten::") and getattr(event, "thread", None) in main_thread:
            busy.append(_span(event))
    under_way = intersect(union(comm), windows)
    hidden = length(intersect(under_way, union(busy)))
    total = length(windows) or 1.0
    return (length(under_way) - hidden) / total, hidden / total


class StepTimer:
    """Times the training loop's parts; samples a few steps with the profiler where a step communicates."""

    def __init__(self, device: torch.device, communicates: bool) -> None:
        self.device = device
        self.communicates = communicates
        self.activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
        if communicates:
            # The first profiler of a process takes seconds to start: pay for it before any epoch is timed.
            with profile(activities=self.activities):
                pass
        self.begin_epoch(0)

    def begin_epoch(self, steps: int) -> None:
        self.seconds = dict.fromkeys(PARTS, 0.0)
        self.step_seconds = 0.0
        self.steps = 0
        first = min(FIRST_SAMPLED, max(steps - 1, 0))
        self.sampled = range(first, min(first + SAMPLED, steps)) if self.communicates else range(0)
        self.profiler: profile | None = None
        self.profiled: profile | None = None

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    @contextlib.contextmanager
    def step(self, index: int) -> Iterator[None]:
        """One optimizer step; the profiler starts and stops outside the steps' time."""
        if index == self.sampled.start and self.sampled:
            self.profiler = profile(activities=self.activities)
            self.profiler.__enter__()
        self._sync()
        started = time.perf_counter()
        yield
        self._sync()
        self.step_seconds += time.perf_counter() - started
        self.steps += 1
        if self.profiler is not None and index == self.sampled[-1]:
            # Stopping is cheap; reading the events costs up to tenths of a second, so summary() does it.
            self.profiler.__exit__(None, None, None)
            self.profiled, self.profiler = self.profiler, None

    @contextlib.contextmanager
    def part(self, name: str) -> Iterator[None]:
        self._sync()
        started = time.perf_counter()
        mark = record_function(COMPUTE_MARK) if name == "compute" and self.profiler else contextlib.nullcontext()
        with mark:
            yield
            self._sync()
        self.seconds[name] += time.perf_counter() - started

    def summary(self) -> StepTimes:
        """The epoch's means per step (call it once the epoch's time is taken: reading the profile costs)."""
        steps = max(self.steps, 1)
        waited = hidden = 0.0
        if self.profiled is not None:
            waited, hidden = waited_and_hidden(self.profiled.events(), self.device.type == "cuda")
        # Shares, not the sampled seconds: the profiler slows the steps it watches, and the first are warming up.
        forward_backward = self.seconds["compute"] / steps
        waited, hidden = waited * forward_backward, hidden * forward_backward
        return StepTimes(
            steps=self.steps,
            step_s=self.step_seconds / steps,
            data_s=self.seconds["data"] / steps,
            compute_s=forward_backward - waited,
            optimizer_s=self.seconds["optimizer"] / steps,
            comm_s=self.seconds["comm"] / steps + waited,
            comm_overlapped_s=hidden if self.communicates else None,
        )
