"""The report as a pure function of constructed rows and scaling: its sections, what it says of flags and fits, that
whatever a user typed is escaped, and that it names no address to fetch."""

from __future__ import annotations

import re
from datetime import datetime
from html import escape
from html.parser import HTMLParser
from typing import Any

import pytest

from contract.records import CodeRecord, FileSeen
from contract.spec import Strategy
from contract.states import RunState
from contract.target import Target
from server.models import CompareRow, Experiment, Run
from server.models.compare import (
    AmdahlFitPublic,
    Flag,
    FlagCode,
    PredictedPoint,
    RunResources,
    ScalingFits,
    ScalingPoint,
    ScalingPublic,
    ScalingSeries,
    TargetPoint,
    TimeToTarget,
    UslFitPublic,
)
from server.services.report import charts, fmt, render_report

HOSTILE = '<script>alert(1)</script><img src="https://evil.example/x.png">'
SUPERLINEAR = Flag(
    code=FlagCode.superlinear,
    severity="warning",
    message="efficiency above 1 at 4 GPUs: the baseline was likely slowed by something else",
)
NOISY = Flag(code=FlagCode.noisy, severity="info", message="the interval is wider than the step to the next point")
SCRIPT = '#!/bin/bash\n#SBATCH --job-name=scalelab-x\necho "a < b && c > d"\n'


def experiment(name: str = "cnn on cifar10, ddp", **request: Any) -> Experiment:
    return Experiment(
        id="0a1b2c3d4e",
        name=name,
        owner="ada",
        created_at=datetime(2025, 3, 1, 9, 30),
        request={"name": name, "grid": {"gpus": [1, 2, 4]}, **request},
    )


def row(run_id: str, gpus: int, time_s: float, speedup: float, flags: list[Flag] = [], **fields: Any) -> CompareRow:  # noqa: B006
    values: dict[str, Any] = {
        "run_id": run_id,
        "state": RunState.completed,
        "strategy": Strategy.ddp,
        "gpus": gpus,
        "nodes": 1,
        "global_batch_size": 256,
        "epochs_done": 3,
        "mean_epoch_time_s": time_s,
        "speedup": speedup,
        "efficiency": speedup / gpus,
        "final_train_loss": 0.9,
        "final_val_loss": 1.1,
        "final_val_accuracy": 0.6,
        "samples_per_s": 1000.0 * gpus,
        "peak_memory_bytes": 3 * 2**30,
        "experiment_id": "0a1b2c3d4e",
        "series": "ddp",
        "ingest_done": True,
        "flags": flags,
        "point_mean_s": time_s,
        "point_ci_low_s": time_s * 0.9,
        "point_ci_high_s": time_s * 1.1,
        "point_n": 3,
        "speedup_ci_low": speedup * 0.9,
        "speedup_ci_high": speedup * 1.1,
        "baseline_gpus": 1,
    }
    return CompareRow.model_validate(values | fields)


ROWS = [row("run1", 1, 40.0, 1.0), row("run2", 2, 21.0, 1.9), row("run4", 4, 9.5, 4.2, [SUPERLINEAR])]


def point(gpus: int, mean: float, speedup: float, flags: list[Flag] = []) -> ScalingPoint:  # noqa: B006
    return ScalingPoint(
        gpus=gpus,
        mean=mean,
        ci_low=mean * 0.9,
        ci_high=mean * 1.1,
        n=3,
        speedup=speedup,
        speedup_ci_low=speedup * 0.9,
        speedup_ci_high=speedup * 1.1,
        efficiency=speedup / gpus,
        flags=flags,
    )


FIT_SUMMARY = (
    "Amdahl: serial fraction 0.021 (r² 0.99). USL: contention \N{GREEK SMALL LETTER SIGMA} 0.02, coherency "
    "\N{GREEK SMALL LETTER KAPPA} 0.0004 (r² 1.00), past 49 GPUs adding GPUs makes it slower."
)


