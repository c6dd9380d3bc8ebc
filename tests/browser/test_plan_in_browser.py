"""The New experiment form's "Plan first" in a real browser, on the real two-node cluster: the form's request goes
to POST /api/plans, the plan's fabric probes and 1-process run are shown while they really run, then every grid
point predicted with its step's parts and the recommendation, which is submitted as an experiment of its own.
A field the plan cannot take is marked at the field, as submitting marks it. Probes of the default 10 s, a
1-process run of four steps.

Beside the plan, a probe experiment of its own (2 nodes x 2, submitted when the module starts): its page is the probe
view, each tier's busbw curves per collective and the fits, with a link to the fabric page filtered to its shape; its
run's page says what it probes and draws that run's own curves and fits in place of the training curves."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import accessibility_violations, charts_final, screenshot
from tests.e2e.conftest import slurm2_server_in

pytestmark = [pytest.mark.browser, pytest.mark.slurm, pytest.mark.torch]

# Long enough for two probes and a 1-process run on a busy shared machine; the plan e2e test needs far less.
PLANNED_MS = 420_000


@pytest.fixture(scope="module")
def server2(slurm2_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with slurm2_server_in(tmp_path_factory.mktemp("plan-browser"), slurm2_env) as url:
        try:
            yield url
        finally:
            for experiment in httpx.get(f"{url}/api/experiments", timeout=10).json()["data"]:
                httpx.post(f"{url}/api/experiments/{experiment['id']}/cancel", timeout=30)


COLLECTIVES = {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "send_recv"}
PROBE_NAME = "the fabric of two nodes"
PROBE = {
    "name": PROBE_NAME,
    "isolation": "shared",  # beside the plan's runs
    "base": {"kind": "probe", "probe_seconds": 4},
    "grid": {"gpus": [4]},
    "resources": {"nodes": 2, "time_limit": "00:05:00"},
}


@pytest.fixture(scope="module")
def probe_experiment(server2: str) -> str:
    """A probe experiment of 2 nodes x 2 processes, submitted when the module starts so that it runs beside the plan."""
    response = httpx.post(f"{server2}/api/experiments", json=PROBE, timeout=30)
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def nothing_but_the_probe(url: str) -> bool:
    """Whether nothing was submitted but the module's probe experiment."""
    experiments = httpx.get(f"{url}/api/experiments", timeout=10).json()["data"]
    return [experiment["name"] for experiment in experiments] == [PROBE_NAME]


def fill_ddp_over_two_nodes(page: Page) -> None:
    page.fill("#x-name", "ddp over two nodes, planned in the form")
    page.select_option("#x-isolation", "shared")  # the plan's three runs at once
    page.select_option("#f-model", "mlp")
    page.select_option("#f-dataset", "synthetic")
    page.fill("#g-gpus", "2, 4")
    page.fill("#f-nodes", "2")
    page.fill("#f-epochs", "1")
    page.fill("#f-steps_per_epoch", "4")
    page.fill("#f-global_batch_size", "64")
    expect(page.locator("#preview-status")).to_have_text("This experiment creates 2 runs.", timeout=20_000)


