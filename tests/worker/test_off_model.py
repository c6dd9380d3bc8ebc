"""off_model against real runs: a 2-process ddp run predicted from a real 1-process run is flagged when a test-only
delay holds back its gradient all-reduces, and not otherwise, and the flag names communication.

Real worker runs on CPU with gloo, the prediction's own arithmetic and flag condition (server.services.prediction,
server.services.flags). No fabric probe here: the fit is stated (1 ms latency, 100 MB/s, slower than gloo on one
machine usually is, so that the silent half errs toward silence). The tolerance is 3 (a point 4x slower than
predicted is flagged), not the setting's 0.5: two shared cores make a run's compute and gloo's latency swing, and
the delayed run (0.3 s per all-reduce against a step of milliseconds) is slower than predicted by far more than that.
No time is asserted, only whether the flag is raised and what it names.
"""

from __future__ import annotations

from typing import Any

import pytest

from contract.fabric import AlphaBeta, Tier
from contract.records import EpochRecord
from server.models import FlagCode
from server.services import flags
from server.services.prediction import MeasuredStep, Reference, StepPrediction, predict_step, residual
from tests.factories import spec
from tests.worker.launch import WorkerRun, run_worker
from worker.parallel.ddp import TEST_ONLY_COMM_DELAY

pytestmark = pytest.mark.torch

FIELDS: dict[str, Any] = {"model": "mlp", "epochs": 2, "steps_per_epoch": 12, "global_batch_size": 256}
FIT = {Tier.intra_node: AlphaBeta(1e-3, 1e8)}
# One thread per process in every run, the 1-process one too: left to itself it takes both cores, and on two shared
# cores its threads contend so that its step was 30x the 2-process run's compute (the prediction scales the
# reference's compute by samples per rank, not by threads).
ONE_THREAD = {"SLURM_CPUS_PER_TASK": "1"}
TOLERANCE = 3.0


def measured(run: WorkerRun) -> tuple[float, MeasuredStep]:
    assert run.returncode == 0, run.stderr[-3000:]
    last: EpochRecord = run.of_kind("epoch")[-1]
    assert last.step_time_s is not None and last.time_breakdown is not None
    parts = last.time_breakdown
    return last.step_time_s, MeasuredStep(parts["data"], parts["compute"], parts["optimizer"], parts["comm"])


@pytest.fixture(scope="module")
def prediction(tmp_path_factory) -> StepPrediction:
    one = run_worker(tmp_path_factory.mktemp("one"), 1, strategy="ddp", env=ONE_THREAD, **FIELDS)
    _, step = measured(one)
    run_spec = spec(strategy="ddp", gpus=2, **FIELDS)
    reference = Reference(spec(strategy="ddp", gpus=1, **FIELDS), step)
    predicted = predict_step(reference, run_spec, FIT)
    assert isinstance(predicted, StepPrediction)
    return predicted


def off_model(tmp_path, prediction: StepPrediction, env: dict[str, str]):
    step_s, parts = measured(run_worker(tmp_path, 2, strategy="ddp", env={**ONE_THREAD, **env}, **FIELDS))
    off = residual(prediction, parts)
    return flags.check_off_model(2, step_s, prediction.step_s, off.compute_excess_s, off.comm_excess_s, TOLERANCE)


def test_delayed_communication_is_off_model_and_named(tmp_path, prediction):
    flag = off_model(tmp_path, prediction, {TEST_ONLY_COMM_DELAY: "0.3"})
    assert flag is not None and flag.code is FlagCode.off_model
    assert "communication does not add up" in flag.message


def test_without_the_delay_it_stays_silent(tmp_path, prediction):
    assert off_model(tmp_path, prediction, {}) is None
