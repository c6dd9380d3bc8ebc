"""The step model against measured: the README's example (mlp, width 2048) and the CNN, data parallel over 1, 2 and
4 processes, each multi-process step predicted from the 1-process run and a fabric fit, and each error printed.

The fit comes from a small all-reduce probe run here (gloo, 2 and 4 processes, 4 KiB to 16 MiB, timed with
barriers, fitted by contract.fabric.fit_alpha_beta): a stand-in for the fabric probe's run kind, which stores its fits
per partition and shape. The prediction is made as the server makes it (server.services.prediction.predict_step),
with no overlap measured yet (communication counted as fully exposed), from a 1-process run alone.

Tolerance: the off_model default, 50 %. On this machine the figures are worse than on a cluster node, for three
reasons the table shows: 2 cores shared with whatever else runs; 4 processes oversubscribe them (each rank's compute
no longer shrinks with its batch: it waits for a core); and, unless every process runs one thread (the default here,
--threads-as-allocated to leave it to the worker), the 1-process run takes both cores with two threads while each
rank of two takes one: on a busy machine its threads contend, its step was 5-12x slower per sample than a rank's, and
every prediction scaled from it far too slow (the model scales compute by samples, not by threads).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from benches.common import BenchError, load_average, table, work_dir, worker_run
from contract.fabric import Collective, Sample, Tier, fit_alpha_beta
from contract.spec import RunSpec
from server.services.prediction import MeasuredStep, Reference, StepPrediction, predict_step

CASES: dict[str, dict[str, Any]] = {
    # examples/experiment.json, shorter: 2 epochs of 10 steps (the first epoch is warm-up).
    "readme-mlp": {"model": "mlp", "dataset": "synthetic", "width": 2048, "global_batch_size": 256, "lr": 0.05},
    "cnn": {"model": "cnn", "dataset": "synthetic", "global_batch_size": 64, "lr": 0.05},
}
SHORT = {"strategy": "ddp", "epochs": 3, "steps_per_epoch": 10}
TOLERANCE = 0.5

_PROBE = """
import json, sys, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
out = []
for size in [2**k for k in range(12, 25, 2)]:
    t = torch.zeros(size // 4)
    for _ in range(2):
        dist.all_reduce(t)
    dist.barrier()
    times = []
    for _ in range(5):
        start = time.perf_counter(); dist.all_reduce(t); times.append(time.perf_counter() - start)
    out.append([size, sorted(times)[2]])
if dist.get_rank() == 0:
    print("PROBE " + json.dumps(out))
"""


def probe(tmp: Path, processes: list[int]) -> list[Sample]:
    script = tmp / "probe.py"
    script.write_text(_PROBE)
    samples: list[Sample] = []
    for n in processes:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={n}", str(script)]
        result = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
        line = next((x for x in result.stdout.splitlines() if x.startswith("PROBE ")), None)
        if line is None:
            raise BenchError(f"the all-reduce probe on {n} processes failed: {result.stderr[-2000:]}")
        samples += [Sample(Collective.all_reduce, n, size, seconds) for size, seconds in json.loads(line[6:])]
    return samples


def measured(spec: dict[str, Any], tmp: Path, label: str, env: dict[str, str]) -> MeasuredStep:
    launch = worker_run(spec, tmp / label, label=label, env=env)
    timed = [e for e in launch.epochs()[1:] if e.time_breakdown]
    if not timed:
        raise BenchError(f"{label}: no timed epoch with a time breakdown")
    parts = {
        part: statistics.median(e.time_breakdown[part] for e in timed if e.time_breakdown)
        for part in timed[0].time_breakdown or {}
    }
    return MeasuredStep(parts["data"], parts["compute"], parts["optimizer"], parts.get("comm", 0.0))


def _measured_parts(step: MeasuredStep) -> list[str]:
    """The measured step's compute (with data and optimizer) and communication, ms."""
    return [f"{(step.data_s + step.compute_s + step.optimizer_s) * 1e3:.1f}", f"{step.comm_s * 1e3:.1f}"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benches.prediction", description=__doc__)
    parser.add_argument("--processes", type=int, nargs="+", default=[2, 4], help="process counts to predict")
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    parser.add_argument(
        "--threads-as-allocated",
        action="store_true",
        help="let the worker size each process's threads (the 1-process run then takes every core); default: one "
        "thread per process in every run, so that the 1-process run computes as one rank does",
    )
    parser.add_argument("--tmp", type=Path, help="where to put the run directories (default: a new one)")
    args = parser.parse_args(argv)
    # The worker sizes its threads by the CPUs Slurm gives each task (worker/distributed.py): one each, here.
    env = {} if args.threads_as_allocated else {"SLURM_CPUS_PER_TASK": "1"}
    with work_dir(args.tmp) as tmp:
        fit = fit_alpha_beta(probe(tmp, args.processes))
        fits = {Tier.intra_node: fit}
        threads = "threads as the worker sizes them" if args.threads_as_allocated else "one thread per process"
        print(
            f"{threads}; fabric fit (gloo all-reduce, {args.processes} processes): alpha {fit.alpha_s * 1e6:.0f} us, "
            f"beta {fit.beta_bytes_per_s / 1e9:.2f} GB/s; load {load_average()}"
        )
        rows = []
        worst = 0.0
        for name in args.cases:
            base = {**CASES[name], **SHORT}
            reference = Reference(
                RunSpec.model_validate({**base, "gpus": 1}), measured({**base, "gpus": 1}, tmp, f"{name}-1", env)
            )
            one = reference.step
            rows.append([name, "1", "", "", "", f"{one.step_s * 1e3:.1f}", *_measured_parts(one), ""])
            for n in args.processes:
                spec = RunSpec.model_validate({**base, "gpus": n})
                predicted = predict_step(reference, spec, fits)
                if not isinstance(predicted, StepPrediction):
                    raise BenchError(predicted.reason)
                step = measured({**base, "gpus": n}, tmp, f"{name}-{n}", env)
                error = (step.step_s - predicted.step_s) / predicted.step_s
                worst = max(worst, abs(error))
                rows.append(
                    [
                        name,
                        str(n),
                        f"{predicted.step_s * 1e3:.1f}",
                        f"{predicted.compute_s * 1e3:.1f}",
                        f"{predicted.comm_s * 1e3:.1f}",
                        f"{step.step_s * 1e3:.1f}",
                        *_measured_parts(step),
                        f"{error:+.0%}",
                    ]
                )
        header = ["case", "processes", "predicted ms", "compute", "comm", "measured ms", "compute", "comm", "error"]
        print(table(header, rows))
        print(
            f"largest error {worst:.0%} against the tolerance {TOLERANCE:.0%}: "
            f"{'within' if worst <= TOLERANCE else 'beyond'} it on this machine ({load_average()})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