def test_plan_first_shows_the_plan_s_runs_then_the_predicted_points_and_submits_the_recommendation(
    page: Page, server2: str, probe_experiment: str
):
    page.goto(f"{server2}/experiments/new")
    fill_ddp_over_two_nodes(page)

    # A field the page itself refuses: marked there, nothing sent.
    page.fill("#f-epochs", "0")
    page.click("#plan-button")
    expect(page.locator("#e-f-epochs")).to_be_visible()
    expect(page.locator("#plan-status")).to_have_text("Nothing was planned: fix the fields marked.")
    page.fill("#f-epochs", "1")
    # One the server refuses (a plan predicts training only): its 422 marked at the field it names.
    page.select_option("#f-kind", "probe")
    page.click("#plan-button")
    expect(page.locator("#e-f-kind")).to_contain_text("a plan predicts the built-in worker's training")
    expect(page.locator("#f-kind")).to_have_attribute("aria-invalid", "true")
    page.select_option("#f-kind", "train")
    assert nothing_but_the_probe(server2)

    page.select_option("#plan-goal", "largest_n_at_efficiency")
    page.fill("#plan-efficiency", "1.5")  # beyond the bound's range: marked at its field, nothing sent
    page.click("#plan-button")
    expect(page.locator("#e-plan-efficiency")).to_have_text("must be more than 0 and at most 1, not “1.5”")
    expect(page.locator("#plan-efficiency")).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#plan-status")).to_have_text("Nothing was planned: fix the efficiency bound.")
    assert nothing_but_the_probe(server2)
    page.fill("#plan-efficiency", "0.5")
    with page.expect_request(lambda request: "/api/plans?" in request.url and request.method == "POST") as sent:
        page.click("#plan-button")
    assert "goal=largest_n_at_efficiency" in sent.value.url and "efficiency=0.5" in sent.value.url
    body = json.loads(sent.value.post_data or "{}")
    assert body["grid"]["gpus"] == [2, 4] and body["base"]["steps_per_epoch"] == 4
    assert {**body["base"], **body["resources"]}["nodes"] == 2

    # Its runs while they run: a probe per shape of the grid's points ((2, 1) and (2, 2)) and the 1-process run.
    runs = page.locator("#plan-runs li")
    expect(runs).to_have_count(3, timeout=60_000)
    expect(runs.filter(has_text="fabric probe")).to_have_count(2)
    expect(runs.filter(has_text="1-process run of ddp")).to_have_count(1)
    screenshot(page, "plan-first-running")

    expect(page.locator("#plan-status")).to_have_text(
        "Planned: every point of the grid predicted from the runs above.", timeout=PLANNED_MS
    )
    rows = page.locator("#plan-table tbody tr")
    expect(rows).to_have_count(2)
    expect(page.locator("#plan-table thead")).to_contain_text("Communication (exposed)")
    for at in range(2):
        cells = rows.nth(at).locator("td")
        expect(cells).to_have_count(9)
        for column in range(4):  # the step, its compute, its exposed communication, its bubble: all predicted
            expect(cells.nth(column)).to_have_text(re.compile(r"^[0-9.e+-]+ s$"))
    expect(page.locator("#plan-recommendation")).to_contain_text("Recommended: the most GPUs whose predicted")
    expect(page.locator("#plan-fits")).to_contain_text("inter-node")
    expect(page.locator("#plan-table tbody tr.recommended")).to_have_count(1)
    screenshot(page, "plan-first-ready")
    assert accessibility_violations(page) == []

    recommended = page.locator("#plan-table tbody tr.recommended th").inner_text()
    page.click("#plan-submit")
    page.wait_for_url("**/runs?experiment=*")
    experiment_id = page.url.rsplit("=", 1)[1]
    request = httpx.get(f"{server2}/api/experiments/{experiment_id}", timeout=10).json()["request"]
    gpus = request["grid"]["gpus"]
    assert len(gpus) == 1 and f"on {gpus[0]} GPU(s)" in recommended, (request, recommended)


