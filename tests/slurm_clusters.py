"""The two kinds of local Slurm the real-Slurm suites run on, and what differs between them for a test.

scripts/test runs the suites on the host's Slurm 22.05 (scripts/slurm-local); scripts/test-slurm2411 runs the
release-sensitive ones again on Slurm 24.11 in containers (scripts/slurm-containers), naming that cluster in
SCALELAB_SLURM_CONTAINERS. A test that stops a node, or that checks something the releases print differently,
asks here rather than knowing either cluster.
"""

from __future__ import annotations

import functools
import os
import re
import signal
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The 24.11 cluster's name (its containers are named after it) when the suites run there; empty on the host's.
CONTAINERS = os.environ.get("SCALELAB_SLURM_CONTAINERS", "")


@functools.cache
def release() -> tuple[int, int]:
    """(major, minor) of the Slurm the commands on PATH talk to, from `sinfo -V` ("slurm 24.11.5")."""
    out = subprocess.run(["sinfo", "-V"], capture_output=True, text=True, timeout=30, check=True).stdout
    match = re.search(r"(\d+)\.(\d+)", out)
    assert match, f"sinfo -V printed no version: {out!r}"
    return int(match[1]), int(match[2])


def node_fail_exit_code() -> str:
    """sacct's ExitCode of a job whose node failed: 22.05 leaves it 0:0, 24.11 sets 1:0 (seen on both)."""
    return "1:0" if release() >= (24, 11) else "0:0"


def stop_node(node: str, slurmd_pid_file: str) -> None:
    """The node stops answering the controller at once: its slurmd killed (on 24.11, its whole container)."""
    if CONTAINERS:
        subprocess.run(["podman", "kill", f"{CONTAINERS}-{node}"], capture_output=True, timeout=60, check=True)
    else:
        os.kill(int(Path(slurmd_pid_file.replace("%n", node)).read_text()), signal.SIGKILL)


def restore_nodes() -> None:
    """Every node of the two-node cluster started again (the controller returns them to service by itself)."""
    command = ["slurm-containers", "up"] if CONTAINERS else ["slurm-local", "up", "--nodes", "2"]
    subprocess.run([str(ROOT / "scripts" / command[0]), *command[1:]], capture_output=True, timeout=180, check=True)
