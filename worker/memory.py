"""How much memory a rank holds, by the measures that contract.records.MEMORY_MEASURES names.

On a GPU, CUDA's allocator answers "how much does this strategy hold per GPU" (cuda_allocated). On the CPU torch
keeps no allocator statistics, and the resident set (cpu_max_rss) mostly measures the Python/torch runtime
(~690 MiB) and the allocator's slack, so FSDP's saving drowned in it; TensorPeak measures what the tensors hold
(cpu_tensors), and the resident set is kept beside it, labelled.
"""

from __future__ import annotations

import contextlib
import gc
import resource
import time
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch._C._profiler import _ExtraFields_Allocation
from torch.profiler import ProfilerActivity, profile


@dataclass(frozen=True)
class Peaks:
    """One process's peaks in bytes: what it holds per device (labelled by kind), and its resident set."""

    held: int
    kind: str
    reserved: int | None
    rss: int


def max_rss() -> int:
    # Linux reports ru_maxrss in KiB.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def live_tensor_bytes() -> int:
    """The bytes of the distinct storages of every CPU tensor Python holds (views share their base's storage)."""
    storages: dict[int, int] = {}
    for obj in gc.get_objects():
        # type(), not isinstance(): some module objects warn when their __class__ is looked up.
        if not issubclass(type(obj), torch.Tensor) or obj.device.type != "cpu":
            continue
        try:
            storage = obj.untyped_storage()
            address = storage.data_ptr()
        except (RuntimeError, NotImplementedError):
            # A wrapper (DTensor) has no storage of its own, its inner tensors are counted; a storage FSDP freed
            # (resized to nothing) holds no memory.
            continue
        if address:
            storages[address] = storage.nbytes()
    return sum(storages.values())


def step_peak(prof: profile) -> int:
    """The high-water mark of the bytes a profiled window allocated and had not freed yet.

    Only blocks allocated inside the window count, freed ones by their address: the profiler's own running total
    also carries blocks of earlier windows that were freed while it was off.
    """
    allocations = []
    results = prof.profiler.kineto_results if prof.profiler else None
    pending = list(results.experimental_event_tree()) if results else []
    while pending:
        event = pending.pop()
        pending.extend(event.children)
        fields = event.extra_fields
        if isinstance(fields, _ExtraFields_Allocation) and fields.device.type == "cpu":
            allocations.append((event.start_time_ns, fields.ptr, fields.alloc_size))
    live: dict[int, int] = {}
    total = peak = 0
    for _, ptr, size in sorted(allocations):
        if size > 0:
            live[ptr] = size
            total += size
        elif ptr in live:
            total -= live.pop(ptr)
        peak = max(peak, total)
    return peak


class TensorPeak:
    """The most CPU tensors held at once, over one sampled training step per epoch; the peak so far, as CUDA's.

    Why this measure: it counts what a GPU would hold (parameters, gradients, optimizer state, the data set kept
    on the device, activations, FSDP's gathered blocks) and nothing of the runtime, and it is cheap: once an epoch,
    one scan of Python's objects counts the tensors alive as the step starts, and torch.profiler's memory events
    give each allocation and free during the step, whose running total's high-water mark is added (the scan took
    0.08 s here, over ~300,000 objects; the epoch's time leaves it out). DDP's gradient buckets are among the
    tensors the scan finds: worker.parallel.ddp's comm hook hands them to Python (a DDP without a hook would hide
    them). Left out: tensors only C++ holds from before the step, and blocks allocated and freed on threads other
    than the training thread (gloo's, OpenMP's scratch). A run whose only step free of the timer's profiler is
    the first of its first epoch measures a step without optimizer state yet.
    """

    def __init__(self, device: torch.device) -> None:
        self.enabled = device.type == "cpu"
        self.peak: int | None = None
        self.overhead_s = 0.0
        if self.enabled:
            # The first profiler of a process takes seconds to start: pay for it before any epoch is timed.
            with profile(activities=[ProfilerActivity.CPU], profile_memory=True):
                pass

    @staticmethod
    def step_to_sample(steps: int, timer_sampled: range) -> int | None:
        """The epoch's last step the timer does not profile (one profiler at a time): after the first, the optimizer
        state exists and the step holds what every later one will. None in a 1-step epoch the timer profiles."""
        return max((step for step in range(steps) if step not in timer_sampled), default=None)

    @contextlib.contextmanager
    def watch(self, optimizer: torch.optim.Optimizer, sampled: bool) -> Iterator[None]:
        """Around one optimizer step (outside its timing): measure it when `sampled`."""
        if not (self.enabled and sampled):
            yield
            return
        started = time.perf_counter()
        # The step frees the gradients first; freed here, before the count, they are not counted twice (the
        # profiler cannot see a block freed that was allocated before it started).
        optimizer.zero_grad(set_to_none=True)
        alive = live_tensor_bytes()
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            _all_ranks_here()
            self.overhead_s += time.perf_counter() - started
            yield
            started = time.perf_counter()
        self.peak = max(self.peak or 0, alive + step_peak(prof))
        _all_ranks_here()
        self.overhead_s += time.perf_counter() - started

    def take_overhead(self) -> float:
        """Seconds spent measuring (counting and reading the profile) since the last call, not training's."""
        seconds, self.overhead_s = self.overhead_s, 0.0
        return seconds


def _all_ranks_here() -> None:
    """Every rank waits for the others' measuring here, in its overhead, taken out of the epoch's time: otherwise a
    rank that finished counting first waits for the others inside its step's clock (in its first collective), and
    the mean step of the ranks held rank 0's counting, which its epoch did not (steps at 132 % of the epoch)."""
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


def peaks(device: torch.device, tensors: TensorPeak | None = None) -> Peaks:
    """This process's peaks: on a GPU CUDA's allocator's; on the CPU the tensors' where a step was sampled,
    else (inference, no sampled step yet) the resident set stands in, labelled as such."""
    rss = max_rss()
    if device.type == "cuda":
        return Peaks(
            torch.cuda.max_memory_allocated(device), "cuda_allocated", torch.cuda.max_memory_reserved(device), rss
        )
    if tensors is not None and tensors.peak is not None:
        return Peaks(tensors.peak, "cpu_tensors", None, rss)
    return Peaks(rss, "cpu_max_rss", None, rss)
