"""Time to accuracy in a real browser: the dashboard's charts of time to target (points, intervals, the runs that did
not reach counted), effective beside throughput speed-up and epochs against the global batch, drawn from a scaling
answer with time_to_target and absent without a target; the form sends a target and shows the server's 422 at it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, Route, expect

from contract.target import Target
from server.models import Flag, FlagCode, TargetPoint, TimeToTarget
from tests.browser.conftest import accessibility_violations, charts_final, screenshot
from tests.browser.test_charts_in_browser import imported
from tests.browser.test_trust_in_browser import by_name, chart
from tests.factories import course_log

pytestmark = [pytest.mark.browser, pytest.mark.slurm]

TIMES = {1: (40.0, 40.4, 39.8), 2: (21.0, 21.2, 20.8), 4: (11.0, 11.1, 10.9)}
TARGET = Target(metric="val_accuracy", at_least=0.7)
SUMMARY = "4 GPUs reach val_accuracy >= 0.7 1.7 times as fast as 1, not the 3.6 their throughput promises."
FROM = "the training time of each epoch from the first, start-up and evaluation left out"
SLOWER = Flag(code=FlagCode.slower_convergence, severity="warning", message="4 GPUs need 2 more epochs to the target")


@pytest.fixture(scope="module")
def experiment(server: str) -> str:
    """One DDP series on 1, 2 and 4 GPUs, three repeats each, read through the server's own import of course logs."""
    logs = {
        f"run_{gpus}gpu_{repeat}.out": course_log(gpus, epochs=4, epoch_time_s=seconds * gpus)
        for gpus, times in TIMES.items()
        for repeat, seconds in enumerate(times)
    }
    return imported(server, "time to accuracy", logs)


def scored(point: dict[str, Any]) -> TargetPoint:
    """The time-to-target score of a real scaling point: at 4 GPUs one of its three runs never reached the target."""
    gpus, runs = point["gpus"], point["run_ids"]
    missed = 1 if gpus == 4 else 0
    time = {1: 60.0, 2: 40.0, 4: 36.0}[gpus]
    epochs = {1: 3.0, 2: 3.5, 4: 5.0}[gpus]
    return TargetPoint(
        gpus=gpus,
        global_batch_size=64 * gpus,
        runs=len(runs),
        reached=len(runs) - missed,
        not_reached=missed,
        scoring="mean",
        time_to_target_s=time,
        ci_low_s=time * 0.9,
        ci_high_s=time * 1.1,
        n=len(runs) - missed,
        epochs_to_target=epochs,
        epochs_ci_low=epochs - 0.5,
        epochs_ci_high=epochs + 0.5,
        effective_speedup=60.0 / time,
        effective_speedup_ci_low=60.0 / time * 0.85,
        effective_speedup_ci_high=60.0 / time * 1.15,
        throughput_speedup=point["speedup"],
        statistical_efficiency=3.0 / epochs,
        flags=[SLOWER] if gpus == 4 else [],
        run_ids=runs,
    )


def with_target(page: Page, score: Callable[[dict[str, Any]], TargetPoint] = scored) -> None:
    """The real answers of the compare and scaling endpoints, with the time to target the server would add for an
    experiment with a target: every point scored from the real points and runs, checked against the API's models."""

    def scaling(route: Route) -> None:
        response = route.fetch()
        answer = response.json()
        for series in answer["series"]:
            points = [score(point) for point in series["points"]]
            ttt = TimeToTarget(target=TARGET, measured_from=FROM, baseline_gpus=1, points=points, summary=SUMMARY)
            series["time_to_target"] = ttt.model_dump(mode="json")
        route.fulfill(response=response, json=answer)

    def compare(route: Route) -> None:
        response = route.fetch()
        answer = response.json()
        missed = next(row["run_id"] for row in answer["data"] if row["gpus"] == 4)  # one run of 4 GPUs never reached
        for row in answer["data"]:
            reached = row["run_id"] != missed
            row |= {
                "target_reached": reached,
                "epochs_to_target": 3 if reached else None,
                "time_to_target_s": 45.5 if reached else None,
                "stopped_at_target": reached and row["gpus"] == 2,
                "effective_speedup": 60.0 / {1: 60.0, 2: 40.0, 4: 36.0}[row["gpus"]],
            }
        route.fulfill(response=response, json=answer)

    page.route("**/api/scaling?*", scaling)
    page.route("**/api/compare?*", compare)


def open_dashboard(page: Page, server: str, experiment: str) -> None:
    page.goto(f"{server}/experiments/{experiment}")
    charts_final(page)


