"""The device check: what one accelerator gives scalelab's worker, in one table, within about 8 minutes.

For the device it runs on (a GPU, or the CPU with --device cpu):
- the compute probe's measured matmul peak at fp32, bf16 and fp16 against the datasheet's dense peak
  (contract.peaks) for that GPU;
- every model (mlp, cnn, resnet18, gpt) trained by the worker's own loop (worker.train.run, in this process, one
  rank, strategy single) at fp32, bf16, fp16 (GradScaler; a GPU only) and compiled, a few steps each: samples/s of
  the timed epoch, MFU against the measured and the datasheet peak (contract.flops), and the preview's memory
  estimate (server/services/estimate.py) against the peak the epoch measured (torch.cuda.max_memory_allocated on a
  GPU; the tensors held, on a CPU);
- inference tokens/s (worker/inference.py) from a gpt the check trains on text first;
- the worker against the course-style loop (benches/course_baseline.py) on the CIFAR CNN, through torchrun, as
  benches.throughput runs them (one process each side here).

`--device cpu --quick` is the smoke test CI runs (tests/benches/test_device_check.py): mlp and gpt only, fp32 and
bf16, no compile and no course baseline, each row marked as skipped so, well under a minute. Every case is
independent: one that fails prints FAILED with its reason and the rest go on; the exit status is 1 then.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contract import flops, peaks
from contract.records import ComputeRecord, EpochRecord, InferenceRecord, WorkerRecord
from contract.rundir import CHECKPOINTS_DIR, PROMPTS_FILE, SPEC_FILE
from contract.spec import Precision, RunSpec
from server.services.estimate import estimate_memory

BUDGET_S = 450.0  # the whole check: 7.5 minutes, leaving room for start-up under the 8 the issue allows
MODELS = ("mlp", "cnn", "resnet18", "gpt")
QUICK_MODELS = ("mlp", "gpt")
VARIANTS = ("fp32", "bf16", "fp16", "compile")
# --quick's gpt: small enough that two CPU cores train, evaluate and generate with it in seconds.
QUICK_GPT = {"depth": 1, "width": 32, "heads": 2, "context": 32}
HEADER = ["case", "samples/s", "MFU measured", "MFU datasheet", "memory measured", "estimate", "est/meas", "note"]


@dataclass
class Row:
    case: str
    cells: list[str] = field(default_factory=lambda: ["-"] * (len(HEADER) - 2))
    note: str = ""

    def line(self) -> list[str]:
        return [self.case, *self.cells, self.note]


class Capture:
    """A Reporter that keeps the records instead of printing them (the worker's loop reports through it)."""

    def __init__(self) -> None:
        self.is_main = True
        self.records: list[WorkerRecord] = []

    def record(self, record: WorkerRecord) -> None:
        self.records.append(record)

    def progress(self, message: str) -> None:
        pass


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="benches/device_check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default=None, help="default: cuda where there is one")
    parser.add_argument("--quick", action="store_true", help="the CI smoke test's cases only (see above)")
    parser.add_argument("--steps", type=int, default=None, help="optimizer steps per epoch (default 20; quick 3)")
    parser.add_argument("--batch", type=int, default=None, help="global batch (default 128 on a GPU, 16 on CPU)")
    parser.add_argument("--budget", type=float, default=BUDGET_S, help=f"seconds in all (default {BUDGET_S:.0f})")
    parser.add_argument("--tmp", type=Path, help="where runs write their checkpoints (default: a new directory)")
    return parser


def _percent(share: float | None) -> str:
    """A utilisation as a percentage with two significant digits: a tiny model on a CPU is well under 0.1 %, and
    one decimal would print it as 0.0 %."""
    if share is None or share <= 0:
        return "-"
    percent = share * 100
    decimals = max(1, 1 - math.floor(math.log10(percent)))
    return f"{percent:.{decimals}f}%"


def _mib(n_bytes: float | None) -> str:
    return "-" if n_bytes is None else f"{n_bytes / 2**20:,.1f} MiB"


def _figure(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}g}"


