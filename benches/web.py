"""The web app under a large history: page and compare times over HTTP, and the same workload against MLflow.

1. A database seeded in bulk with 10,000 runs (several hundred experiments, one of exactly 32 runs) and 2,000,000
   metric records, through the server's migrations; a real server on it; the runs page and the 32-run experiment's
   dashboard loaded as a browser loads them (the page, then the API calls its script makes at once), and the
   compare endpoint for 100 runs, without and with histories: median and p95 of each against its target.
2. The same workload through scalelab's own code: the runs created by create_experiment (directories, spec and
   batch script; the scheduler is not called), the records read from each run's output.log by the monitor's
   ingestion, the 100 runs queried through the compare endpoint over HTTP; and against MLflow's tracking store on
   SQLite, in an environment of its own: create_run, log_batch, search_runs and get_metric_history.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import update
from sqlmodel import Session

from benches.common import BenchError, NoScheduler, load_average, table, work_dir
from benches.server_process import ServerDidNotStart, running_server
from benches.web_seed import counted, output_of, seeded_database
from benches.web_workload import DASHBOARD_RUNS, Workload, plan, sizes
from contract.spec import RunSpec
from contract.states import RunState
from server.config import Settings
from server.db import init_db, make_engine
from server.models import ExperimentCreate, Run, User, utcnow
from server.monitor import Monitor
from server.profiles import load_catalog
from server.services.planning import Plan
from server.services.submission import create_experiment

TARGETS_MS = {"runs page": 300.0, "dashboard": 300.0, "compare": 100.0}
MLFLOW_REQUIREMENT = "mlflow==3.17.2"
DEFAULT_MLFLOW_VENV = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "scalelab" / "mlflow-venv"
HTTP_TIMEOUT_S = 60.0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benches.web", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--scale", type=float, default=1.0, help="fraction of 10,000 runs and 2,000,000 records (default 1)"
    )
    parser.add_argument("--runs", type=int, help="runs, overriding --scale")
    parser.add_argument("--points", type=int, help="metric records over all runs, overriding --scale")
    parser.add_argument("--repeats", type=int, default=30, help="loads of each page and query (default 30)")
    parser.add_argument(
        "--only",
        choices=("pages", "workload"),
        help="only the pages against their targets, or only the same workload side by side (default: both)",
    )
    parser.add_argument("--tmp", type=Path, help="where to put the databases and run directories (kept)")
    parser.add_argument(
        "--no-mlflow", action="store_true", help="leave out MLflow's side (scalelab's is still measured)"
    )
    parser.add_argument(
        "--mlflow-venv",
        type=Path,
        default=DEFAULT_MLFLOW_VENV,
        help=f"MLflow's own environment, made there with {MLFLOW_REQUIREMENT} if it is missing (default: %(default)s)",
    )
    parser.add_argument(
        "--mlflow-results",
        type=Path,
        help="MLflow's figures measured earlier by `python -m benches.web_mlflow` for the same sizes and seed, "
        "instead of measuring them again (MLflow's side takes about 40 minutes at full size)",
    )
    return parser


# ---- timing over HTTP --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Timing:
    samples_s: list[float]
    server_cpu_s: float | None = None  # the server process's CPU time over all samples, if it could be read

    @property
    def median_ms(self) -> float:
        return statistics.median(self.samples_s) * 1000

    @property
    def server_cpu_ms(self) -> float | None:
        """Mean CPU time of the server per load: what the load costs the server, however busy the machine is."""
        return None if self.server_cpu_s is None else self.server_cpu_s / len(self.samples_s) * 1000

    @property
    def p95_ms(self) -> float:
        if len(self.samples_s) < 2:
            return self.samples_s[0] * 1000
        return statistics.quantiles(self.samples_s, n=20, method="inclusive")[18] * 1000


def _get(client: httpx.Client, path: str) -> httpx.Response:
    response = client.get(path)
    if response.status_code != 200:
        raise BenchError(f"GET {path[:120]} answered {response.status_code}: {response.text[:300]}")
    return response


def server_pid(url: str) -> int | None:
    """The process of the server listening at `url` (started by running_server with --port), from /proc."""
    port = url.rsplit(":", 1)[1]
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if b"server" in argv and b"--port" in argv and argv[argv.index(b"--port") + 1 :][:1] == [port.encode()]:
            return int(cmdline.parent.name)
    return None


def cpu_seconds(pid: int | None) -> float | None:
    """User and system CPU time of a process so far (Linux)."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def threads_cpu_ns(pid: int) -> dict[int, int]:
    """CPU time of each live thread of a process, in ns as the scheduler counts it (/proc/PID/task/TID/schedstat).
    /proc/PID/stat's user and system times are charged a whole tick (10 ms) to whichever thread runs when the tick
    comes: over a few hundred millisecond requests that sampling alone moves a figure by a fifth."""
    found: dict[int, int] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found[int(task.name)] = int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # the thread ended meanwhile
    return found