def test_a_probe_experiment_opens_the_probe_view_with_each_tier_s_curves_its_fits_and_the_fabric_link(
    page: Page, server2: str, probe_experiment: str
):
    page.goto(server2)
    page.get_by_role("link", name=PROBE_NAME).click()
    page.wait_for_url(f"**/experiments/{probe_experiment}")
    charts_final(page, timeout_ms=PLANNED_MS)
    # The probe view, not the training dashboard's charts.
    for training in ("#chart-epoch-time", "#chart-speedup", "#chart-loss-curves", "#compare-table"):
        expect(page.locator(training)).to_have_count(0)
    expect(page.locator("#dash-status")).to_have_text("1 runs, all finished.")
    (run,) = page.locator("#probe-runs tbody tr").all()
    expect(run.locator(".state")).to_have_text("completed")
    expect(run).to_contain_text("2 nodes x 2 per node")
    expect(run.locator(".tiers")).to_have_text("intra node, inter node")
    # Each tier: a line per collective, against log size and bandwidth axes.
    for tier in ("intra_node", "inter_node"):
        drawn: dict = page.evaluate(
            """id => {
              const element = document.getElementById(id);
              return {x: element._fullLayout.xaxis.type, y: element._fullLayout.yaxis.type,
                      traces: element.data.map((t) => ({name: t.name, points: t.x.length}))};
            }""",
            f"chart-{tier}",
        )
        assert (drawn["x"], drawn["y"]) == ("log", "log"), drawn
        assert {trace["name"].split(",")[0] for trace in drawn["traces"]} == COLLECTIVES, drawn
        assert all(trace["points"] >= 2 for trace in drawn["traces"]), drawn
    # The fits: alpha, beta and the fit's error per tier.
    fits = page.locator("#fabric-table tbody tr")
    expect(fits).to_have_count(2)
    for at in range(2):
        cells = fits.nth(at).locator("td")
        expect(cells.nth(7)).to_have_text(re.compile(r"^[0-9.e+-]+$"))  # alpha, µs
        expect(cells.nth(8)).to_have_text(re.compile(r"^[0-9.e+-]+$"))  # beta, GB/s
        expect(cells.nth(9)).to_have_text(re.compile(r"^[0-9.e+-]+ %( \(poor\))?$"))  # the fit's error
        expect(cells.nth(12)).to_have_text("not judged (a probe run)")
    screenshot(page, "probe-experiment")
    assert accessibility_violations(page) == []

    link = run.locator("a.fabric-link")
    expect(link).to_have_attribute(
        "href", "/fabric?profile=twonode&partition=debug&nodes=2&processes_per_node=2&backend=gloo"
    )
    link.click()
    page.wait_for_url("**/fabric?*")
    charts_final(page)
    expect(page.locator("#fabric-filter")).to_contain_text("Only the probes of profile twonode, partition debug")
    shown = page.locator("#fabric-table tbody tr")
    expect(shown.first).to_be_visible()
    for row in shown.all():  # this probe's tiers, and the plan's probe of the same shape: none of another shape
        cells = row.locator("td")
        assert (cells.nth(3).inner_text(), cells.nth(4).inner_text()) == ("2", "2")
    assert accessibility_violations(page) == []


def test_a_probe_run_s_page_shows_its_shape_its_own_tiers_curves_and_fits_not_training_curves(
    page: Page, server2: str, probe_experiment: str
):
    # From its experiment's probe view, as a user gets there.
    page.goto(f"{server2}/experiments/{probe_experiment}")
    link = page.locator("#probe-runs tbody th a")
    expect(link).to_have_count(1, timeout=30_000)
    run_id = link.inner_text()
    link.click()
    page.wait_for_url(f"**/runs/{run_id}")
    charts_final(page, timeout_ms=PLANNED_MS)
    expect(page.locator("#run-intro")).to_contain_text(
        re.compile(r"a fabric probe on 2 nodes \u00d7 2 processes per node,\s+backend gloo, for at most 4 s\.")
    )
    expect(page.locator("#probe-status")).to_have_text("Finished; tiers measured: intra node, inter node.")
    # Its own curves, as its experiment's probe view draws them: a line per collective on each tier's log axes.
    for tier in ("intra_node", "inter_node"):
        names: list[str] = page.evaluate(
            "id => document.getElementById(id).data.map((trace) => trace.name)", f"chart-{tier}"
        )
        assert {name.split(",")[0] for name in names} == COLLECTIVES, names
        assert all(name.endswith(f"(run {run_id})") for name in names), names
    fits = page.locator("#fabric-table tbody tr")
    expect(fits).to_have_count(2)
    expect(fits.first.locator("td").nth(10)).to_have_text(run_id)
    expect(fits.first.locator("td").nth(12)).to_have_text("not judged (a probe run)")
    # No training curves; what every run's page has stays.
    for training in ("#chart-run-loss", "#chart-run-accuracy", "#chart-run-epoch-times", "#run-metric-figure"):
        expect(page.locator(training)).to_have_count(0)
    expect(page.locator("#run-state")).to_have_text("completed")
    expect(page.locator("#run-flag-summary")).not_to_have_text("Loading its flags…")
    expect(page.locator("#run-utilization")).to_be_empty()  # no MFU sentence: a probe trains nothing
    expect(page.locator("#log")).not_to_be_empty()
    expect(page.locator("#run-probe-view")).to_have_attribute("href", f"/experiments/{probe_experiment}")
    expect(page.locator("#run-fabric-link")).to_have_attribute(
        "href", "/fabric?profile=twonode&partition=debug&nodes=2&processes_per_node=2&backend=gloo"
    )
    screenshot(page, "probe-run")
    assert accessibility_violations(page) == []