def test_the_time_to_accuracy_charts_draw_the_scored_points(page: Page, server: str, experiment: str):
    with_target(page)
    open_dashboard(page, server, experiment)
    section = page.locator("#time-to-target")
    expect(section).to_be_visible()
    expect(page.locator("#target-words")).to_have_text("val_accuracy ≥ 0.7")
    expect(section.locator(".target-summary .summary")).to_have_text(SUMMARY)
    expect(section.locator(".target-summary .measured-from")).to_have_text(f"Time to target: {FROM}.")

    # Time to target against GPUs: each point's score, its interval, and the run that did not reach beside it.
    (times,) = chart(page, "time-to-target")
    assert times["x"] == [1, 2, 4] and times["y"] == [60, 40, 36], times
    assert times["error_y"]["array"] == pytest.approx([6, 4, 3.6]), times["error_y"]
    assert times["text"] == ["", "", "1 of 3 not reached"]
    assert times["marker"]["symbol"] == ["circle", "circle", "circle-open"]  # the flagged point stands out
    expect(page.locator("#chart-time-to-target")).to_contain_text("1 of 3 not reached")
    expect(page.locator("#chart-time-to-target")).to_contain_text("time to target (s of training)")

    # Effective and throughput speed-up on one chart, with the ideal.
    speedups = by_name(chart(page, "effective-speedup"))
    assert set(speedups) == {"ddp: effective (time to target)", "ddp: throughput (time per epoch)", "ddp: ideal"}
    effective = speedups["ddp: effective (time to target)"]
    assert effective["y"] == pytest.approx([1, 1.5, 60 / 36]) and effective["error_y"]["visible"], effective
    assert speedups["ddp: throughput (time per epoch)"]["y"][-1] > 3  # what the real epoch times give
    assert speedups["ddp: ideal"]["y"] == [1, 2, 4]

    # Epochs to target against the global batch.
    (epochs,) = chart(page, "epochs-to-target")
    assert epochs["x"] == [64, 128, 256] and epochs["y"] == [3, 3.5, 5], epochs
    expect(page.locator("#chart-epochs-to-target")).to_contain_text("global batch (samples per optimizer step)")

    # The points' flag in the list above the charts, with the point it concerns.
    flag = page.locator("#flag-list li[data-code='slower_convergence']")
    expect(flag).to_have_count(1)
    expect(flag.locator(".concerns")).to_contain_text("ddp at 4 GPUs")

    # The table's target columns: reached, stopped there, and the run that did not reach.
    expect(page.locator("#compare-table thead th.target-col")).to_have_count(4)
    expect(page.locator("#compare-table thead th.target-col").first).to_be_visible()
    expect(page.locator("#compare-table td.target-reached[data-reached='false']")).to_have_count(1)
    expect(page.locator("#compare-table td.target-reached", has_text="yes, stopped there")).to_have_count(3)
    screenshot(page, "dashboard-time-to-accuracy")
    assert accessibility_violations(page) == []


def test_a_point_no_run_reached_is_named_not_dropped(page: Page, server: str, experiment: str):
    def none_at_four(point: dict[str, Any]) -> TargetPoint:
        at = scored(point)
        if at.gpus != 4:
            return at
        return at.model_copy(
            update={"reached": 0, "not_reached": at.runs, "scoring": None, "time_to_target_s": None, "ci_low_s": None,
                    "ci_high_s": None, "n": 0, "epochs_to_target": None, "effective_speedup": None}
        )  # fmt: skip

    with_target(page, none_at_four)
    open_dashboard(page, server, experiment)
    (times,) = chart(page, "time-to-target")
    assert times["x"] == [1, 2]
    unscored = "ddp at 4 GPUs: no time to target (0 of 3 runs reached it)."
    expect(page.locator("#target-unscored li")).to_have_text([unscored])


def test_nothing_of_time_to_accuracy_shows_without_a_target(page: Page, server: str, experiment: str):
    open_dashboard(page, server, experiment)
    expect(page.locator("#time-to-target")).to_be_hidden()
    expect(page.locator("#compare-table thead th.target-col").first).to_be_hidden()
    expect(page.locator("#compare-table td.target-reached")).to_have_count(0)
    assert not page.evaluate("document.getElementById('chart-time-to-target').data")  # never drawn


