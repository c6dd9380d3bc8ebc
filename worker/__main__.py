"""`python -m worker train|infer|probe --spec spec.json`: one process of a distributed training or inference run,
or of a fabric probe."""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING

from contract import stacks
from contract.rundir import EXIT_INTERRUPTED
from worker import __version__
from worker.stopping import StopSignal

if TYPE_CHECKING:
    from collections.abc import Callable

    from contract.spec import RunKind, RunSpec
    from worker.memory import Peaks
    from worker.train import Context


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m worker",
        description="scalelab's training worker. Start one process per GPU (srun or torchrun); "
        "rank and world size come from the launcher's environment. Metric records go to stdout as "
        "'[METRIC] {json}' lines, printed by rank 0.",
    )
    parser.add_argument("--version", action="version", version=f"scalelab worker {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    train = commands.add_parser("train", help="train one run described by a spec file", description="Train one run.")
    train.add_argument("--spec", type=Path, required=True, help="the run spec (JSON) that the server wrote")
    infer = commands.add_parser(
        "infer",
        help="generate text for the prompts beside an inference spec",
        description="Generate from a trained gpt's checkpoint for the prompts file (prompts.txt) beside the spec; "
        "rank 0 writes generations.jsonl there.",
    )
    infer.add_argument("--spec", type=Path, required=True, help="the inference run spec (JSON) that the server wrote")
    probe = commands.add_parser(
        "probe",
        help="time the fabric's collectives over the job's processes",
        description="Time all-reduce, all-gather, reduce-scatter, broadcast and point-to-point at doubling message "
        "sizes from 1 KiB, within a node and across nodes, for at most the spec's probe_seconds; rank 0 prints "
        "a fabric record per size and a fabric_fit record per tier.",
    )
    probe.add_argument("--spec", type=Path, required=True, help="the probe run spec (JSON) that the server wrote")
    return parser


def load_spec(path: Path) -> RunSpec:
    from pydantic import ValidationError

    from contract.spec import RunSpec

    try:
        return RunSpec.model_validate_json(path.read_bytes())
    except OSError as exc:
        raise SystemExit(f"worker: cannot read the spec {path}: {exc.strerror}") from None
    except ValidationError as exc:
        raise SystemExit(f"worker: the spec {path} is invalid:\n{exc}") from None


def _load_kind(spec_path: Path, kind: RunKind) -> RunSpec:
    """The spec, refused where it is of the other command's kind."""
    spec = load_spec(spec_path)
    if spec.kind is not kind:
        raise SystemExit(f"worker: the spec {spec_path} is of kind {spec.kind.value}: run it with the other command")
    return spec


def _run_process(spec: RunSpec, spec_path: Path, stop: StopSignal, work: Callable[[Context], int | None]) -> int:
    """One process of the job, whatever its work: join the group, do the work, report how it ended, leave. The work
    returns the epoch that reached the target where it stopped there (stop_at_target): a run completed early."""
    # torch is imported here, not at the top, so that `--help` answers at once.
    import torch.distributed as dist

    from contract.records import EndRecord
    from contract.rundir import CHECKPOINTS_DIR
    from worker.distributed import init_process_group, limit_cpu_threads, pick_device, read_dist_env
    from worker.report import Reporter, error
    from worker.train import Context, Interrupted

    dist_env = read_dist_env()
    reporter = Reporter(dist_env.is_main)
    started = time.perf_counter()
    try:
        device = pick_device(dist_env)
        limit_cpu_threads(dist_env)
        init_process_group(dist_env, device)
        target_epoch = work(
            Context(spec, dist_env, device, reporter, checkpoint_dir=spec_path.parent / CHECKPOINTS_DIR, stop=stop)
        )
        dist.barrier()  # leave together: no rank tears down while another still talks to it
    except Interrupted as exc:
        reporter.progress(f"interrupted: {exc}")
        reporter.record(EndRecord(status="interrupted", total_time_s=time.perf_counter() - started, error=str(exc)))
        dist.destroy_process_group()
        return EXIT_INTERRUPTED
    except Exception as exc:
        error(f"worker rank {dist_env.rank}: {type(exc).__name__}: {exc}\n{traceback.format_exc()}")
        reporter.record(
            EndRecord(status="failed", total_time_s=time.perf_counter() - started, error=f"{type(exc).__name__}: {exc}")
        )
        # No destroy_process_group here: it is collective, and the other ranks may never reach it.
        # srun --kill-on-bad-exit stops them once this rank exits.
        return 1
    dist.destroy_process_group()
    # Completed either way, and exit 0, so that the job ends and Slurm frees the allocation's remaining time.
    reporter.record(
        EndRecord(
            status="completed",
            total_time_s=time.perf_counter() - started,
            stopped_at_target=True if target_epoch is not None else None,
            target_epoch=target_epoch,
        )
    )
    return 0


def train(spec_path: Path, stop: StopSignal) -> int:
    """Train the spec's run in this process of the job."""
    from contract.spec import RunKind

    spec = _load_kind(spec_path, RunKind.train)
    from worker.train import run

    if not spec.fabric_preflight:
        return _run_process(spec, spec_path, stop, run)

    def preflight_then_train(ctx: Context) -> int | None:
        from worker import probe

        probe.run_plan(probe.preflight_plan(), ctx.dist_env, ctx.device, ctx.reporter)
        return run(ctx)

    return _run_process(spec, spec_path, stop, preflight_then_train)


def fabric_probe(spec_path: Path, stop: StopSignal) -> int:
    """Time the fabric's collectives in this process of the probe job."""
    from contract.spec import RunKind

    spec = _load_kind(spec_path, RunKind.probe)
    from worker import probe
    from worker.start import start_record

    def measure(ctx: Context) -> int | None:
        start = start_record(spec, ctx.dist_env, ctx.device, parameters=0)
        ctx.reporter.record(start.model_copy(update={"strategy": RunKind.probe.value, "parameters": None}))
        probe.run_plan(probe.probe_plan(spec.probe_seconds), ctx.dist_env, ctx.device, ctx.reporter)
        return None

    return _run_process(spec, spec_path, stop, measure)


def infer(spec_path: Path, stop: StopSignal) -> int:
    """Generate for the prompts beside the inference spec in this process of the job."""
    from contract.spec import RunKind

    spec = _load_kind(spec_path, RunKind.inference)
    from worker import inference
    from worker.train import report_memory

    def generate(ctx: Context) -> int | None:
        # The memory records are training's, measured once generation is done (epoch 0: there are no epochs).
        def memory() -> Peaks:
            return report_memory(ctx, epoch=0)

        inference.run(spec, spec_path.parent, ctx.dist_env, ctx.device, ctx.reporter, memory)
        return None

    return _run_process(spec, spec_path, stop, generate)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    # Every rank answers the hang watchdog's SIGUSR2 with its stacks in the run directory (beside the spec), from
    # before torch.distributed starts: a rank may hang in its first collective.
    stacks.install(args.spec.parent)
    # The stop signal is caught before anything slow is imported: Slurm may signal the job while torch still loads.
    if args.command == "train":
        return train(args.spec, StopSignal())
    if args.command == "infer":
        return infer(args.spec, StopSignal())
    if args.command == "probe":
        return fabric_probe(args.spec, StopSignal())
    return 2


if __name__ == "__main__":
    status = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter finalization: gloo's worker threads can still hold tensors then, and freeing
    # them while Python shuts down aborted ("terminate called without an active exception") about
    # one 2- or 4-process run in four here, after the run had finished and reported.
    os._exit(status)