class Check:
    def __init__(self, args: argparse.Namespace, tmp: Path) -> None:
        import torch

        from worker.distributed import DistEnv, init_process_group

        self.torch = torch
        name = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
        if name == "cuda" and not torch.cuda.is_available():
            raise SystemExit("benches/device_check: --device cuda, but torch sees no GPU")
        self.device = torch.device(name, 0) if name == "cuda" else torch.device("cpu")
        self.quick = args.quick
        self.steps = args.steps or (3 if args.quick else 20)
        self.batch = args.batch or (128 if name == "cuda" else 16)
        self.deadline = time.monotonic() + float(args.budget)
        self.tmp = tmp
        self.rows: list[Row] = []
        self.failed = 0
        self.dist_env = DistEnv(rank=0, world_size=1, local_rank=0, local_world_size=1, nodes=1)
        init_process_group(self.dist_env, self.device)
        self.gpu = torch.cuda.get_device_name(self.device) if name == "cuda" else None
        self.datasheet = peaks.datasheet_peak(self.gpu)

    def out_of_time(self) -> bool:
        return time.monotonic() > self.deadline

    def skip(self, case: str, why: str) -> None:
        self.rows.append(Row(case, note=f"skipped: {why}"))

    def fail(self, case: str, exc: BaseException) -> None:
        self.failed += 1
        self.rows.append(Row(case, note=f"FAILED: {type(exc).__name__}: {str(exc)[:160]}"))

    # ---- the matmul peak ---------------------------------------------------------------------------------------

    def peaks(self) -> None:
        from worker import compute_probe

        for precision in Precision:
            case = f"matmul peak {precision.value}"
            if precision is Precision.fp16 and self.device.type != "cuda":
                self.skip(case, "fp16 runs on a GPU only")
                continue
            probe = compute_probe.measure(self.device, precision)
            sheet = self.datasheet.tflops(precision) if self.datasheet else None
            row = Row(case)
            row.cells[0] = f"{probe.best_tflops:.4g} TFLOP/s"
            row.cells[1] = f"{probe.best_tflops / sheet:.1%} of datasheet" if sheet else "-"
            sizes = ", ".join(f"{n}: {rate:.3g}" for n, rate in zip(probe.sizes, probe.size_tflops, strict=True))
            gpu = self.datasheet.gpu if self.datasheet else ""
            where = f"datasheet {sheet:.4g} TFLOP/s ({gpu})" if sheet else "no datasheet"
            row.note = f"{where}; by size {sizes}"
            self.rows.append(row)

    # ---- training, every model and variant -------------------------------------------------------------------

    def train(self, fields: dict[str, Any], run_dir: Path) -> list[WorkerRecord]:
        """One run of the worker's own loop in this process; its records."""
        from worker import train
        from worker.stopping import StopSignal

        spec = RunSpec.model_validate({"strategy": "single", "gpus": 1, "seed": 0, **fields})
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / SPEC_FILE).write_text(spec.model_dump_json())
        if self.device.type == "cuda":
            self.torch.cuda.reset_peak_memory_stats(self.device)
        capture = Capture()
        ctx = train.Context(spec, self.dist_env, self.device, capture, run_dir / CHECKPOINTS_DIR, StopSignal())  # type: ignore[arg-type]
        train.run(ctx)
        return capture.records

    def model(self, model: str, variant: str) -> None:
        case = f"{model} {variant}"
        precision = "fp32" if variant == "compile" else variant
        fields: dict[str, Any] = {
            "model": model,
            "dataset": "synthetic",
            "precision": precision,
            "compile": variant == "compile",
            "epochs": 2,
            "steps_per_epoch": self.steps,
            "global_batch_size": self.batch,
            "checkpoint_every": 0,
            **(QUICK_GPT if self.quick and model == "gpt" else {}),
        }
        records = self.train(fields, self.tmp / case.replace(" ", "-"))
        epochs = [record for record in records if isinstance(record, EpochRecord)]
        probe = next(record for record in records if isinstance(record, ComputeRecord))
        timed = epochs[-1]  # the first epoch is warm-up (and compilation)
        spec = RunSpec.model_validate({"strategy": "single", "gpus": 1, **fields})
        per_sample = flops.training_flops(spec).model
        sheet = self.datasheet.tflops(Precision(precision)) if self.datasheet else None
        estimate = estimate_memory(spec).total_bytes
        measured = timed.peak_memory_bytes
        row = Row(case)
        samples = timed.samples_per_s or 0.0
        row.cells = [
            f"{samples:,.0f}",
            _percent(flops.utilization(samples, per_sample, probe.measured_tflops, 1)),
            _percent(flops.utilization(samples, per_sample, sheet, 1)) if sheet else "-",
            _mib(measured),
            _mib(estimate),
            f"{estimate / measured:.2f}" if measured else "-",
        ]
        row.note = (
            f"{per_sample:.3g} FLOPs/sample; memory: {timed.memory_kind}; peak {probe.measured_tflops:.3g} TFLOP/s"
        )
        self.rows.append(row)

    # ---- inference --------------------------------------------------------------------------------------------

    def inference(self) -> None:
        from worker import inference
        from worker.train import Context, report_memory

        trained = self.tmp / "inference-train"
        fields = {"model": "gpt", "dataset": "text", "epochs": 1, "steps_per_epoch": self.steps}
        fields |= QUICK_GPT if self.quick else {}
        self.train({**fields, "global_batch_size": self.batch, "checkpoint_every": 1}, trained)
        run_dir = self.tmp / "inference"
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / PROMPTS_FILE).write_text("def main(\nimport os\nclass Parser:\nfor line in \n")
        spec = RunSpec.model_validate(
            {"kind": "inference", "model": "gpt", "strategy": "single", "gpus": 1, "checkpoint": str(trained),
             "max_new_tokens": 16, "global_batch_size": 4, "dataset": "text"}
        )  # fmt: skip
        capture = Capture()
        from worker.stopping import StopSignal

        ctx = Context(spec, self.dist_env, self.device, capture, run_dir / CHECKPOINTS_DIR, StopSignal())  # type: ignore[arg-type]
        inference.run(spec, run_dir, self.dist_env, self.device, capture, lambda: report_memory(ctx, epoch=0))  # type: ignore[arg-type]
        done = next(record for record in capture.records if isinstance(record, InferenceRecord))
        row = Row("gpt inference")
        row.cells[0] = f"{done.tokens_per_s:,.0f} tokens/s"
        row.cells[3] = _mib(done.peak_memory_bytes)
        row.note = (
            f"{done.requests} prompts x {spec.max_new_tokens} tokens, batch {done.batch_size}; p50 step "
            f"{done.latency_p50_s * 1000:.2f} ms; memory: {done.memory_kind}"
        )
        self.rows.append(row)

    # ---- the worker against the course-style loop -----------------------------------------------------------

    def course(self) -> None:
        from benches import cifar_archive
        from benches.common import timed_throughput
        from benches.throughput import Side, _run_side

        data = self.tmp / "cifar10"
        cifar_archive.write(data, 512, 512)
        args = argparse.Namespace(processes=1, epochs=2, global_batch_size=256, lr=0.02)
        rates = {}
        for side in (Side("worker"), Side("course loop", loader_workers=2)):
            launch = _run_side(side, args, data, self.tmp / f"course-{side.name.replace(' ', '-')}")
            rates[side.name] = timed_throughput(launch.epochs())
        row = Row("cnn worker vs course loop")
        row.cells[0] = f"{rates['worker']:,.0f} vs {rates['course loop']:,.0f}"
        ratio = rates["worker"] / rates["course loop"]
        row.note = f"worker / course = {ratio:.2f}x (cifar10 cnn, 1 process each, torchrun)"
        self.rows.append(row)

    def run(self) -> None:
        self.guard("matmul peaks", self.peaks)
        models = QUICK_MODELS if self.quick else MODELS
        for model in MODELS:
            for variant in VARIANTS:
                case = f"{model} {variant}"
                if model not in models or (self.quick and variant == "compile"):
                    self.skip(case, "not in --quick")
                elif variant == "fp16" and self.device.type != "cuda":
                    self.skip(case, "fp16 (GradScaler) runs on a GPU only")
                else:
                    self.guard(case, lambda model=model, variant=variant: self.model(model, variant))
        self.guard("gpt inference", self.inference)
        if self.quick:
            self.skip("cnn worker vs course loop", "not in --quick")
        else:
            self.guard("cnn worker vs course loop", self.course)

    def guard(self, case: str, work: Any) -> None:
        if self.out_of_time():
            self.skip(case, "past the time budget (--budget)")
            return
        try:
            work()
        except Exception as exc:  # one case's failure is that case's row; the others still run
            self.fail(case, exc)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="scalelab-device-check-") as made:
        tmp = args.tmp or Path(made)
        check = Check(args, tmp)
        import torch

        print(f"== Device check: {check.gpu or 'CPU'} ({check.device}), torch {torch.__version__} ==")
        print(
            f"{check.steps} steps per epoch, 2 epochs (the second timed), global batch {check.batch}, strategy single; "
            f"{torch.get_num_threads()} CPU threads; datasheet: "
            + (f"{check.datasheet.gpu}: {check.datasheet.source}" if check.datasheet else "none for this device")
        )
        check.run()
        from benches.common import table

        print(table(HEADER, [row.line() for row in check.rows]))
        print(f"device check: {len(check.rows)} rows, {check.failed} failed, {time.perf_counter() - started:.0f} s")
        import torch.distributed as dist

        dist.destroy_process_group()
    return 1 if check.failed else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
