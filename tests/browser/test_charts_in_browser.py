"""Charts in a real browser: axes that do not magnify noise into a trend, legends clear of the axis titles, and the
fabric page's bus-bandwidth curves."""

from __future__ import annotations

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import ARTIFACTS, accessibility_violations, charts_final, screenshot
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
    charts_final(page)
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
    charts_final(page)
    expect(page.locator("#chart-loss-curves .legend .traces")).to_have_count(6)
    page.locator("#chart-loss-curves").screenshot(path=ARTIFACTS / f"loss-curves-legend-{width}.png")
    assert overlapping(page, "loss-curves", ".legend", ".g-xtitle") is None
    assert overlapping(page, "loss-curves", ".legend", ".xaxislayer-above") is None  # nor the tick labels


def timed_log(gpus: int, seconds: float) -> str:
    """A course script's output of five epochs, the first slower (warm-up), the others `seconds` each."""
    lines = [f"[METRIC] gpus={gpus} world_size={gpus} strategy=ddp"]
    for epoch in range(1, 6):
        took = seconds * 2 if epoch == 1 else seconds
        lines.append(f"[METRIC] epoch={epoch} loss={1 / (epoch + 1):.4f} val_loss=0.3 val_acc=0.6 time={took!r}")
    return "\n".join(lines) + "\n"


def canary(server: str, name: str, factor: float) -> str:
    """An imported canary study: 1 and 2 GPUs, three repeats each, `factor` times the reference's epoch times."""
    logs = {
        f"ddp_{gpus}gpu_{repeat}.out": timed_log(gpus, base * factor * wobble)
        for gpus, base in ((1, 4.0), (2, 2.0))
        for repeat, wobble in enumerate((1.0, 1.02, 0.99))
    }
    return imported(server, name, logs)


def test_the_reference_history_and_the_overlay_show_each_points_verdict(page: Page, server: str):
    reference, later = canary(server, "canary", 1.0), canary(server, "canary, a month later", 1.5)
    other = imported(server, "another spec", {"ddp_4gpu.out": timed_log(4, 1.0)})
    page.goto(f"{server}/experiments/{reference}")
    page.locator("#pin-reference").click()
    expect(page.locator("#regression")).to_have_attribute("data-verdict", "indistinguishable", timeout=30_000)

    page.goto(f"{server}/experiments/{later}")
    section = page.locator("#regression")
    expect(section).to_have_attribute("data-ready", "true", timeout=30_000)
    expect(section).to_have_attribute("data-verdict", "regressed")
    expect(page.locator("#regression-summary")).to_contain_text("the default")
    expect(page.locator(".regression-point[data-verdict=regressed]")).to_have_count(2)
    # The history: the reference, then this experiment regressed, each a point of the chart per series and GPUs.
    entries = page.locator(".history-entry")
    expect(entries).to_have_count(2)
    expect(entries.nth(0)).to_have_attribute("data-role", "reference")
    expect(entries.nth(1)).to_have_attribute("data-verdict", "regressed")
    page.wait_for_function("document.getElementById('chart-reference-history').data?.length === 4")
    drawn = page.evaluate(
        "() => document.getElementById('chart-reference-history').data.slice(0, 2).map((t) => [t.name, t.y])"
    )
    assert [name for name, _ in drawn] == ["ddp at 1 GPUs", "ddp at 2 GPUs"], drawn
    assert all(ys[0] == 1 and ys[1] > 1.4 for _, ys in drawn), drawn
    screenshot(page, "reference-history")

    # The overlay: this experiment against another chosen by id, the two drawn together with each point's verdict.
    page.goto(f"{server}/experiments/{other}")
    expect(page.locator("#regression-summary")).to_contain_text("No reference is pinned", timeout=30_000)
    page.locator("#overlay-with").fill(later)
    page.locator("#overlay-go").click()
    expect(page.locator("#regression-summary")).to_contain_text("not of the same spec")
    page.goto(f"{server}/experiments/{reference}")
    expect(section).to_have_attribute("data-ready", "true", timeout=30_000)
    page.locator("#overlay-with").fill(later)
    page.locator("#overlay-go").click()
    expect(page.locator("#regression-summary")).to_contain_text(f"Against experiment {later}")
    expect(page.locator(".regression-point[data-verdict=improved]")).to_have_count(2)
    page.wait_for_function("document.getElementById('chart-overlay').data?.length === 2")
    traces = page.evaluate(
        "() => document.getElementById('chart-overlay').data.map((t) => [t.name, t.x, t.text ?? null])"
    )
    assert traces[0][0] == f"ddp: reference {later}" and traces[0][1] == [1, 2], traces
    assert traces[1][0] == "ddp: this experiment" and all(label.startswith("improved") for label in traces[1][2])
    screenshot(page, "overlay")


def test_the_fabric_page_draws_each_tier_s_busbw_curve_against_a_log_size_axis(page: Page, server: str):
    imported(server, "a probe over two nodes", {"probe.out": probe_log(2, 2)})
    page.goto(f"{server}/runs")
    page.get_by_role("link", name="Fabric").click()
    charts_final(page)
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