def series(**fields: Any) -> ScalingSeries:
    values: dict[str, Any] = {
        "series": "ddp",
        "strategy": Strategy.ddp,
        "scaling": "strong",
        "measure": "epoch_time_s",
        "baseline_gpus": 1,
        "points": [point(1, 40.0, 1.0), point(2, 21.0, 1.9), point(4, 9.5, 4.2, [SUPERLINEAR])],
        "fits": ScalingFits(
            amdahl=AmdahlFitPublic(serial_fraction=0.021, r2=0.991, describes_points=True),
            usl=UslFitPublic(sigma=0.02, kappa=0.0004, r2=0.995, peak_gpus=49.0, describes_points=True),
            r2_bound=0.9,
            summary=FIT_SUMMARY,
        ),
        "predicted": [
            PredictedPoint(gpus=g, law=law, speedup=g / (1 + 0.02 * (g - 1)))
            for law in ("amdahl", "usl")
            for g in (1, 4, 16)
        ],
        "recommendation": "Up to 8 GPUs pay off: beyond, each doubling buys less than 30 % more speed.",
        "advice": "given",
        "batch": "every run trains the same global batch of 64",
    }
    return ScalingSeries.model_validate(values | fields)


SCALING = ScalingPublic(experiment_id="0a1b2c3d4e", series=[series()], flags=[SUPERLINEAR, NOISY])


def runs() -> list[Run]:
    return [
        Run(
            id=f"run{gpus}",
            experiment_id="0a1b2c3d4e",
            position=i,
            scheduler="slurm",
            job_id=str(100 + i),
            run_dir=f"/runs/run{gpus}",
            spec={"gpus": gpus, "nodes": 1},
            image="registry.example/scalelab-worker:1.4",
            image_digest="sha256:" + "ab" * 32,
            worker_version="1.4.0",
            torch_version="2.6.0",
            source_revision="9f8e7d6",
        )
        for i, gpus in enumerate((1, 2, 4))
    ]


def render(**changes: Any) -> str:
    arguments: dict[str, Any] = {
        "experiment": experiment(),
        "rows": ROWS,
        "scaling": SCALING,
        "script": SCRIPT,
        "runs": runs(),
        "hosts": {"run1": "nid001"},
        "generated_at": datetime(2025, 3, 2, 10, 0),
    }
    arguments.update(changes)
    return render_report(**arguments)


