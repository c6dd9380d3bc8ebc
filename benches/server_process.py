"""A real `python -m server` process on a free port, for the benchmarks and the tests that need one."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
# How long a server may take to answer its first request: a bound on a hang, not a speed target. Under a full test
# run on two cores (three test workers, Slurm jobs, browsers), a server whose log was still empty after 30 s
# was seen to fail a whole module's setup; started alone it answers in about 2 s.
STARTUP_TIMEOUT_S = 120.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ServerDidNotStart(RuntimeError):
    """The server exited or did not answer in time; the message holds its log."""


@contextlib.contextmanager
def running_server(
    work: Path,
    scheduler: str,
    env: Mapping[str, str] | None = None,
    *,
    installed: Path | None = None,
    user: str | None = None,
    args: Sequence[str] = (),
    monitor_apart: bool = False,
) -> Iterator[str]:
    """`python -m server` on a free port, with its own database and runs directory in `work`; yields its URL.

    `env` adds to or overrides the server's environment. Its log is work / "server.log"; a server started again
    in the same `work` finds the same database and runs, as after a restart, and logs after the first one.
    `installed` runs the scalelab installed there (scripts/shared-instance: PREFIX/app, PREFIX/venv) instead of
    this checkout, and `user` runs it as that Unix user (a service account), as a shared instance runs. `args`
    are added to its command line (e.g. --workers 2). `monitor_apart`: the web processes only serve, and
    `python -m server monitor` follows the runs in a process of its own (log: work / "monitor.log").
    """
    repo = installed / "app" if installed else REPO
    python = str(installed / "venv" / "bin" / "python") if installed else sys.executable
    port = free_port()
    full_env = {
        **os.environ,
        # This checkout's server, even where the Python has another one installed.
        "PYTHONPATH": os.pathsep.join(filter(None, [str(repo), os.environ.get("PYTHONPATH")])),
        "SCALELAB_DATABASE_URL": f"sqlite:///{work / 'scalelab.db'}",
        "SCALELAB_RUNS_DIR": str(work / "runs"),
        "SCALELAB_SCHEDULER": scheduler,
        "SCALELAB_WORKER_PYTHON": python,
        "SCALELAB_POLL_INTERVAL_S": "1",
        # A server on loopback for one user, as on a laptop; tests of sign-in turn authentication on.
        "SCALELAB_AUTH": "false",
        **(env or {}),
        **({"SCALELAB_MONITOR_IN_WEB": "false"} if monitor_apart else {}),
    }
    log_path = work / "server.log"
    url = f"http://127.0.0.1:{port}"
    as_user = ["runuser", "-u", user, "--"] if user else []
    with contextlib.ExitStack() as stack:
        log = stack.enter_context(log_path.open("a"))
        process = subprocess.Popen(
            [*as_user, python, "-m", "server", "--port", str(port), *args],
            cwd=repo,
            env=full_env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        stack.callback(_stop, process)
        if monitor_apart:
            monitor_log = stack.enter_context((work / "monitor.log").open("a"))
            monitor = subprocess.Popen(
                [*as_user, python, "-m", "server", "monitor"],
                cwd=repo,
                env=full_env,
                stdout=monitor_log,
                stderr=subprocess.STDOUT,
            )
            stack.callback(_stop, monitor)
        _wait_until_answering(url, process, log_path)
        yield url


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    process.wait(timeout=15)


def _wait_until_answering(url: str, process: subprocess.Popen[bytes], log_path: Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while True:
        try:
            httpx.get(f"{url}/openapi.json", timeout=10).raise_for_status()
            return
        except httpx.HTTPError:
            if process.poll() is not None:
                raise ServerDidNotStart(f"the server exited ({process.returncode}):\n{log_path.read_text()}") from None
            if time.monotonic() > deadline:
                raise ServerDidNotStart(
                    f"the server did not answer within {STARTUP_TIMEOUT_S:.0f} s:\n{log_path.read_text()}"
                ) from None
            time.sleep(0.2)