def timed(load: Callable[[], object], repeats: int, pid: int | None = None, warmup: int = 2) -> Timing:
    """Wall time of `load` over `repeats` calls, after `warmup` calls that fill the server's caches; and the
    server's CPU time over them. The machine may be shared: wall time grows with its load, CPU time hardly."""
    for _ in range(warmup):
        load()
    samples = []
    cpu_before = cpu_seconds(pid)
    for _ in range(repeats):
        started = time.perf_counter()
        load()
        samples.append(time.perf_counter() - started)
    cpu_after = cpu_seconds(pid)
    cpu = None if cpu_before is None or cpu_after is None else cpu_after - cpu_before
    return Timing(samples, cpu)


class _RunRows(HTMLParser):
    """The runs page's rows as its script finds them (tr[data-run]), and its page data."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[dict[str, str | None]] = []
        self._in_page_data = False
        self.page_data: dict[str, Any] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "tr" and "data-run" in found:
            self.rows.append(found)
        self._in_page_data = tag == "script" and found.get("id") == "page-data"

    def handle_data(self, data: str) -> None:
        if self._in_page_data:
            self.page_data = json.loads(data)
            self._in_page_data = False


FINAL = frozenset(state.value for state in RunState if state.is_final)


def load_runs_page(client: httpx.Client) -> int:
    """GET /runs, then what runs.js asks for at once: the page's runs, and the progress of those still live."""
    page = _RunRows()
    page.feed(_get(client, "/runs").text)
    if not page.rows or "runs_query" not in page.page_data:
        raise BenchError("the runs page shows no runs, or no page data for its script")
    _get(client, f"/api/runs?{page.page_data['runs_query']}")
    live = [row["data-run"] for row in page.rows if row["data-state"] not in FINAL or row["data-ingested"] != "true"]
    if live:
        _get(client, "/api/compare?" + "&".join(f"run_id={run_id}" for run_id in live))
    return len(page.rows)


def load_dashboard(client: httpx.Client, experiment_id: str) -> int:
    """GET the experiment's page, then its script's one call: the compare endpoint with histories."""
    _get(client, f"/experiments/{experiment_id}")
    return int(_get(client, f"/api/compare?experiment_id={experiment_id}&history=true").json()["count"])


def compare_path(run_ids: Sequence[str], history: bool) -> str:
    return "/api/compare?" + "&".join(f"run_id={run_id}" for run_id in run_ids) + ("&history=true" if history else "")


# ---- the pages against their targets -----------------------------------------------------------------------------


@dataclass(frozen=True)
class PageFigures:
    runs_page: Timing
    dashboard: Timing
    compare: Timing
    compare_history: Timing
    seed_s: float
    runs: int
    metrics: int
    summaries: int
    experiments: int
    users: int
    shown_rows: int
    queried: int


