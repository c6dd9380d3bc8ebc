"""Memory and time of the largest import (issue 30): logs of step records as the worker prints them, as many files of
the largest size as the request allows (contract.limits), imported in-process into a new SQLite database by the
service the API calls. Figures: wall and CPU seconds of the import, the most memory it held at once beyond the
request it was given (tracemalloc), and the process's peak resident set (the request included).

`--tree DIR` measures another checkout's code the same way (say, main before imports were streamed), so that
`python -m benches.imports --tree OLD` prints the two side by side. Each is measured in a process of its own.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def measure(directory: Path, files: int, file_chars: int) -> dict[str, float]:
    """One import of `files` logs of `file_chars` characters each into a database in `directory`."""
    from sqlmodel import Session

    from contract.records import StepRecord, format_record
    from server.config import Settings
    from server.db import init_db, make_engine
    from server.models import ImportCreate, ImportFile, User
    from server.services.imports import import_logs

    settings = Settings(database_url=f"sqlite:///{directory / 'db.sqlite'}", runs_dir=directory / "runs")
    settings.runs_dir.mkdir()
    engine = make_engine(settings.database_url)
    init_db(engine)
    line = format_record(StepRecord(epoch=1, step=999_999, train_loss=0.5)) + "\n"
    content = "".join(line.replace("999999", str(step + 1)) for step in range(file_chars // len(line)))
    request = ImportCreate(name="largest", files=[ImportFile(name=f"f{i}.out", content=content) for i in range(files)])
    with Session(engine) as session:
        user = User(name="bench")
        session.add(user)
        session.commit()
        # Main before issue 30 took the owner's name; the streamed import takes the user (its quota is theirs).
        takes_user = "User" in str(inspect.signature(import_logs).parameters["user" if "user" in
                                   inspect.signature(import_logs).parameters else "owner"].annotation)  # fmt: skip
        owner = user if takes_user else user.name
        tracemalloc.start()
        wall, cpu = time.perf_counter(), time.process_time()
        import_logs(session, request, settings, owner)  # type: ignore[arg-type]
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"records": files * (file_chars // len(line)), "wall_s": wall, "cpu_s": cpu, "peak_mib": peak / 2**20,
            "max_rss_mib": rss / 2**20}  # fmt: skip


def _measured_in(tree: Path, files: int, file_chars: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    command = [sys.executable, str(Path(__file__).resolve()), "--measure", str(files), str(file_chars)]
    done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, check=False, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"measuring {tree} failed:\n{done.stderr[-3000:]}")
    figures: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", type=Path, action="append", default=[], help="another checkout to measure too")
    parser.add_argument("--scale", type=float, default=1.0, help="a fraction of the largest import (for a quick look)")
    parser.add_argument("--measure", nargs=2, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure:
        with tempfile.TemporaryDirectory() as scratch:
            print(json.dumps(measure(Path(scratch), *args.measure)))
        return 0
    from contract.limits import MAX_IMPORT_CHARS, MAX_IMPORT_FILE_CHARS

    file_chars = int(MAX_IMPORT_FILE_CHARS * args.scale)
    files = MAX_IMPORT_CHARS // MAX_IMPORT_FILE_CHARS
    print(f"import of {files} logs of {file_chars / 2**20:.1f} MiB each (SQLite, in-process)")
    print(f"{'code':<40} {'records':>9} {'wall s':>8} {'CPU s':>8} {'peak MiB':>9} {'max RSS MiB':>12}")
    for tree in [REPO, *args.tree]:
        got = _measured_in(tree.resolve(), files, file_chars)
        print(f"{str(tree)[-40:]:<40} {got['records']:>9.0f} {got['wall_s']:>8.1f} {got['cpu_s']:>8.1f} "
              f"{got['peak_mib']:>9.0f} {got['max_rss_mib']:>12.0f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
