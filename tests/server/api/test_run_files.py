"""GET /api/runs/{id}/log and /generations on a run whose job made its files hostile: a FIFO answers at once (a
clear 404) instead of holding a server thread forever, and a file swapped for a link to a secret while the log is
read, over and over, never serves a byte of the secret. Real FIFOs, links and renames."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading

import pytest

from contract.rundir import GENERATIONS_FILE, OUTPUT_FILE, STACKS_DIR, stacks_name
from server.errors import NotFound
from server.services import runs
from server.services.hangs import STACK_BYTES
from tests.factories import experiment_row, run_row, spec

HANG_S = 60
MARK = "bytes-of-another-users-file"


def answered_within_bound(client, path: str):
    """The answer to GET `path`, asked in a thread: fail (not hang) if none comes."""
    answers: list = []
    asking = threading.Thread(target=lambda: answers.append(client.get(path)), daemon=True)
    asking.start()
    asking.join(HANG_S)
    assert not asking.is_alive(), f"GET {path} hangs"
    return answers[0]


@pytest.mark.parametrize("name", [OUTPUT_FILE, GENERATIONS_FILE])
def test_a_fifo_is_refused_at_once(client, session, tmp_path, name):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    fifo = run_dir / name
    os.mkfifo(fifo)
    run = run_row(session, experiment_row(session), run_dir)
    if name == GENERATIONS_FILE:
        run.spec = {**run.spec, "kind": "inference"}  # all the generations route asks of it
        session.add(run)
        session.commit()
    path = f"/api/runs/{run.id}/" + ("log" if name == OUTPUT_FILE else "generations")
    try:
        response = answered_within_bound(client, path)
    finally:
        with contextlib.suppress(OSError):  # let go of a reader blocked on it
            os.close(os.open(fifo, os.O_RDWR | os.O_NONBLOCK))
    assert response.status_code == 404
    assert response.json()["detail"].endswith(f"{name} of this run is not a file in its directory: it is a FIFO")


# The job's side: its output a file, then a link, as fast as it goes, the two states about as long.
SWAPPER = """
import os, sys
run_dir, secret = sys.argv[1:]
output, file_, link = (os.path.join(run_dir, name) for name in ("output.log", "file.tmp", "link.tmp"))
with open(file_, "w") as handle:
    handle.write("the run's own output\\n")
while True:
    os.replace(file_, output)
    os.symlink(secret, link)
    os.replace(link, output)
    with open(file_, "w") as handle:
        handle.write("the run's own output\\n")
"""
# Reads through the endpoint, and many more through the service function it calls (a request costs a hundred
# times more): a check-then-open reader served the secret in about 3 of 10,000 reads here.
REQUESTS = 200
READS = 20_000


def test_an_output_swapped_with_a_link_never_serves_the_linked_file(client, session, tmp_path):
    """The job swaps its output between a file and a link to a file outside its directory as fast as it can, while
    the log is read again and again: each answer is the run's own output, or a 404."""
    secret = tmp_path / "shadow"
    secret.write_text(MARK * 10)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    output = run_dir / OUTPUT_FILE
    output.write_text("the run's own output\n")
    run = run_row(session, experiment_row(session), run_dir)
    # A process of its own, as the job is: it swaps while a request holds the interpreter.
    swapper = subprocess.Popen([sys.executable, "-c", SWAPPER, str(run_dir), str(secret)])
    statuses: set[int] = set()
    served: list[str] = []
    try:
        for _ in range(REQUESTS):
            response = client.get(f"/api/runs/{run.id}/log")
            statuses.add(response.status_code)
            assert MARK not in response.text
        for _ in range(READS):
            with contextlib.suppress(NotFound):
                served.append(runs.read_log(session, run.id, 0, 1024).text)
    finally:
        swapper.kill()
        swapper.wait(HANG_S)
    assert statuses == {200, 404}, "the swaps did not race the reads"
    assert served and not [text for text in served if MARK in text]


def test_stacks_read_only_each_ranks_own_regular_file_and_bounded(client, session, tmp_path):
    """GET /api/runs/{id}/stacks: a link to a secret, a FIFO and a directory in place of a rank's dump are each
    read as no stacks, at once; a huge dump is read from its end, the last dump alone."""
    secret = tmp_path / "secret.txt"
    secret.write_text(f'Current thread 0x1 (most recent call first):\n  File "{MARK}", line 1 in f\n')
    run_dir = tmp_path / "run"
    folder = run_dir / STACKS_DIR
    folder.mkdir(parents=True)
    dump = 'Thread 0x00000000000000aa (most recent call first):\n  File "/u/train.py", line 9 in main\n'
    (folder / stacks_name(0)).write_text("x" * (2 * STACK_BYTES) + "\n" + dump.replace("line 9", "line 8") + dump)
    (folder / stacks_name(1)).symlink_to(secret)
    os.mkfifo(folder / stacks_name(2))
    (folder / stacks_name(3)).mkdir()
    run = run_row(session, experiment_row(session), run_dir, run_spec=spec(gpus=5, global_batch_size=5))
    answer = answered_within_bound(client, f"/api/runs/{run.id}/stacks")
    assert answer.status_code == 200, answer.text
    ranks = answer.json()["ranks"]
    assert [rank["text"] for rank in ranks] == [dump, None, None, None, None]
    assert MARK not in answer.text