def measure_pages(work: Path, workload: Workload, repeats: int) -> PageFigures:
    work.mkdir(parents=True, exist_ok=True)
    _progress(f"seeding {workload.run_count:,} runs and {workload.point_count:,} records")
    engine, seeded = seeded_database(work / "scalelab.db", workload)
    engine.dispose()
    if (seeded.runs, seeded.metrics) != (workload.run_count, workload.point_count):
        raise BenchError(f"seeded {seeded.runs} runs and {seeded.metrics} records, not the workload's")
    _progress(f"seeded in {seeded.seconds:.1f} s; measuring the pages")
    dashboard_id = seeded.experiment_ids[0]
    queried = [seeded.run_ids[key] for key in workload.queried()]
    with running_server(work, "local") as url, httpx.Client(base_url=url, timeout=HTTP_TIMEOUT_S) as client:
        pid = server_pid(url)
        shown = load_runs_page(client)
        if load_dashboard(client, dashboard_id) != len(workload.experiments[0].runs):
            raise BenchError("the dashboard's experiment does not hold the runs it was seeded with")
        figures = PageFigures(
            runs_page=timed(lambda: load_runs_page(client), repeats, pid),
            dashboard=timed(lambda: load_dashboard(client, dashboard_id), repeats, pid),
            compare=timed(lambda: _get(client, compare_path(queried, False)), repeats, pid),
            compare_history=timed(lambda: _get(client, compare_path(queried, True)), repeats, pid),
            seed_s=seeded.seconds,
            runs=seeded.runs,
            metrics=seeded.metrics,
            summaries=seeded.summaries,
            experiments=len(seeded.experiment_ids),
            users=len({run.owner for run in workload.runs}),
            shown_rows=shown,
            queried=len(queried),
        )
    return figures


# ---- the same workload through scalelab's own code ---------------------------------------------------------------


@dataclass(frozen=True)
class WorkloadFigures:
    create_s: float
    log_s: float
    latest: Timing
    histories: Timing
    runs: int
    records: int
    queried: int


def scalelab_workload(work: Path, workload: Workload, repeats: int) -> WorkloadFigures:
    work.mkdir(parents=True, exist_ok=True)
    url = f"sqlite:///{work / 'scalelab.db'}"
    engine = make_engine(url)
    init_db(engine)
    settings = Settings(database_url=url, runs_dir=work / "runs", scheduler="local", auth=False)
    catalog = load_catalog(None, "local")
    profile = catalog.profiles[catalog.default]
    scheduler = NoScheduler()
    with Session(engine) as session:
        session.add_all(User(name=name) for name in sorted({run.owner for run in workload.runs}))
        session.commit()
    _progress(f"scalelab: creating {workload.run_count:,} runs")
    run_ids: dict[tuple[int, int], str] = {}
    run_dirs: dict[tuple[int, int], Path] = {}
    started = time.perf_counter()
    for experiment in workload.experiments:
        specs = [RunSpec.model_validate(run.spec) for run in experiment.runs]
        experiment_plan = Plan(profile, profile.default_partition, "02:00:00", {}, specs, [])
        with Session(engine) as session:
            _, runs, _ = create_experiment(
                session, ExperimentCreate(name=experiment.name), experiment_plan, settings, scheduler, experiment.owner
            )
            for run in runs:
                run_ids[(experiment.index, run.position)] = run.id
                run_dirs[(experiment.index, run.position)] = Path(run.run_dir)
    create_s = time.perf_counter() - started
    _progress(f"scalelab: created in {create_s:.1f} s; writing the runs' output (not timed: the jobs' work)")
    for planned in workload.runs:
        (run_dirs[(planned.experiment, planned.position)] / "output.log").write_bytes(output_of(planned))
    # Jobs that printed have started: the monitor reads no output of a job it has not seen start.
    with Session(engine) as session:
        session.exec(update(Run).values(state=RunState.running, started_at=utcnow()))
        session.commit()
    _progress(f"scalelab: ingesting {workload.point_count:,} records")
    started = time.perf_counter()
    Monitor(engine, scheduler, 1.0).ingest_metrics()
    log_s = time.perf_counter() - started
    # The jobs end: the server's monitor then has nothing left to read while the queries are timed.
    with Session(engine) as session:
        session.exec(update(Run).values(state=RunState.completed, ingest_done=True))
        session.commit()
    counts = counted(engine)
    engine.dispose()
    _progress(f"scalelab: ingested in {log_s:.1f} s; querying 100 runs")
    queried = [run_ids[key] for key in workload.queried()]
    with running_server(work, "local") as server, httpx.Client(base_url=server, timeout=HTTP_TIMEOUT_S) as client:
        pid = server_pid(server)
        if _get(client, compare_path(queried, False)).json()["count"] != len(queried):
            raise BenchError("the compare endpoint did not return every run asked for")
        latest = timed(lambda: _get(client, compare_path(queried, False)), repeats, pid)
        histories = timed(lambda: _get(client, compare_path(queried, True)), repeats, pid)
    return WorkloadFigures(create_s, log_s, latest, histories, counts["run"], counts["metric"], len(queried))


