"""Charts in a real browser: axes that do not magnify noise into a trend, legends clear of the axis titles, and the
fabric page's bus-bandwidth curves."""

from __future__ import annotations

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import ARTIFACTS, accessibility_violations, screenshot
from tests.server.api.test_fabric import probe_log

pytestmark = [pytest.mark.browser, pytest.mark.slurm]


def imported_log(gpus: int, val_losses: list[float], strategy: str = "ddp") -> str:
    """A course script's output whose validation losses are the ones given, one epoch each."""
    lines = [f"[METRIC] gpus={gpus} world_size={gpus} strategy={strategy}"]
    for epoch, val_loss in enumerate(val_losses, start=1):
        lines.append(
            f"[METRIC] epoch={epoch} loss={1 / (epoch + 1):.4f} val_loss={val_loss!r} val_acc=0.6 "
            f"time={4 / gpus:.3f} throughput={1000 * gpus}"
        )
    return "\n".join(lines) + "\n"


def imported(server: str, name: str, logs: dict[str, str]) -> str:
    files = [{"name": file_name, "content": content} for file_name, content in logs.items()]
    created = httpx.post(f"{server}/api/imports", json={"name": name, "files": files}, timeout=30)
    assert created.status_code == 201, created.text
    return str(created.json()["id"])


def y_axis(page: Page, chart: str) -> dict:
    """The y axis as plotly drew it: its range and the tick labels it wrote."""
    drawn: dict = page.evaluate(
        """id => {
          const element = document.getElementById(id);
          return {range: element._fullLayout.yaxis.range,
                  ticks: [...element.querySelectorAll('.ytick text')].map((tick) => tick.textContent)};
        }""",
        f"chart-{chart}",
    )
    return drawn


def test_values_equal_but_for_the_ninth_digit_get_a_span_and_are_said_to_be_equal(page: Page, server: str):
    # The validation losses of a DDP/FSDP experiment as they came out: equal to eight digits.
    experiment = imported(
        server,
        "equal losses",
        {
            "ddp_1gpu.out": imported_log(1, [0.2, 0.118087529]),
            "ddp_2gpu.out": imported_log(2, [0.2, 0.118087533]),
            "fsdp_1gpu.out": imported_log(1, [0.2, 0.118087531], strategy="fsdp"),
            "fsdp_2gpu.out": imported_log(2, [0.2, 0.118087530], strategy="fsdp"),
        },
    )
    page.goto(f"{server}/experiments/{experiment}")
    expect(page.locator("#charts")).to_have_attribute("data-ready", "final", timeout=30_000)
    axis = y_axis(page, "val-loss")
    low, high = axis["range"]
    assert high - low >= 0.01 and low <= 0.118087529 and high >= 0.118087533, axis
    assert all(len(tick.lstrip("0.")) <= 4 for tick in axis["ticks"]), axis  # no tick like 0.118087531
    expect(page.locator("#chart-val-loss")).to_contain_text("The values are equal to 6 significant digits: 0.118088")
    screenshot(page, "dashboard-equal-losses")

    # A run's own curve: the same validation loss at every epoch.
    runs = httpx.get(f"{server}/api/runs", params={"experiment_id": experiment}, timeout=10).json()["data"]
    run = runs[0]["id"]
    page.goto(f"{server}/runs/{run}")
    page.wait_for_function("document.getElementById('chart-run-loss').data?.[0]?.x.length === 2")
    expect(page.locator("#chart-run-accuracy")).to_contain_text("The values are equal to 6 significant digits: 0.6")


def overlapping(page: Page, chart: str, one: str, other: str) -> dict | None:
    """Where two parts of a chart's drawing (CSS selectors within it) overlap, or None where they do not."""
    overlap: dict | None = page.evaluate(
        """([id, one, other]) => {
          const box = (selector) => document.getElementById(id).querySelector(selector).getBoundingClientRect();
          const [a, b] = [box(one), box(other)];
          const overlap = a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom;
          return overlap ? {one: a.toJSON(), other: b.toJSON()} : null;
        }""",
        [f"chart-{chart}", one, other],
    )
    return overlap


@pytest.mark.parametrize("width", [1280, 390])
def test_the_loss_curves_legend_is_clear_of_the_axis_title(page: Page, server: str, width: int):
    logs = {
        f"{strategy}_{gpus}gpu.out": imported_log(gpus, [0.3, 0.2, 0.1], strategy=strategy)
        for strategy in ("ddp", "fsdp")
        for gpus in (1, 2, 4)
    }
    experiment = imported(server, f"legend at {width}", logs)
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(f"{server}/experiments/{experiment}")
    expect(page.locator("#charts")).to_have_attribute("data-ready", "final", timeout=30_000)
    expect(page.locator("#chart-loss-curves .legend .traces")).to_have_count(6)
    page.locator("#chart-loss-curves").screenshot(path=ARTIFACTS / f"loss-curves-legend-{width}.png")
    assert overlapping(page, "loss-curves", ".legend", ".g-xtitle") is None
    assert overlapping(page, "loss-curves", ".legend", ".xaxislayer-above") is None  # nor the tick labels


def test_the_fabric_page_draws_each_tier_s_busbw_curve_against_a_log_size_axis(page: Page, server: str):
    imported(server, "a probe over two nodes", {"probe.out": probe_log(2, 2)})
    page.goto(f"{server}/runs")
    page.get_by_role("link", name="Fabric").click()
    expect(page.locator("#charts")).to_have_attribute("data-ready", "final", timeout=30_000)
    for tier in ("intra_node", "inter_node"):
        drawn: dict = page.evaluate(
            """id => {
              const element = document.getElementById(id);
              return {type: element._fullLayout.xaxis.type,
                      traces: element.data.map((t) => ({name: t.name, x: Array.from(t.x), y: Array.from(t.y)}))};
            }""",
            f"chart-{tier}",
        )
        assert drawn["type"] == "log"
        curves = {trace["name"].split(",")[0]: trace for trace in drawn["traces"]}
        assert set(curves) == {"all_reduce", "broadcast"}
        # Sizes doubling from 1 KiB, and the bus bandwidth rising with them towards the fabric's.
        curve = curves["all_reduce"]
        assert curve["x"] == [1024 * 2**step for step in range(8)]
        assert curve["y"] == sorted(curve["y"]) and curve["y"][0] < curve["y"][-1]
    expect(page.locator("#fabric-table tbody tr")).to_have_count(2)
    expect(page.locator("#fabric-status")).to_have_text("2 probed tiers, newest first.")
    screenshot(page, "fabric")
    assert accessibility_violations(page) == []
