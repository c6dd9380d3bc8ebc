"""Careless and hostile programs on the real local Slurm, beside another user's ordinary run, through a real server
with sign-in on: a FIFO as output.log, a link to /dev/zero, output.log swapped between a file and a link to a file
outside the run's directory, a truncated output, and (in a server of their own) each poison metric line.

Throughout, /healthz answers (polled from a thread, every failure kept): a reader that blocks the server on a FIFO or
drowns it in /dev/zero never answers, so the bound is a generous one, HEALTH_BOUND_S, that a busy CI machine with two
cores meets (a bound of one second was missed there, under the other tests' load); the ordinary run's records
are all stored within a few monitor cycles of its end; no byte of a file outside a run's directory is ever served;
and each hostile run ends with a message saying what was wrong. Both users are admins: where only admins may run
programs (every job running as the service account), these still run.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from benches.server_process import REPO, running_server
from tests.e2e.runs import FINAL

pytestmark = pytest.mark.slurm

POLL_S = 1
# How long /healthz may take to answer: a blocked server never does; a loaded machine now and then takes over a second.
HEALTH_BOUND_S = 5
# The marker of the file outside every run's directory that the swapping job links to.
MARK = "bytes-of-a-file-outside-the-run-directory"
EPOCHS = 20
# How long a run may take to end and be read: generous (Slurm on a busy machine); a hung monitor never gets there.
TIMEOUT_S = 300

# Each program finds its run's directory in SCALELAB_RUN_DIR, as every program does.
PROGRAMS = {
    "ordinary.py": f"""
        import time
        for epoch in range(1, {EPOCHS} + 1):
            print(f"[METRIC] epoch={{epoch}} loss={{1 / epoch:.4f}} time=0.2 throughput=100", flush=True)
            time.sleep(0.2)
    """,
    "fifo.py": """
        import os
        out = os.path.join(os.environ["SCALELAB_RUN_DIR"], "output.log")
        print("[METRIC] epoch=1 loss=0.5 time=0.1", flush=True)
        os.remove(out)
        os.mkfifo(out)
    """,
    "zero.py": """
        import os
        out = os.path.join(os.environ["SCALELAB_RUN_DIR"], "output.log")
        os.remove(out)
        os.symlink("/dev/zero", out)
    """,
    "swap.py": """
        import os, sys, time
        run_dir = os.environ["SCALELAB_RUN_DIR"]
        out, tmp, link = (os.path.join(run_dir, name) for name in ("output.log", "file.tmp", "link.tmp"))
        secret = sys.argv[1]
        end = time.monotonic() + 25
        while time.monotonic() < end:
            with open(tmp, "w") as handle:
                handle.write("[METRIC] epoch=1 loss=0.5 time=0.1\\n")
            os.replace(tmp, out)
            os.symlink(secret, link)
            os.replace(link, out)
    """,
    "truncate.py": """
        import os, time
        out = os.path.join(os.environ["SCALELAB_RUN_DIR"], "output.log")
        for epoch in range(1, 31):
            print(f"[METRIC] epoch={epoch} loss={1 / epoch:.4f} time=0.1 throughput=100", flush=True)
        time.sleep(6)  # the monitor reads them
        os.truncate(out, 0)
        print("[METRIC] epoch=31 loss=0.01 time=0.1", flush=True)
        time.sleep(4)
    """,
    # The poison lines: what Python's json.dumps writes for NaN, nesting deeper than a parser's recursion, and an
    # integer no 64-bit column holds.
    "poison.py": """
        import sys
        record = '"v":1,"kind":"epoch","epoch":1,"train_loss":1.0,"val_loss":1.0,"val_accuracy":0.5,'
        lines = {
            "nan": '[METRIC] {' + record + '"epoch_time_s":NaN,"samples_per_s":1.0,"peak_memory_bytes":1}',
            "deep": '[METRIC] {' + record + '"epoch_time_s":1.0,"samples_per_s":1.0,"peak_memory_bytes":'
            + "[" * 100000 + "]" * 100000 + '}',
            "bigint": '[METRIC] {' + record + '"epoch_time_s":1.0,"samples_per_s":1.0,"peak_memory_bytes":'
            + str(2**64) + '}',
        }
        print(lines[sys.argv[1]], flush=True)
        print("[METRIC] epoch=2 loss=0.5 time=0.1", flush=True)
    """,
}

# What each hostile run's message says was wrong.
FILE_CASES = {
    "fifo": (["python", "fifo.py"], "it is a FIFO"),
    "zero": (["python", "zero.py"], "it is a link"),
    "swap": (["python", "swap.py", "SECRET"], "stopped reading this run's output"),
    "truncate": (["python", "truncate.py"], "was truncated to"),
}
POISON = ("nan", "deep", "bigint")
# What the run says of its first unreadable line, per poison line (contract/records.py's reasons).
POISON_REASON = {"nan": "not a finite number", "deep": "nested more than", "bigint": "beyond 64 bits"}


@dataclass
class Instance:
    url: str
    work: Path
    admin: dict[str, str]
    alice: dict[str, str]
    runs: dict[str, str] = field(default_factory=dict)  # case -> run id
    health_failures: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def get(self, path: str, **options: Any) -> Any:
        response = httpx.get(f"{self.url}{path}", headers=self.admin, timeout=30, **options)
        response.raise_for_status()
        return response.json()

    def submit(self, name: str, command: list[str], headers: dict[str, str]) -> str:
        body = {
            "name": name,
            "base": {"kind": "program", "gpus": 1, "program": {"command": command, "workdir": str(self.work / "p")}},
            "resources": {"nodes": 1, "time_limit": "00:05:00"},
        }
        response = httpx.post(f"{self.url}/api/experiments", json=body, headers=headers, timeout=120)
        assert response.status_code == 201, response.text
        return str(response.json()["runs"][0]["id"])

    def ended(self, run_id: str, timeout_s: float = TIMEOUT_S) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            run: dict[str, Any] = self.get(f"/api/runs/{run_id}")
            if run["state"] in FINAL and run["ingest_done"]:
                return run
            time.sleep(POLL_S)
        raise AssertionError(f"run {run_id} did not end and get read: {run}\n{self.log()[-3000:]}")

    def log(self) -> str:
        return (self.work / "server.log").read_text()


def poll_health(instance: Instance) -> None:
    """/healthz, every 0.2 s until told to stop: each answer that did not come within HEALTH_BOUND_S is kept."""
    while not instance.stop.is_set():
        started = time.monotonic()
        try:
            status = httpx.get(f"{instance.url}/healthz", timeout=HEALTH_BOUND_S).status_code
            if status != 200:
                instance.health_failures.append(f"{status} at {started:.1f}")
        except httpx.HTTPError as exc:
            instance.health_failures.append(f"{type(exc).__name__} at {started:.1f}")
        instance.stop.wait(0.2)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@contextlib.contextmanager
def instance(work: Path) -> Iterator[Instance]:
    """A server on the real Slurm with sign-in on, two admins (its first, and alice), and the programs in a folder
    where programs may run from; /healthz polled from the start."""
    folder = work / "p"
    folder.mkdir()
    for name, text in PROGRAMS.items():
        (folder / name).write_text(textwrap.dedent(text))
    env = {"SCALELAB_AUTH": "true", "SCALELAB_POLL_INTERVAL_S": str(POLL_S), "SCALELAB_PROGRAM_ROOTS": str(folder)}
    with running_server(work, "slurm", env) as url:
        first = re.findall(r"sl_[A-Za-z0-9_-]{40,}", (work / "server.log").read_text())[0]
        added = subprocess.run(
            [sys.executable, "-m", "server", "users", "add", "alice", "--admin"],
            cwd=REPO,
            env={**os.environ, "SCALELAB_DATABASE_URL": f"sqlite:///{work / 'scalelab.db'}"},
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        alice = re.findall(r"sl_[A-Za-z0-9_-]{40,}", added.stdout)[0]
        found = Instance(url, work, bearer(first), bearer(alice))
        poller = threading.Thread(target=poll_health, args=(found,), daemon=True)
        poller.start()
        try:
            yield found
        finally:
            found.stop.set()
            poller.join(10)


@pytest.fixture(scope="module")
def files(slurm: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Instance]:
    """The hostile file programs (the admin's) and alice's ordinary run, submitted at once."""
    work = tmp_path_factory.mktemp("hostile-files")
    secret = work / "shadow"
    secret.write_text(MARK * 100)
    with instance(work) as found:
        found.runs["ordinary"] = found.submit("ordinary", ["python", "ordinary.py"], found.alice)
        for case, (command, _) in FILE_CASES.items():
            words = [str(secret) if word == "SECRET" else word for word in command]
            found.runs[case] = found.submit(case, words, found.admin)
        yield found


def test_the_swapped_output_never_serves_the_file_outside_the_run_directory(files: Instance):
    """The log of the swapping run, read again and again while the job swaps: never a byte of the linked file."""
    run_id = files.runs["swap"]
    reads = 0
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        response = httpx.get(f"{files.url}/api/runs/{run_id}/log", headers=files.admin, timeout=30)
        assert response.status_code in (200, 404), response.text
        assert MARK not in response.text
        reads += 1
        if files.get(f"/api/runs/{run_id}")["state"] in FINAL:
            break
    else:
        raise AssertionError(f"run {run_id} did not end\n{files.log()[-3000:]}")
    assert reads > 10


@pytest.mark.parametrize("case", list(FILE_CASES))
def test_each_hostile_run_ends_with_a_message_saying_what_was_wrong(files: Instance, case: str):
    run = files.ended(files.runs[case])
    assert FILE_CASES[case][1] in (run["message"] or ""), run
    events = files.get(f"/api/runs/{run['id']}/events")["data"]
    assert [event["kind"] for event in events].count("output_refused") == 1, events
    text = httpx.get(f"{files.url}/api/runs/{run['id']}/log", headers=files.admin, timeout=30).text
    assert MARK not in text and "\\u0000" not in text


def test_the_ordinary_run_is_read_whole_within_a_few_cycles_of_its_end(files: Instance):
    run_id = files.runs["ordinary"]
    deadline = time.monotonic() + TIMEOUT_S
    while files.get(f"/api/runs/{run_id}")["state"] not in FINAL:
        assert time.monotonic() < deadline, files.log()[-3000:]
        time.sleep(0.5)
    run = files.ended(run_id, timeout_s=10 * POLL_S)  # a few monitor cycles, with room for a slow one
    assert run["state"] == "completed" and run["owner"] == "alice", run
    epochs = [record for record in files.get(f"/api/runs/{run_id}/metrics")["data"] if record["kind"] == "epoch"]
    assert [record["epoch"] for record in epochs] == list(range(1, EPOCHS + 1))


def test_the_truncated_run_keeps_what_was_read_before(files: Instance):
    run = files.ended(files.runs["truncate"])
    data = files.get(f"/api/runs/{run['id']}/metrics")["data"]
    epochs = [record["epoch"] for record in data if record["kind"] == "epoch"]
    assert epochs[:30] == list(range(1, 31)) and 31 not in epochs


def test_healthz_answered_throughout(files: Instance):
    for run_id in files.runs.values():
        files.ended(run_id)
    files.stop.set()
    assert files.health_failures == []


# ---- the poison lines: needs ingestion that validates each record and isolates each run (hj-poison) -------------


@pytest.fixture(scope="module")
def poison(slurm: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Instance]:
    with instance(tmp_path_factory.mktemp("hostile-poison")) as found:
        found.runs["ordinary"] = found.submit("ordinary", ["python", "ordinary.py"], found.alice)
        for case in POISON:
            found.runs[case] = found.submit(case, ["python", "poison.py", case], found.admin)
        yield found


@pytest.mark.parametrize("case", POISON)
def test_a_poison_line_is_a_parse_error_of_its_run_alone(poison: Instance, case: str):
    run = poison.ended(poison.runs[case], timeout_s=180)
    # The run says what was wrong with its output: the first unreadable line's place and reason.
    assert run["parse_errors"] >= 1 and POISON_REASON[case] in (run["first_parse_error"] or ""), run
    data = poison.get(f"/api/runs/{run['id']}/metrics")["data"]
    epochs = [record["epoch"] for record in data if record["kind"] == "epoch"]
    assert 2 in epochs  # the line after the poison one is read


def test_the_ordinary_run_beside_poison_lines_is_read_whole(poison: Instance):
    run = poison.ended(poison.runs["ordinary"], timeout_s=180)
    epochs = [record for record in poison.get(f"/api/runs/{run['id']}/metrics")["data"] if record["kind"] == "epoch"]
    assert len(epochs) == EPOCHS
    poison.stop.set()
    assert poison.health_failures == []