# ---- MLflow's side -----------------------------------------------------------------------------------------------


def mlflow_python(venv: Path) -> Path:
    """The Python of MLflow's own environment, made first if it is missing (a few minutes)."""
    python = venv / "bin" / "python"
    if python.exists():
        return python
    _progress(f"making MLflow's environment in {venv} ({MLFLOW_REQUIREMENT})")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", MLFLOW_REQUIREMENT], check=True)
    return python


def mlflow_side(work: Path, workload: Workload, repeats: int, venv: Path) -> dict[str, Any]:
    python = mlflow_python(venv)
    work.mkdir(parents=True, exist_ok=True)
    command = [
        str(python), "-m", "benches.web_mlflow", "--runs", str(workload.run_count),
        "--points", str(workload.point_count), "--seed", str(workload.seed), "--repeats", str(repeats),
        "--db", str(work / "mlflow.db"),
    ]  # fmt: skip
    repo = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(repo)}
    _progress(f"MLflow: the same workload ({workload.run_count:,} runs, {workload.point_count:,} records)")
    result = subprocess.run(command, cwd=work, env=env, stdout=subprocess.PIPE, text=True, check=False)
    if result.returncode != 0:
        raise BenchError(f"MLflow's side failed with exit status {result.returncode}")
    figures: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return figures


def read_mlflow_results(path: Path, workload: Workload) -> dict[str, Any]:
    figures: dict[str, Any] = json.loads(path.read_text())
    wanted = (workload.run_count, workload.point_count, workload.seed)
    if (figures["runs"], figures["points"], figures["seed"]) != wanted:
        raise BenchError(f"{path} holds MLflow's figures for other sizes: {figures['runs']} runs, "
                         f"{figures['points']} records, seed {figures['seed']}")  # fmt: skip
    return figures


# ---- the report --------------------------------------------------------------------------------------------------


def _verdict(value_ms: float, target_ms: float) -> str:
    return "pass" if value_ms <= target_ms else "MISS"


def page_report(figures: PageFigures, repeats: int) -> str:
    target = TARGETS_MS
    rows = [
        ("runs page (page + /api/runs + live progress)", figures.runs_page, target["runs page"], "median"),
        (f"dashboard of the {DASHBOARD_RUNS}-run experiment (page + compare)", figures.dashboard,
         target["dashboard"], "median"),
        (f"compare, {figures.queried} runs", figures.compare, target["compare"], "p95"),
        (f"compare, {figures.queried} runs, history=true", figures.compare_history, target["compare"], "p95"),
    ]  # fmt: skip
    body = []
    for name, timing, limit, which in rows:
        value = timing.median_ms if which == "median" else timing.p95_ms
        cpu = "-" if timing.server_cpu_ms is None else f"{timing.server_cpu_ms:.1f}"
        body.append(
            (name, f"{timing.median_ms:.1f}", f"{timing.p95_ms:.1f}", cpu, f"{which} <= {limit:.0f}",
             _verdict(value, limit))
        )  # fmt: skip
    header = ("over HTTP, ms", "median", "p95", "server CPU", "target", "result")
    seeded = (
        f"seeded {figures.runs:,} runs ({figures.experiments:,} experiments, {figures.users} users) and "
        f"{figures.metrics:,} metric records (+{figures.summaries:,} run summaries) in {figures.seed_s:.1f} s; "
        f"{repeats} loads each; the runs page shows {figures.shown_rows} rows. Server CPU: the server process's "
        "CPU time per load (mean), which a busy machine hardly changes, unlike the wall times"
    )
    return seeded + "\n" + table(header, body)