def test_the_form_sends_a_target_and_the_time_to_accuracy_settings(page: Page, server: str):
    page.goto(f"{server}/experiments/new")
    expect(page.locator("#preview-status")).to_have_text("This experiment creates 3 runs.")
    expect(page.locator("#target-inputs > legend")).to_have_text("Time to accuracy")
    expect(page.locator("#t-metric_name")).to_be_hidden()  # a program's typed metric, not the worker's

    # The direction follows the metric; an accuracy's bound is a fraction.
    page.select_option("#t-metric", "val_loss")
    expect(page.locator("#t-direction")).to_have_value("at_most")
    page.select_option("#t-metric", "val_accuracy")
    expect(page.locator("#t-direction")).to_have_value("at_least")
    page.fill("#t-bound", "95")
    expect(page.locator("#e-t-bound")).to_contain_text("0.95 is 95 %")
    page.fill("#t-bound", "0.9")
    expect(page.locator("#e-t-bound")).to_be_hidden()

    # Stop at the target, and two learning-rate rules swept: the preview has twice the runs.
    page.check("#f-stop_at_target")
    page.check("#s-lr_scaling")
    page.uncheck("input[name='g-lr_scaling'][value='none']")
    page.check("input[name='g-lr_scaling'][value='linear']")
    page.check("input[name='g-lr_scaling'][value='sqrt']")
    page.fill("#f-warmup_epochs", "1")
    expect(page.locator("#preview-status")).to_have_text("This experiment creates 6 runs.")

    page.fill("#x-name", "to a target")
    page.fill("#g-gpus", "1")  # one GPU count: two small runs, cancelled at once
    expect(page.locator("#preview-status")).to_have_text("This experiment creates 2 runs.")
    with page.expect_request(lambda r: r.method == "POST" and r.url.endswith("/api/experiments")) as sent:
        page.click("#submit-button")
    request = json.loads(sent.value.post_data or "{}")
    assert request["target"] == {"metric": "val_accuracy", "at_least": 0.9}
    assert request["base"]["stop_at_target"] is True and request["base"]["warmup_epochs"] == 1
    assert request["grid"]["lr_scaling"] == ["linear", "sqrt"]
    page.wait_for_url("**/runs?experiment=*")
    experiment = page.url.rsplit("=", 1)[1]
    httpx.post(f"{server}/api/experiments/{experiment}/cancel", timeout=30)
    stored = httpx.get(f"{server}/api/experiments/{experiment}", timeout=10).json()
    assert stored["request"]["target"] == {"metric": "val_accuracy", "at_least": 0.9}, stored["request"]

    # A new experiment from this one starts from its target and its settings.
    page.goto(f"{server}/experiments/new?from={experiment}")
    expect(page.locator("#t-metric")).to_have_value("val_accuracy")
    expect(page.locator("#t-direction")).to_have_value("at_least")
    expect(page.locator("#t-bound")).to_have_value("0.9")
    expect(page.locator("#f-stop_at_target")).to_be_checked()
    expect(page.locator("input[name='g-lr_scaling'][value='sqrt']")).to_be_checked()


def test_the_servers_refusal_of_a_target_is_shown_at_its_metric(page: Page, server: str, tmp_path: Path):
    page.goto(f"{server}/experiments/new")
    # A program may name any figure it prints, but not one that measures speed: the API refuses it (a 422 on the
    # target), and the form shows why at the metric typed.
    page.select_option("#f-kind", "program")
    page.fill("#p-command", "python train.py")
    page.fill("#p-workdir", str(tmp_path))
    expect(page.locator("#t-metric")).to_be_hidden()
    page.fill("#t-metric_name", "Epoch Time")
    expect(page.locator("#e-t-metric_name")).to_contain_text("is not a metric name")  # found in the page
    page.fill("#t-metric_name", "epoch_time_s")
    page.locator("#t-metric_name").dispatch_event("change")
    expect(page.locator("#t-direction")).to_have_value("at_least")
    page.fill("#t-bound", "2")
    expect(page.locator("#e-t-metric_name")).to_contain_text("measures speed or memory, not quality")
    expect(page.locator("#t-metric_name")).to_have_attribute("aria-invalid", "true")
    screenshot(page, "form-target-refused")
    assert accessibility_violations(page) == []

    # The planner's refusal names body.target.metric (a metric the model cannot report): shown at the worker's
    # metric, the field it names.
    page.select_option("#f-kind", "train")
    shown = page.evaluate(
        """async () => {
          const { serverProblems, showProblems } = await import('/static/js/form/problems.js');
          const msg = "target metric 'val_perplexity': model 'mlp' does not report it";
          const detail = [{ loc: ['body', 'target', 'metric'], msg }];
          const problems = serverProblems(document, detail);
          showProblems(document, problems, false);
          return problems.map((p) => p.errorId);
        }"""
    )
    assert shown == ["e-t-metric"]
    expect(page.locator("#e-t-metric")).to_contain_text("does not report it")
    expect(page.locator("#t-metric")).to_have_attribute("aria-invalid", "true")
