"""Launched by torchrun: one training step of the spec's strategy under torch's profiler, and the collectives it ran.

Prints, on rank 0, one JSON line: per rank, each collective torch's c10d ran in the step as [kind, bytes], the bytes
as nccl-tests counts a buffer (an all-gather's whole output, a reduce-scatter's whole input; a send on its sender
only). The test sets them against contract.traffic. The third step is profiled: the first two build DDP's buckets
from the order gradients arrived in and run FSDP's lazy initialisation, collectives of their own.

c10d's operators say which collective ran; those that take a list of tensors record no shapes, so their size is read
from the backend's own event (gloo's), the first of the matching kind that starts after them. Gloo runs a
reduce-scatter as an all-reduce of the whole input: that event is claimed by the reduce-scatter.
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile

from contract.spec import RunSpec
from worker import data
from worker.distributed import init_process_group, read_dist_env
from worker.models import model_spec as spec_of
from worker.parallel import parallelize
from worker.precision import PrecisionPolicy
from worker.train import loss_fn

# c10d's operators: the collective each is, gloo's event for it, and (where the operator records shapes) which of
# them is the buffer and which is gloo's input.
OPERATORS: dict[str, tuple[str, str, tuple[int, int] | None]] = {
    "c10d::allreduce_": ("all_reduce", "gloo:all_reduce", None),
    "c10d::_allgather_base_": ("all_gather", "gloo:all_gather", (0, 1)),
    "c10d::_reduce_scatter_base_": ("reduce_scatter", "gloo:all_reduce", (1, 1)),
    "c10d::broadcast_": ("broadcast", "gloo:broadcast", None),
    "c10d::send": ("send_recv", "gloo:send", None),
}
SIZES = {"float": 4, "c10::BFloat16": 2, "c10::Half": 2, "long int": 8, "double": 8, "int": 4}


def _start(event: Any) -> float:
    return float(event.time_range.start)


def collectives(events: list[Any]) -> list[tuple[str, int]]:
    events = sorted(events, key=_start)
    backend = [e for e in events if e.name.startswith("gloo:")]
    claimed: set[int] = set()
    found = []
    for event in events:
        if event.name not in OPERATORS:
            continue
        kind, gloo_name, own = OPERATORS[event.name]
        shapes = event.input_shapes or []
        size, numel = (math.prod(shapes[own[0]]), math.prod(shapes[own[1]])) if own else (None, None)
        match = next(
            (
                i
                for i, g in enumerate(backend)
                if i not in claimed
                and g.name == gloo_name
                and _start(g) >= _start(event)
                and (numel is None or math.prod(g.input_shapes[0]) == numel)
            ),
            None,
        )
        if match is None:
            raise RuntimeError(f"no {gloo_name} event for {event.name}")
        claimed.add(match)
        gloo = backend[match]
        dtypes = getattr(gloo, "input_dtypes", None) or ["float"]
        found.append((kind, (size or math.prod(gloo.input_shapes[0])) * SIZES[str(dtypes[0])]))
    return found


def main(spec_path: str) -> None:
    spec = RunSpec.model_validate_json(Path(spec_path).read_text())
    env = read_dist_env()
    device = torch.device("cpu")
    init_process_group(env, device)
    bundle = data.load(spec, env.rank)
    torch.manual_seed(spec.seed)
    model_spec = spec_of(spec.model)
    precision = PrecisionPolicy(spec.precision, device)
    par = parallelize(model_spec.build(spec, bundle), model_spec, spec, env, device, precision, loss_fn)
    batch = spec.global_batch_size // par.data_world // spec.grad_accum_steps
    inputs, targets = bundle.train.inputs[:batch], bundle.train.targets[:batch]

    def step() -> None:
        for micro in range(spec.grad_accum_steps):
            par.train_step(inputs, targets, sync=micro == spec.grad_accum_steps - 1)

    for _ in range(2):
        step()
    dist.barrier()
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        step()
        # Every collective the step launched completes while profiled (a barrier is none of OPERATORS).
        dist.barrier()
    everyone: list[object] = [None] * env.world_size
    dist.all_gather_object(everyone, collectives(list(prof.events())))
    if env.rank == 0:
        sys.stdout.write(json.dumps(everyone) + "\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
    # The count is out: leave without the interpreter's teardown, where the profiler's now and then aborts the rank
    # (SIGABRT, "terminate called without an active exception"; seen in about 1 of 20 launches on a loaded machine).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
