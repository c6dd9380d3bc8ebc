"""FSDP's per-rank memory against DDP's, for resnet18 and gpt, on the same data, batch and steps.

Four figures per rank, and the output says which is which:
- measured, as the dashboard charts it: the most each rank's tensors held (the worker's `memory` records,
  labelled cpu_tensors), what a GPU's allocator would count;
- measured, as users run the worker: each rank's peak resident set (the records' peak_rss_bytes), which
  glibc's malloc inflates: it keeps freed big blocks in the heap;
- measured again with big blocks unmapped when freed (MALLOC_MMAP_THRESHOLD_), so the resident set follows
  the memory actually in use, FSDP's short-lived gather and reduce buffers included;
- computed: the bytes of parameters + gradients + SGD momentum a rank holds, from the parameter count in the
  worker's `start` record: all of them under DDP, a 1/N shard under FSDP.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benches.common import REPO, BenchError, Launch, load_average, mib, table, work_dir, worker_run

BYTES_PER_VALUE = 4  # fp32
STATE_COPIES = 3  # parameters, gradients, SGD momentum
# Five: the timer profiles steps 2-4, and the tensors are measured on a later step, once momentum exists.
STEPS = 5
STRATEGIES = ("ddp", "fsdp")
# glibc raises its mmap threshold each time a mapped block is freed (up to 32 MiB), after which big tensors
# come from the heap and stay resident once freed. A fixed threshold turns that off: every block from 128 KiB
# up is its own mapping and goes back to the system when freed.
ALLOCATORS: dict[str, dict[str, str]] = {
    "glibc default": {},
    "big blocks unmapped": {"MALLOC_MMAP_THRESHOLD_": str(128 * 1024)},
}


@dataclass(frozen=True)
class Case:
    name: str
    spec: dict[str, Any]
    about: str


CASES = (
    Case(
        "resnet18",
        {"model": "resnet18", "dataset": "synthetic", "global_batch_size": 32},
        "synthetic 32x32 images, global batch 32",
    ),
    # Larger than gpt's default (0.8 M parameters, 10 MB of state: nothing against a 700 MB runtime), so that
    # sharding has something to show; a context of 32 keeps its evaluation pass short on two cores.
    Case(
        "gpt",
        {
            "model": "gpt",
            "dataset": "synthetic",
            "width": 512,
            "depth": 8,
            "heads": 8,
            "context": 32,
            "global_batch_size": 16,
        },
        "width 512, depth 8, 8 heads, context 32, synthetic tokens, global batch 16",
    ),
)

# What a rank holds before any model or data: Python, torch, the worker's modules, a gloo process group.
_RUNTIME_PROBE = """
import resource, torch.distributed as dist, torchvision.models
import worker.train
dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""


def runtime_floor() -> int:
    result = subprocess.run(
        [sys.executable, "-c", _RUNTIME_PROBE], cwd=REPO, capture_output=True, text=True, timeout=300, check=True
    )
    return int(result.stdout.split()[-1])


def largest_unit_share(case: Case) -> tuple[str, float]:
    """The FSDP unit holding most parameters, and its share: FSDP gathers each unit whole while it runs."""
    import torch

    from contract.spec import RunSpec
    from worker import models
    from worker.datasets import synthetic

    spec = RunSpec.model_validate({**case.spec, "gpus": 1})
    torch.manual_seed(0)
    model_spec = models.model_spec(spec.model)
    model = model_spec.build(spec, synthetic.load(spec, 0))
    total = sum(p.numel() for p in model.parameters())
    names = {id(module): name for name, module in model.named_modules()}
    units = [(names[id(u)], sum(p.numel() for p in u.parameters())) for u in model_spec.fsdp_units(model)]
    name, count = max(units, key=lambda unit: unit[1], default=("the whole model", total))
    return name, count / total


def state_bytes(parameters: int, processes: int, strategy: str) -> float:
    full = parameters * BYTES_PER_VALUE * STATE_COPIES
    return full / processes if strategy == "fsdp" else full


Key = tuple[int, str, str]  # processes, strategy, allocator


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benches.memory", description=__doc__)
    parser.add_argument("--processes", type=int, nargs="+", default=[2, 4], help="process counts (default 2 4)")
    parser.add_argument(
        "--default-malloc-processes",
        type=int,
        nargs="*",
        default=[2],
        help="process counts to measure with glibc's default malloc as well (default 2: the retained buffers "
        "show there already, and each pair of runs costs most of a minute)",
    )
    parser.add_argument("--models", nargs="+", choices=[c.name for c in CASES], default=[c.name for c in CASES])
    parser.add_argument("--tmp", type=Path, help="where to put the run directories (default: a new one)")
    return parser


def _measure(case: Case, key: Key, tmp: Path) -> Launch:
    processes, strategy, allocator = key
    spec = {**case.spec, "strategy": strategy, "gpus": processes, "epochs": 1, "steps_per_epoch": STEPS, "lr": 0.02}
    run_dir = tmp / f"{case.name}-{strategy}-{processes}-{list(ALLOCATORS).index(allocator)}"
    label = f"{case.name} {strategy} x{processes} ({allocator})"
    return worker_run(spec, run_dir, label=label, env=ALLOCATORS[allocator])


