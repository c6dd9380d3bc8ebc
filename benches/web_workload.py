"""The web benchmark's workload: experiments, runs and the metric records they printed, made up the same each time.

Standard library only: the MLflow side runs it in its own environment, where scalelab's packages are not
installed, and must log exactly the records scalelab's side stores.

A metric point is one record the worker prints (one history row in scalelab): a run's start, each step's loss,
each epoch's figures, its end.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

FULL_RUNS = 10_000
FULL_POINTS = 2_000_000
# The experiment whose dashboard is measured: every strategy of it on each GPU count, with four batch sizes.
DASHBOARD_RUNS = 32
QUERIED_RUNS = 100
USERS = ("alice", "bob", "chen", "dana", "emeka", "farah", "goran")
EXPERIMENT_SIZES = (4, 8, 12, 16, 24, 32, 48, 64)
GPUS = (1, 2, 4, 8)
BATCHES = (64, 128, 256, 512)
STRATEGIES = {"mlp": ("ddp", "fsdp", "tp"), "cnn": ("ddp", "fsdp"), "resnet18": ("ddp", "fsdp"), "gpt": ("ddp", "fsdp")}
# The newest experiments are still under way; all older ones have ended.
LIVE_EXPERIMENTS = 3
FINAL_STATES = ("completed",) * 14 + ("failed", "cancelled", "timeout", "out_of_memory")
LIVE_STATES = ("running", "running", "pending", "completed")
# States of runs whose job has not started: they printed nothing.
SILENT_STATES = frozenset({"created", "submitted", "pending"})


@dataclass(frozen=True)
class PlannedRun:
    experiment: int  # the experiment's index
    position: int
    owner: str
    state: str
    spec: dict[str, Any]  # the spec fields the grid sets; the rest take their defaults
    points: int  # how many records the run printed
    seed: int

    @property
    def final(self) -> bool:
        return self.state not in ("created", "submitted", "pending", "running")


@dataclass(frozen=True)
class PlannedExperiment:
    index: int
    name: str
    owner: str
    runs: tuple[PlannedRun, ...]


@dataclass(frozen=True)
class Workload:
    experiments: tuple[PlannedExperiment, ...]
    seed: int

    @property
    def runs(self) -> Iterator[PlannedRun]:
        return (run for experiment in self.experiments for run in experiment.runs)

    @property
    def run_count(self) -> int:
        return sum(len(experiment.runs) for experiment in self.experiments)

    @property
    def point_count(self) -> int:
        return sum(run.points for run in self.runs)

    def queried(self) -> list[tuple[int, int]]:
        """(experiment, position) of the runs the 100-run queries ask for: spread over the whole history."""
        printed = [(run.experiment, run.position) for run in self.runs if run.points]
        step = max(len(printed) // QUERIED_RUNS, 1)
        return printed[::step][:QUERIED_RUNS]


def sizes(scale: float) -> tuple[int, int]:
    """Runs and points at this fraction of the full workload."""
    return max(round(FULL_RUNS * scale), 1), max(round(FULL_POINTS * scale), 0)


def plan(runs: int, points: int, seed: int = 0) -> Workload:
    """Experiments holding exactly `runs` runs which printed exactly `points` records in all.

    The first experiment is the dashboard's, of exactly DASHBOARD_RUNS runs (fewer only if `runs` is smaller).
    """
    rng = random.Random(seed)  # noqa: S311 (a workload made up the same each time, no secret)
    counts: list[int] = []
    left = runs
    while left > 0:
        count = min(DASHBOARD_RUNS if not counts else rng.choice(EXPERIMENT_SIZES), left)
        counts.append(count)
        left -= count
    drafts: list[list[PlannedRun]] = []
    for index, count in enumerate(counts):
        owner = USERS[rng.randrange(len(USERS))]
        model = "mlp" if index == 0 else rng.choice(sorted(STRATEGIES))
        strategies = STRATEGIES[model][:2] if index == 0 else STRATEGIES[model]
        epochs = 10 if index == 0 else rng.choice((5, 10, 20))
        live = index >= len(counts) - LIVE_EXPERIMENTS and len(counts) > LIVE_EXPERIMENTS
        # Grid order: each seed repeats the whole grid (product() would exhaust an endless count first).
        grid = ((s, b, st, g) for s in itertools.count() for b, st, g in itertools.product(BATCHES, strategies, GPUS))
        drafts.append(
            [
                PlannedRun(
                    experiment=index,
                    position=position,
                    owner=owner,
                    state=rng.choice(LIVE_STATES if live else FINAL_STATES),
                    spec={
                        "model": model,
                        "dataset": "synthetic",
                        "strategy": strategy,
                        "gpus": gpus,
                        "epochs": epochs,
                        "global_batch_size": batch,
                        "seed": run_seed,
                    },
                    points=0,
                    seed=rng.getrandbits(32),
                )
                for position, (run_seed, batch, strategy, gpus) in zip(range(count), grid, strict=False)
            ]
        )
    # Every run that printed anything printed about as much as the others; the remainder goes to the first ones.
    printing = [run for draft in drafts for run in draft if run.state not in SILENT_STATES]
    share, extra = divmod(points, len(printing)) if printing else (0, 0)
    given = {id(run): share + (1 if i < extra else 0) for i, run in enumerate(printing)}
    experiments = tuple(
        PlannedExperiment(
            index=index,
            name=f"{draft[0].spec['model']} scaling study {index}" if index else "dashboard: mlp ddp/fsdp on 1-8 GPUs",
            owner=draft[0].owner,
            runs=tuple(_with_points(run, given.get(id(run), 0)) for run in draft),
        )
        for index, draft in enumerate(drafts)
    )
    if points and not printing:
        raise ValueError("no run of this workload printed anything: give it more runs")
    return Workload(experiments, seed)


def _with_points(run: PlannedRun, points: int) -> PlannedRun:
    return PlannedRun(run.experiment, run.position, run.owner, run.state, run.spec, points, run.seed)


def records(run: PlannedRun) -> list[dict[str, Any]]:
    """The run's records as the worker prints them (JSON objects without None fields), exactly `run.points`."""
    n = run.points
    if n == 0:
        return []
    rng = random.Random(run.seed)  # noqa: S311
    spec = run.spec
    gpus = int(spec["gpus"])
    out: list[dict[str, Any]] = [
        {
            "v": 1,
            "kind": "start",
            "world_size": gpus,
            "nodes": 1,
            "device": "cpu",
            "backend": "gloo",
            "strategy": spec["strategy"],
            "torch_version": "2.5.1",
            "hostname": f"node{rng.randrange(1, 17):02d}",
            "parameters": 1_000_000 + 1_000 * rng.randrange(1000),
            "precision": "fp32",
        }
    ]
    end = run.final and n >= 2
    middle = n - 1 - (1 if end else 0)
    wanted_epochs = int(spec["epochs"]) if run.state == "completed" else max(int(spec["epochs"]) // 2, 1)
    epochs = min(wanted_epochs, middle)
    steps = middle - epochs
    epoch_time = 40.0 / gpus**0.9 * (1 + rng.random() * 0.1)
    step = 0
    for epoch in range(1, epochs + 1):
        for _ in range(steps // epochs + (1 if epoch <= steps % epochs else 0)):
            step += 1
            loss = 2.3 * math.exp(-0.02 * step) + 0.1 * rng.random()
            out.append({"v": 1, "kind": "step", "epoch": epoch, "step": step, "train_loss": round(loss, 5)})
        loss = 2.3 * math.exp(-0.3 * epoch) + 0.05 * rng.random()
        seconds = round(epoch_time * (1.3 if epoch == 1 else 1.0), 4)
        out.append(
            {
                "v": 1,
                "kind": "epoch",
                "epoch": epoch,
                "train_loss": round(loss, 5),
                "val_loss": round(loss * 1.1, 5),
                "val_accuracy": round(min(0.99, 0.1 + 0.09 * epoch + 0.02 * rng.random()), 5),
                "epoch_time_s": seconds,
                "samples_per_s": round(50_000 / seconds, 2),
                "peak_memory_bytes": (200 + rng.randrange(100)) * 2**20 // gpus,
                "memory_kind": "cpu_max_rss",
            }
        )
    if end:
        status = {"completed": "completed", "failed": "failed", "out_of_memory": "failed"}.get(run.state, "interrupted")
        record: dict[str, Any] = {
            "v": 1,
            "kind": "end",
            "status": status,
            "total_time_s": round(epochs * epoch_time, 3),
        }
        if status == "failed":
            record["error"] = "RuntimeError: CUDA out of memory" if run.state == "out_of_memory" else "NaN loss"
        out.append(record)
    return out