class _Fetches(HTMLParser):
    """Every element and attribute that would make a browser fetch something, and every script."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("script", "link", "iframe", "object", "embed", "img", "base"):
            self.found.append(tag)
        for name, value in attrs:
            if name in ("src", "href", "srcset", "action", "data", "poster", "xlink:href") and value:
                self.found.append(f"{tag} {name}={value}")
            if name == "style" and value and "url(" in value:
                self.found.append(f"{tag} style={value}")


def fetches(html: str) -> list[str]:
    parser = _Fetches()
    parser.feed(html)
    styles = re.findall(r"<style>(.*?)</style>", html, re.S)
    return parser.found + [f"style: {s}" for s in styles if "url(" in s or "@import" in s]


def test_the_report_has_every_section():
    html = render()
    for section in ("flags", "charts", "table", "resources", "provenance", "request", "script"):
        assert f'<section id="{section}"' in html
    assert "<title>cnn on cifar10, ddp: scaling report</title>" in html
    assert "2025-03-01 09:30 UTC" in html and "2025-03-02 10:00 UTC" in html
    # The request as pretty JSON.
    assert "&#34;grid&#34;: {\n    &#34;gpus&#34;: [\n      1," in html


def test_flags_are_shown_with_their_messages_and_flagged_points_are_ringed():
    html = render()
    assert SUPERLINEAR.message in html and NOISY.message in html
    assert '<li class="flag warning"><strong>superlinear</strong>' in html
    # The table names the row's flag, its sentence on hover.
    assert f'title="{SUPERLINEAR.message}">superlinear</span>' in html
    assert html.count('class="point flagged"') == 3  # the 4-GPU point of time, speed-up and efficiency
    assert "flagged point</li>" in html


def test_fits_and_the_recommendation_are_shown():
    html = render()
    # The server's sentences, as the dashboard shows them: the fits rounded, the batch, the recommendation.
    assert escape(FIT_SUMMARY) in html
    assert "The runs of this series: every run trains the same global batch of 64." in html
    assert f'<p class="recommendation advice-given">{SCALING.series[0].recommendation}</p>' in html


def test_a_refused_fit_says_why():
    why = "No law fitted: two points are too few to fit a law: measure at least three."
    refused = series(fits=ScalingFits(refused="two points are too few", r2_bound=0.9, summary=why))
    html = render(scaling=ScalingPublic(series=[refused]))
    assert f'<p class="fits refused">{why}</p>' in html
    assert "serial fraction" not in html


def test_a_law_that_does_not_describe_the_points_is_left_out_of_the_chart():
    fits = SCALING.series[0].fits
    usl = fits.usl.model_copy(update={"r2": -1.6, "describes_points": False}) if fits.usl else None
    html = render(scaling=ScalingPublic(series=[series(fits=fits.model_copy(update={"usl": usl}))]))
    assert "ddp: amdahl fit" in html and "ddp: usl fit" not in html
    assert "ddp: usl fit" in render()


def test_the_table_has_mean_with_interval_speedup_and_efficiency():
    html = render()
    assert '<td class="num">9.5 ± 0.95</td>' in html
    assert '<td class="num">4.2 [3.78, 4.62]</td>' in html
    assert '<td class="num">1.05</td>' in html  # efficiency 4.2 / 4
    assert '<td class="num">3 GiB</td>' in html


def test_resources_are_said_not_gathered_when_no_row_has_them():
    assert "Not gathered on this cluster" in render()
    gathered = RunResources(elapsed_s=125.0, cpu_efficiency=0.42, device_kind="gpu", not_gathered=["energy_j"])
    html = render(rows=[ROWS[0].model_copy(update={"resources": gathered}), *ROWS[1:]])
    assert "Not gathered on this cluster" not in html
    assert "42 %" in html and "energy_j" in html and "not known yet" in html


def test_provenance_names_image_versions_and_nodes():
    html = render()
    assert "sha256:" + "ab" * 32 in html and "registry.example/scalelab-worker:1.4" in html
    assert "2.6.0" in html and "9f8e7d6" in html and "nid001" in html and "slurm 100" in html
    assert "their figures may not compare" not in html
    mixed = runs()
    mixed[2].torch_version = "2.7.0"
    assert "The runs differ in torch version" in render(runs=mixed)


def test_the_batch_script_is_escaped_in_a_pre():
    html = render()
    assert (
        "<pre>#!/bin/bash\n#SBATCH --job-name=scalelab-x\necho &#34;a &lt; b &amp;&amp; c &gt; d&#34;\n</pre>" in html
    )
    assert "Not available" in render(script=None)


@pytest.mark.parametrize("where", ["name", "request", "script", "series"])
def test_what_a_user_typed_is_escaped(where: str):
    changes: dict[str, dict[str, Any]] = {
        "name": {"experiment": experiment(name=HOSTILE)},
        "request": {"experiment": experiment(base={"model": HOSTILE})},
        "script": {"script": HOSTILE},
        "series": {"scaling": ScalingPublic(series=[series(series=HOSTILE, recommendation=HOSTILE)])},
    }
    html = render(**changes[where])
    assert "<script>" not in html and "<img" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert fetches(html) == []


def test_the_report_fetches_nothing():
    html = render()
    assert fetches(html) == []
    # And a policy refuses anything that would: the file is opened from disk, where no server sends one.
    assert "default-src 'none'" in html


def test_charts_time_with_intervals_speedup_with_ideal_and_fits_and_efficiency():
    found = charts(SCALING)
    assert [chart.id for chart in found] == ["time-epoch_time_s", "speedup", "efficiency"]
    time, speedup, efficiency = found
    assert time.y_label == "time per epoch (s)"
    assert all(mark.low is not None for mark in time.traces[0].marks)
    assert [trace.name for trace in speedup.traces] == ["ddp", "ddp: amdahl fit", "ddp: usl fit", "ddp: ideal"]
    # The fitted curves reach 16 GPUs: the axis goes that far.
    assert [label for _, label in speedup.x_ticks] == ["1", "2", "4", "16"]
    assert len(efficiency.traces[0].marks) == 3


def test_step_time_series_get_their_own_chart_and_an_empty_scaling_none():
    weak = series(series="fsdp", scaling="weak", measure="step_time_s")
    found = charts(ScalingPublic(series=[series(), weak]))
    assert [chart.id for chart in found][:2] == ["time-epoch_time_s", "time-step_time_s"]
    assert found[1].y_label == "time per step (s)"
    assert charts(ScalingPublic(series=[])) == []
    assert "No timed points to chart yet" in render(scaling=ScalingPublic(series=[]), rows=[])


def test_a_series_measured_by_run_time_says_so_and_its_chart_is_labelled_by_it():
    silent = series(measure="run_time_s", recommendation="Run time sentence.")
    found = charts(ScalingPublic(series=[silent]))
    assert found[0].id == "time-run_time_s" and found[0].y_label == "run time, start-up included (s)"
    html = render(scaling=ScalingPublic(series=[silent]), rows=[row("r1", 1, 12.0, 1.0, run_time_s=12.5)])
    assert '<p class="measure" data-measure="run_time_s">Measured by run time (its runs printed no epoch' in html
    assert '<th class="num">Run time (s)</th>' in html and ">12.5</td>" in html
    nothing = series(points=[], recommendation="No run of this series completed (failed): nothing to time or fit.")
    html = render(scaling=ScalingPublic(series=[nothing]), rows=[])
    assert "No timed points to chart: each series below says why." in html and "No run of this series" in html


def test_figures_read_as_people_write_them():
    assert [fmt(None), fmt(0.000123), fmt(9.5), fmt(1234.6), fmt(123456.0)] == [
        "\N{EN DASH}",
        "0.000123",
        "9.5",
        "1235",
        "123,456",
    ]


def test_a_programs_report_shows_which_code_ran_and_does_not_promise_a_repeat():
    assert "submitting it again repeats the experiment" in render()  # the worker's: image and spec pinned
    program = {"command": ["python", "train.py"], "workdir": "/home/alice/proj"}
    ran = runs()
    for run in ran:
        run.spec = {"kind": "program", "gpus": run.spec["gpus"], "nodes": 1, "program": program}
    script = FileSeen(name="train.py", bytes=120, sha256="c0ffee" + "0" * 58)
    noted = CodeRecord(script=script, files=[script], git_revision="1234567890ab" + "0" * 28, git_dirty=True)
    edited = noted.model_copy(update={"script": script.model_copy(update={"sha256": "beef" + "0" * 60})})
    html = render(runs=ran, codes={"run1": noted, "run2": noted, "run4": edited})
    assert "submitting it again repeats the experiment" not in html
    assert "Its program's code is not pinned" in html
    assert "train.py sha256 c0ffee000000" in html and "git revision 1234567890ab, with changes not committed" in html
    assert "The runs differ in" in html and "code" in html.split("The runs differ in")[1].split("</p>")[0]


def time_to_target(**fields: Any) -> TimeToTarget:
    slower = Flag(code=FlagCode.slower_convergence, severity="info", message="the point at 4 GPUs needs more epochs")
    points = [
        TargetPoint(
            gpus=1, global_batch_size=64, runs=3, reached=3, not_reached=0, scoring="mean", time_to_target_s=12.0,
            ci_low_s=11.0, ci_high_s=13.0, n=3, epochs_to_target=3.0, epochs_ci_low=3.0, epochs_ci_high=3.0,
            effective_speedup=1.0, throughput_speedup=1.0, statistical_efficiency=1.0,
        ),
        TargetPoint(
            gpus=4, global_batch_size=256, runs=3, reached=2, not_reached=1, scoring="mean", time_to_target_s=6.5,
            ci_low_s=6.0, ci_high_s=7.0, n=2, epochs_to_target=5.0, epochs_ci_low=None, epochs_ci_high=None,
            effective_speedup=1.846, effective_speedup_ci_low=1.571, effective_speedup_ci_high=2.167,
            throughput_speedup=3.1, statistical_efficiency=0.6, flags=[slower],
        ),
    ]  # fmt: skip
    values: dict[str, Any] = {
        "target": Target(metric="val_accuracy", at_least=0.95),
        "measured_from": "Training time to the end of the epoch that first reached it.",
        "baseline_gpus": 1,
        "points": points,
        "summary": "4 GPUs reach val_accuracy >= 0.95 in 6.5 s, 1.8x sooner than 1 GPU <b>",
    }
    return TimeToTarget.model_validate(values | fields)


def test_a_series_with_a_target_gets_its_time_to_target_table_and_answer():
    scaled = ScalingPublic(series=[series(time_to_target=time_to_target())])
    html = render(scaling=scaled)
    section = html[html.index('<div class="time-to-target">') : html.index('<section id="table"')]
    assert "<h4>Time to val_accuracy &gt;= 0.95</h4>" in section
    cells = [re.sub(r"<[^>]+>", "", cell) for cell in re.findall(r"<td[^>]*>(.*?)</td>", section)]
    assert cells[:9] == ["1", "64", "3 of 3 reached", "12 [11, 13] (mean, n 3)", "3 [3, 3]", "1", "1", "1", ""]
    assert cells[9:] == [
        "4", "256", "2 of 3 reached, 1 did not", "6.5 [6, 7] (mean, n 2)", "5", "1.85 [1.57, 2.17]", "3.1", "0.6",
        "slower_convergence",
    ]  # fmt: skip
    assert "1.8x sooner than 1 GPU &lt;b&gt;" in section and "first reached it." in section


def test_a_series_without_a_target_has_no_time_to_target_section():
    assert 'class="time-to-target"' not in render()
