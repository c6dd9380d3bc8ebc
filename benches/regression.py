"""What the regression test costs the server: a canary spec (1, 2 and 4 GPUs, 3 repeats each) imported as a
reference, an A/A run and N later experiments, through a real server on SQLite; prints the server's CPU time per
GET .../regression (first read: the bootstrap, 2000 resamples a point; then kept) and per GET .../history, beside
their wall time. No baseline in the issue: the figures are for the record.

    python -m benches.regression [--later 20] [--requests 20]
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Sequence
from pathlib import Path

import httpx

from benches.common import BenchError, table, work_dir
from benches.reads import cpu_ms_per_get
from benches.server_process import ServerDidNotStart, running_server
from benches.web import server_pid

POINTS = ((1, 4.0), (2, 2.1), (4, 1.2))
REPEATS = 3


def course_log(gpus: int, seconds: float) -> str:
    """A course script's output: five epochs, the first twice as slow (warm-up)."""
    lines = [f"[METRIC] gpus={gpus} world_size={gpus} strategy=ddp"]
    lines += [
        f"[METRIC] epoch={e} loss=0.5 val_loss=0.4 val_acc=0.8 time={seconds * (2 if e == 1 else 1)!r}"
        for e in range(1, 6)
    ]
    return "\n".join(lines) + "\n"


def imported(client: httpx.Client, name: str, factor: float, draw: random.Random) -> str:
    files = [
        {"name": f"ddp_{gpus}gpu_{repeat}.out", "content": course_log(gpus, base * factor * draw.gauss(1, 0.02))}
        for gpus, base in POINTS
        for repeat in range(REPEATS)
    ]
    created = client.post("/api/imports", json={"name": name, "files": files})
    if created.status_code != 201:
        raise BenchError(f"the import was refused ({created.status_code}): {created.text[:300]}")
    return str(created.json()["id"])


def run(work: Path, later: int, requests: int) -> int:
    draw = random.Random(0)  # noqa: S311 (synthetic timings, seeded so that they repeat)
    with running_server(work, "local") as url, httpx.Client(base_url=url, timeout=120) as client:
        reference = imported(client, "canary", 1.0, draw)
        twin = imported(client, "canary again", 1.0, draw)
        laters = [imported(client, f"canary {n}", 1.0 + 0.01 * n, draw) for n in range(later)]
        for path in (f"/api/experiments/{reference}/reference", f"/api/experiments/{twin}/aa"):
            if (answer := client.put(path)).status_code != 200:
                raise BenchError(f"PUT {path} answered {answer.status_code}: {answer.text[:300]}")
        pid = server_pid(url)
        regression = [f"/api/experiments/{experiment}/regression" for experiment in laters]
        first = cpu_ms_per_get(client, regression, pid, len(regression))
        again = cpu_ms_per_get(client, regression, pid, requests)
        history = cpu_ms_per_get(client, [f"/api/references/{reference}/history"], pid, max(requests // 4, 1))
        verdicts = [client.get(path).json()["verdict"] for path in regression]
    rows = [
        ["GET .../regression, first read", f"{first[0]:.1f}", f"{first[1]:.1f}"],
        ["GET .../regression, again", f"{again[0]:.1f}", f"{again[1]:.1f}"],
        [f"GET /api/references/{{id}}/history ({later + 2} entries)", f"{history[0]:.1f}", f"{history[1]:.1f}"],
    ]
    print(f"Regression test: {len(POINTS)} points of {REPEATS} repeats, a reference, an A/A run, {later} later")
    print(table(["request", "server CPU ms", "wall ms"], rows))
    counts = {verdict: verdicts.count(verdict) for verdict in sorted(set(verdicts))}
    print(f"verdicts of the later experiments (1 % slower each than the one before): {counts}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benches.regression", description=__doc__)
    parser.add_argument("--later", type=int, default=20, help="later experiments of the spec (default 20)")
    parser.add_argument("--requests", type=int, default=20, help="reads measured after the first (default 20)")
    parser.add_argument("--tmp", type=Path, help="where to put the server's database")
    args = parser.parse_args(argv)
    try:
        with work_dir(args.tmp) as work:
            return run(work, args.later, args.requests)
    except (BenchError, ServerDidNotStart, httpx.HTTPError) as exc:
        print(f"benches.regression: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
