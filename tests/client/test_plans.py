"""scalelab plan against the app in-process: a plan made from a file, its runs' wait named, then its answer (every
point, the GPU-hours, the recommendation) and the experiment it recommends; and its usage errors."""

from __future__ import annotations

import json

from client import cli
from tests.client.helpers import scalelab
from tests.factories import experiment_request
from tests.server.api.test_plans import FAST, finish_plan, planner  # noqa: F401  (the fixture)


def test_plan_waits_then_answers_and_runs_what_it_recommends(planner, session, capsys, tmp_path):  # noqa: F811
    path = tmp_path / "experiment.json"
    path.write_text(json.dumps(experiment_request(grid={"strategy": ["ddp"], "gpus": [1, 2, 4]})))

    goal = ("--goal", "largest_n_at_efficiency", "--efficiency", "0.5")
    code, out, _ = scalelab(planner, capsys, "plan", str(path), *goal)

    assert code == cli.EXIT_OK, out
    first, waiting = out.splitlines()[:2]
    plan_id = first.split()[1]
    assert first.endswith(": running") and "waiting for 3 run(s)" in waiting
    finish_plan(session, planner.get(f"/api/plans/{plan_id}").json(), FAST)

    code, out, _ = scalelab(planner, capsys, "plan", "--show", plan_id, "--run")

    assert code == cli.EXIT_OK, out
    lines = out.splitlines()
    assert lines[0].endswith(": ready") and lines[1].split()[:3] == ["STRATEGY", "GPUS", "NODES"]
    assert [line.split()[:2] for line in lines[2:5]] == [["ddp", "1"], ["ddp", "2"], ["ddp", "4"]]
    assert "the whole grid:" in out and "GPU-hours" in out
    assert "recommended (largest_n_at_efficiency): the most GPUs" in out and "ddp on 4 GPU(s)" in out
    assert lines[-1].startswith("submitted experiment ") and lines[-1].endswith(": 1 run(s)")


def test_plan_needs_a_file_or_a_plan_and_names_a_refused_option(planner, capsys, tmp_path):  # noqa: F811
    path = tmp_path / "experiment.json"
    path.write_text(json.dumps(experiment_request()))

    code, _, err = scalelab(planner, capsys, "plan")
    assert code == cli.EXIT_USAGE and "--show" in err
    code, _, err = scalelab(planner, capsys, "plan", str(path), "--efficiency", "1.5")
    assert code != cli.EXIT_OK and "efficiency" in err
    code, _, err = scalelab(planner, capsys, "plan", "--show", "nosuchplan")
    assert code == cli.EXIT_NOT_FOUND