def _ratio(mlflow_value: float, scalelab_value: float) -> str:
    return f"{mlflow_value / scalelab_value:.1f}x" if scalelab_value > 0 else "-"


def side_by_side(ours: WorkloadFigures, theirs: dict[str, Any]) -> str:
    latest_ms = statistics.median(theirs["latest_s"]) * 1000
    histories_ms = statistics.median(theirs["histories_s"]) * 1000
    rows = [
        (f"create {ours.runs:,} runs, s", f"{ours.create_s:.1f}", f"{theirs['create_s']:.1f}",
         _ratio(theirs["create_s"], ours.create_s)),
        (f"log {ours.records:,} records, s", f"{ours.log_s:.1f}", f"{theirs['log_s']:.1f}",
         _ratio(theirs["log_s"], ours.log_s)),
        (f"query {ours.queried} runs' latest figures, median ms", f"{ours.latest.median_ms:.1f}", f"{latest_ms:.1f}",
         _ratio(latest_ms, ours.latest.median_ms)),
        (f"query {ours.queried} runs with histories, median ms", f"{ours.histories.median_ms:.1f}",
         f"{histories_ms:.1f}", _ratio(histories_ms, ours.histories.median_ms)),
    ]  # fmt: skip
    header = ("same workload", "scalelab", f"MLflow {theirs['mlflow_version']}", "MLflow/scalelab")
    note = (
        f"MLflow stores the records as {theirs['metric_rows']:,} metric values (one row per key); scalelab's "
        "queries go over HTTP, MLflow's are in-process calls of its tracking store"
    )
    return table(header, rows) + "\n" + note


def scalelab_only(ours: WorkloadFigures) -> str:
    rows = [
        (f"create {ours.runs:,} runs, s", f"{ours.create_s:.1f}"),
        (f"log {ours.records:,} records, s", f"{ours.log_s:.1f}"),
        (f"query {ours.queried} runs' latest figures, median ms", f"{ours.latest.median_ms:.1f}"),
        (f"query {ours.queried} runs with histories, median ms", f"{ours.histories.median_ms:.1f}"),
    ]
    return table(("same workload", "scalelab"), rows) + "\n" + "MLflow: left out (--no-mlflow)"


def _progress(message: str) -> None:
    print(f"benches.web: {message}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    runs, points = sizes(args.scale)
    workload = plan(args.runs or runs, points if args.points is None else args.points)
    if workload.run_count < DASHBOARD_RUNS:
        print(f"benches.web: at least {DASHBOARD_RUNS} runs are needed for the dashboard's experiment",
              file=sys.stderr)  # fmt: skip
        return 2
    try:
        with work_dir(args.tmp) as work:
            print(f"web pages and queries under a large history ({load_average()})", flush=True)
            if args.only != "workload":
                pages = measure_pages(work / "pages", workload, args.repeats)
                # Printed at once: the rest takes much longer at full size.
                print(page_report(pages, args.repeats), flush=True)
            if args.only == "pages":
                return 0
            ours = scalelab_workload(work / "scalelab", workload, args.repeats)
            theirs = None
            if not args.no_mlflow:
                theirs = (
                    read_mlflow_results(args.mlflow_results, workload)
                    if args.mlflow_results
                    else mlflow_side(work / "mlflow", workload, args.repeats, args.mlflow_venv)
                )
    except (BenchError, ServerDidNotStart, subprocess.CalledProcessError) as exc:
        print(f"benches.web: {exc}", file=sys.stderr)
        return 1
    print()
    print(side_by_side(ours, theirs) if theirs is not None else scalelab_only(ours))
    return 0


if __name__ == "__main__":
    sys.exit(main())
