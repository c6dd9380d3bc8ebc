"""The web benchmark's workload against MLflow's tracking store on SQLite, timed; run in MLflow's own environment.

Only the standard library, MLflow and benches.web_workload are imported: this runs under the Python of the
environment the benchmark made for MLflow, never the project's. The figures go to stdout as one JSON object;
progress goes to stderr.

Each record becomes what MLflow stores for it: its numbers as metrics at its step (the step's or the epoch's
number), its words as tags; a run's spec becomes its parameters. Logging uses log_batch, one call per run (MLflow's
fast path); the 100-run query is one search_runs, and the histories one get_metric_history per run and key.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from benches.web_workload import plan, records

# The keys of a history point on scalelab's dashboard (its EpochPoint); MLflow is asked for the same.
HISTORY_KEYS = ("train_loss", "val_loss", "val_accuracy", "epoch_time_s")
MAX_METRICS_PER_BATCH = 1000  # MLflow's limit for one log_batch
NOT_METRICS = frozenset({"v", "kind", "epoch", "step"})
PROGRESS_EVERY = 1000  # runs: a full-size run takes the better part of an hour


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benches.web_mlflow", description=__doc__)
    parser.add_argument("--runs", type=int, required=True, help="runs to create")
    parser.add_argument("--points", type=int, required=True, help="metric records to log, over all runs")
    parser.add_argument("--seed", type=int, default=0, help="the workload's seed (the same as scalelab's side)")
    parser.add_argument("--repeats", type=int, default=20, help="times each query is measured")
    parser.add_argument("--db", type=Path, required=True, help="the SQLite file to create (must not exist)")
    return parser


def _progress(message: str) -> None:
    print(f"benches.web_mlflow: {message}", file=sys.stderr, flush=True)


def _mlflow_entries(record: dict[str, Any], timestamp_ms: int) -> tuple[list[Any], list[Any]]:
    """(metrics, tags) MLflow stores for one record."""
    # Imported here: MLflow exists only in its own environment, which runs this module.
    from mlflow.entities import Metric, RunTag  # type: ignore[import-not-found,unused-ignore]

    key_prefix = "step_" if record["kind"] == "step" else ""
    step = record.get("step", record.get("epoch", 0))
    metrics, tags = [], []
    for key, value in record.items():
        if key in NOT_METRICS:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            tags.append(RunTag(f"{record['kind']}.{key}", str(value)))
        else:
            metrics.append(Metric(key_prefix + key, float(value), timestamp_ms, step))
    return metrics, tags


def measure(args: argparse.Namespace) -> dict[str, Any]:
    import mlflow  # type: ignore[import-not-found,unused-ignore]
    from mlflow.entities import Param, RunStatus  # type: ignore[import-not-found,unused-ignore]
    from mlflow.tracking import MlflowClient  # type: ignore[import-not-found,unused-ignore]

    workload = plan(args.runs, args.points, args.seed)
    client = MlflowClient(tracking_uri=f"sqlite:///{args.db}")
    client.search_experiments()  # creates the database (MLflow's migrations): not part of the workload
    _progress(f"MLflow {mlflow.__version__}: creating {workload.run_count} runs")

    started = time.perf_counter()
    run_ids: dict[tuple[int, int], str] = {}
    experiment_ids = []
    for experiment in workload.experiments:
        experiment_id = client.create_experiment(f"{experiment.index}: {experiment.name}")
        experiment_ids.append(experiment_id)
        for run in experiment.runs:
            created = client.create_run(
                experiment_id, tags={"mlflow.user": run.owner, "state": run.state}, run_name=f"{run.position}"
            )
            params = [Param(key, str(value)) for key, value in run.spec.items()]
            client.log_batch(created.info.run_id, params=params)
            run_ids[(run.experiment, run.position)] = created.info.run_id
            if len(run_ids) % PROGRESS_EVERY == 0:
                _progress(f"{len(run_ids)} runs created after {time.perf_counter() - started:.0f} s")
    create_s = time.perf_counter() - started
    _progress(f"created in {create_s:.1f} s; logging {workload.point_count} records")

    started = time.perf_counter()
    metric_rows = 0
    timestamp_ms = int(time.time() * 1000)
    for done, run in enumerate(workload.runs, start=1):
        run_id = run_ids[(run.experiment, run.position)]
        metrics: list[Any] = []
        tags: list[Any] = []
        for record in records(run):
            found_metrics, found_tags = _mlflow_entries(record, timestamp_ms)
            metrics += found_metrics
            tags += found_tags
        # A tag set again replaces the earlier value, as the latest record supersedes: keep the last of each key.
        latest_tags = list({tag.key: tag for tag in tags}.values())
        for start in range(0, max(len(metrics), 1), MAX_METRICS_PER_BATCH):
            chunk = metrics[start : start + MAX_METRICS_PER_BATCH]
            client.log_batch(run_id, metrics=chunk, tags=latest_tags if start == 0 else [])
        metric_rows += len(metrics)
        if run.final:
            ended = {"completed": RunStatus.FINISHED, "failed": RunStatus.FAILED, "out_of_memory": RunStatus.FAILED}
            client.set_terminated(run_id, RunStatus.to_string(ended.get(run.state, RunStatus.KILLED)))
        if done % PROGRESS_EVERY == 0:
            _progress(f"{done} runs' records logged after {time.perf_counter() - started:.0f} s")
    log_s = time.perf_counter() - started
    _progress(f"logged {metric_rows} metric values in {log_s:.1f} s; querying")

    queried = [run_ids[key] for key in workload.queried()]
    id_list = ", ".join(f"'{run_id}'" for run_id in queried)
    latest_s, histories_s = [], []
    for _ in range(args.repeats):
        started = time.perf_counter()
        found = client.search_runs(experiment_ids, filter_string=f"attributes.run_id IN ({id_list})", max_results=1000)
        latest_s.append(time.perf_counter() - started)
        if len(found) != len(queried):
            raise RuntimeError(f"search_runs found {len(found)} of the {len(queried)} runs asked for")
        started = time.perf_counter()
        client.search_runs(experiment_ids, filter_string=f"attributes.run_id IN ({id_list})", max_results=1000)
        points = sum(len(client.get_metric_history(run_id, key)) for run_id in queried for key in HISTORY_KEYS)
        histories_s.append(time.perf_counter() - started)
    _progress(f"queries: latest median {statistics.median(latest_s) * 1000:.0f} ms, "
              f"with histories {statistics.median(histories_s) * 1000:.0f} ms ({points} history points)")  # fmt: skip
    return {
        "mlflow_version": mlflow.__version__,
        "runs": workload.run_count,
        "points": workload.point_count,
        "seed": args.seed,
        "metric_rows": metric_rows,
        "create_s": create_s,
        "log_s": log_s,
        "latest_s": latest_s,
        "histories_s": histories_s,
        "history_points": points,
    }


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.db.exists():
        print(f"benches.web_mlflow: {args.db} exists: give a new file", file=sys.stderr)
        return 2
    print(json.dumps(measure(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
