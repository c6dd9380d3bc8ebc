"""The regression test end to end on the real two-node Slurm: one tiny spec (an mlp, synthetic data, 3 epochs of 16
steps, 3 repeats) submitted three times at once, twice as it is (an A/A pair) and once through a second server
process on the same database whose environment sets the worker's test-only step delay
(contract.rundir.TEST_ONLY_STEP_DELAY_VAR), as a slower cluster would slow an unchanged spec. Pinned, the A/A twin is
indistinguishable from the reference and the delayed experiment is flagged regressed; marked A/A, the twin then sets
the profile's floor. The figures are printed for the closing note, never asserted beyond the verdicts."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from contract.rundir import TEST_ONLY_STEP_DELAY_VAR
from tests.e2e.conftest import slurm2_server_in
from tests.e2e.runs import output_of, wait_until_ended
from tests.e2e.test_lifecycle import submit

pytestmark = [pytest.mark.slurm, pytest.mark.torch]

# 16 steps an epoch: half a second a step adds 8 s to each, several times the tiny mlp's own epoch on a CPU even on
# a machine loaded enough to make a step take 0.2 s.
DELAY_S = "0.5"
STEPS = 16
REQUEST: dict[str, Any] = {
    "base": {"model": "mlp", "dataset": "synthetic", "strategy": "ddp", "epochs": 3, "global_batch_size": 64,
             "steps_per_epoch": STEPS},
    "grid": {"gpus": [1]},
    "repeats": 3,
    "resources": {"nodes": 1, "time_limit": "00:05:00"},
}  # fmt: skip


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("regression")


@pytest.fixture(scope="module")
def experiments(slurm2_env: dict[str, str], work: Path) -> Iterator[tuple[str, dict[str, dict[str, Any]]]]:
    """(the server's URL, the three experiments by role) once every run has ended and been read."""
    with (
        slurm2_server_in(work, slurm2_env) as server,
        # The same database and runs: only its sbatch's environment differs, and only the first follows the runs.
        slurm2_server_in(
            work, slurm2_env, SCALELAB_MONITOR_IN_WEB="false", **{TEST_ONLY_STEP_DELAY_VAR: DELAY_S}
        ) as slowed,
    ):
        submitted = {
            "reference": submit(server, {**REQUEST, "name": "canary"}),
            "twin": submit(server, {**REQUEST, "name": "canary again"}),
            "delayed": submit(slowed, {**REQUEST, "name": "canary on a slower cluster"}),
        }
        for experiment in submitted.values():
            for run in experiment["runs"]:
                ended = wait_until_ended(server, run["id"], work / "server.log", timeout_s=900)
                assert ended["state"] == "completed", output_of(server, run["id"])
        yield server, submitted


def regression(server: str, experiment_id: str) -> dict[str, Any]:
    response = httpx.get(f"{server}/api/experiments/{experiment_id}/regression", timeout=60)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def shown(body: dict[str, Any]) -> str:
    point = body["points"][0]
    return (
        f"{body['verdict']}: ratio {point['ratio']:.3f} [{point['ci_low']:.3f}, {point['ci_high']:.3f}], "
        f"{point['reference_mean_s']:.3f} s -> {point['later_mean_s']:.3f} s (n {point['reference_n']}/"
        f"{point['later_n']}), floor {body['floor']['floor']:.3f} ({body['floor']['source']})"
    )


def test_an_aa_pair_is_indistinguishable_and_a_delayed_run_regressed(experiments):
    server, submitted = experiments
    reference, twin, delayed = (submitted[role]["id"] for role in ("reference", "twin", "delayed"))
    pinned = httpx.put(f"{server}/api/experiments/{reference}/reference", timeout=30)
    assert pinned.status_code == 200, pinned.text
    assert pinned.json()["profile"] == "twonode"

    aa = regression(server, twin)
    print("A/A, default floor:", shown(aa))  # noqa: T201 - the verdicts, for the closing note
    assert aa["verdict"] == "indistinguishable", aa
    assert (aa["points"][0]["reference_n"], aa["points"][0]["later_n"]) == (3, 3)

    slow = regression(server, delayed)
    print("delayed, default floor:", shown(slow))  # noqa: T201 - the verdicts, for the closing note
    assert slow["verdict"] == "regressed", slow
    assert [flag["code"] for flag in slow["points"][0]["flags"]] == ["regressed"]

    # The twin marked A/A: the floor is learned from it, and the delay still stands out.
    assert httpx.put(f"{server}/api/experiments/{twin}/aa", timeout=30).status_code == 200
    learned = regression(server, delayed)
    print("delayed, learned floor:", shown(learned))  # noqa: T201 - the verdicts, for the closing note
    assert learned["floor"]["source"] == "aa_pairs" and learned["verdict"] == "regressed"

    history = httpx.get(f"{server}/api/references/{reference}/history", timeout=60).json()
    assert [(entry["experiment_id"], entry["role"]) for entry in history["entries"]] == [
        (reference, "reference"),
        (twin, "aa"),
        (delayed, "later"),
    ]
    assert history["entries"][2]["verdict"] == "regressed"