def _peaks(runs: dict[Key, Launch], key: Key) -> list[int]:
    """Each rank's peak resident set."""
    launch = runs.get(key)
    return [] if launch is None else [m.peak_rss_bytes or 0 for m in launch.memory()]


def _tensor_peaks(runs: dict[Key, Launch], key: Key) -> list[int]:
    """Each rank's tensors at their peak (the allocator does not change them)."""
    launch = runs.get(key)
    memory = [] if launch is None else launch.memory()
    return [m.peak_allocated_bytes for m in memory if m.memory_kind == "cpu_tensors"]


def _per_rank(peaks: list[int]) -> str:
    return " / ".join(f"{p / 2**20:,.0f}" for p in peaks) if peaks else "-"


def _report(case: Case, runs: dict[Key, Launch], floor: int) -> None:
    parameters = next((s.parameters for r in runs.values() if (s := r.start()) and s.parameters), None)
    if parameters is None:
        print(f"{case.name}: no run reported its parameter count")
        return
    unit, share = largest_unit_share(case)
    default, unmapped = ALLOCATORS
    print(f"-- {case.name}: {parameters:,} parameters; {case.about}; {STEPS} steps, then evaluation --")
    rows = []
    for processes in sorted({key[0] for key in runs}):
        for strategy in STRATEGIES:
            rows.append(
                [
                    f"{strategy} x{processes}",
                    _per_rank(_tensor_peaks(runs, (processes, strategy, unmapped))),
                    _per_rank(_peaks(runs, (processes, strategy, default))),
                    _per_rank(_peaks(runs, (processes, strategy, unmapped))),
                    f"{state_bytes(parameters, processes, strategy) / 2**20:,.0f}",
                ]
            )
    header = [
        "MiB per rank",
        "MEASURED cpu_tensors",
        f"MEASURED peak RSS, {default}",
        f"MEASURED peak RSS, {unmapped}",
        "COMPUTED params+grads+momentum",
    ]
    print(table(header, rows))
    for processes in sorted({key[0] for key in runs}):
        ratios = []
        for allocator in ALLOCATORS:
            ddp, fsdp = _peaks(runs, (processes, "ddp", allocator)), _peaks(runs, (processes, "fsdp", allocator))
            if ddp and fsdp:
                # The largest rank on each side: the one that would run out of memory first.
                above = (max(fsdp) - floor) / (max(ddp) - floor)
                ratios.append(f"{max(fsdp) / max(ddp):.2f} with {allocator} ({above:.2f} above the runtime floor)")
        ddp, fsdp = (_tensor_peaks(runs, (processes, strategy, unmapped)) for strategy in STRATEGIES)
        if ddp and fsdp:
            ratios.insert(0, f"{max(fsdp) / max(ddp):.2f} in cpu_tensors")
        computed = state_bytes(parameters, processes, "fsdp") / state_bytes(parameters, processes, "ddp")
        print(f"N={processes}: FSDP/DDP per rank, measured: {'; '.join(ratios) or 'failed'}; computed {computed:.2f}")
    print(
        f"     runtime floor (measured): a process that only imports torch and the worker and joins a gloo group "
        f"peaks at {mib(floor)} RSS; the whole computed DDP state is {mib(state_bytes(parameters, 1, 'ddp'))}"
    )
    print(
        f"     not in the computed column: DDP's gradient buckets (one more copy of the gradients, "
        f"{mib(parameters * BYTES_PER_VALUE)}); FSDP's gathered unit while it runs (the largest, {unit}, holds "
        f"{share:.0%} of the parameters) and its reduce buffers; activations; the data set; and the full model "
        f"every rank builds before FSDP shards it (peak RSS is a high-water mark over the whole process)"
    )


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    with work_dir(args.tmp) as tmp:
        return _bench(args, tmp)


def _bench(args: argparse.Namespace, tmp: Path) -> int:
    print("== Memory: FSDP vs DDP, per rank ==")
    print(
        "MEASURED = the worker's memory records: each rank's tensors at their peak (cpu_tensors, what the dashboard "
        "charts), and its peak resident set, which includes the Python/torch "
        "runtime; once as the worker runs, once with big freed blocks given back to the system. COMPUTED = "
        "parameters + gradients + SGD momentum in fp32 from the start record's parameter count (DDP: all of them "
        "on every rank; FSDP: 1/N each)"
    )
    print(f"before: {load_average()}")
    floor = runtime_floor()
    failures: list[str] = []
    for case in CASES:
        if case.name not in args.models:
            continue
        runs: dict[Key, Launch] = {}
        for processes in args.processes:
            for allocator, env in ALLOCATORS.items():
                if not env and processes not in args.default_malloc_processes:
                    continue
                for strategy in STRATEGIES:
                    key = (processes, strategy, allocator)
                    try:
                        runs[key] = _measure(case, key, tmp)
                        print(
                            f"  {case.name} {strategy} x{processes} ({allocator}): {runs[key].wall_s:.0f} s", flush=True
                        )
                    except BenchError as exc:
                        failures.append(str(exc))
                        print(f"  FAILED: {exc}", flush=True)
        print()
        _report(case, runs, floor)
        print()
    print(f"after: {load_average()}")
    for failure in failures:
        print(f"FAILED: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
