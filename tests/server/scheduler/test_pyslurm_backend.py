"""The pyslurm backend: when it may be used, judged against the real cluster's Slurm release.

The backend itself needs a pyslurm built for this cluster's Slurm release, 23.02 or newer; where there is none
(the package registry has pyslurm 25.11 only, Debian's Slurm is 22.05, 24.11 or 26.05), its tests skip and say why.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from contract.states import RunState
from server.scheduler import Job, SchedulerError
from server.scheduler.pyslurm_backend import (
    PyslurmScheduler,
    cluster_slurm_version,
    pyslurm_import_error,
    pyslurm_release,
    pyslurm_usable,
    release_mismatch,
    slurm_release,
    unsupported_pyslurm,
)
from tests.factories import batch_script, wait_final

PYSLURM_INSTALLED = importlib.util.find_spec("pyslurm") is not None
no_pyslurm = pytest.mark.skipif(PYSLURM_INSTALLED, reason="pyslurm is installed in this Python")


@pytest.mark.parametrize(
    ("output", "release"),
    [
        ("slurm 22.05.8", (22, 5)),
        ("slurm-wlm 22.05.8\n", (22, 5)),  # Debian's build names itself so
        ("slurm 25.11.0", (25, 11)),
        ("slurm 23.11.0-0rc1", (23, 11)),
        ("sinfo: error: something else", None),
        ("", None),
    ],
)
def test_slurm_release_from_version_output(output, release):
    assert slurm_release(output) == release


@pytest.mark.parametrize(
    ("version", "release"),
    [("25.11.2", (25, 11)), ("22.5.1", (22, 5)), ("24.11.0", (24, 11)), ("18.8.1.1", (18, 8)), ("dev", None)],
)
def test_pyslurm_release_is_the_slurm_release_it_is_built_for(version, release):
    assert pyslurm_release(version) == release


def test_the_mismatch_names_both_releases_and_the_pyslurm_to_build():
    assert release_mismatch("25.11.2", "slurm-wlm 22.05.8") == (
        "pyslurm 25.11 does not match Slurm 22.05 on this cluster: "
        "build pyslurm 22.5 against this cluster's Slurm headers"
    )
    assert release_mismatch("22.5.1", "slurm 22.05.8") is None


@pytest.mark.parametrize("version", ["23.2.2", "23.11.0", "25.11.2", "26.5.0"])
def test_pyslurm_with_the_job_api_used_here_is_supported(version):
    assert unsupported_pyslurm(version) is None


def test_pyslurm_before_the_job_api_used_here_is_refused():
    # 22.5.x, the only pyslurm for Slurm 22.05, names the filter JobSearchFilter and misses older jobs by id.
    assert unsupported_pyslurm("22.5.2") == (
        "pyslurm 22.5.2 predates the job API this backend uses (pyslurm 23.2.2 or newer, "
        "so Slurm 23.02 or newer): use the slurm backend"
    )
    assert unsupported_pyslurm("23.2.1") is not None
    assert unsupported_pyslurm("dev") == "cannot read the Slurm release of pyslurm 'dev'"


def test_unreadable_versions_are_reasons_too():
    assert release_mismatch("25.11.2", "command not found") == (
        "cannot read the cluster's Slurm release from 'command not found'"
    )
    assert release_mismatch("main", "slurm 25.11.0") == "cannot read the Slurm release of pyslurm 'main'"


def test_the_real_cluster_release_is_read(slurm):
    scontrol = subprocess.run(["scontrol", "--version"], capture_output=True, text=True, check=True).stdout
    release = slurm_release(cluster_slurm_version())
    assert release is not None
    assert release == slurm_release(scontrol)


def test_a_pyslurm_for_another_release_is_refused_with_the_one_to_build(slurm):
    output = cluster_slurm_version()
    major, minor = slurm_release(output) or (0, 0)
    other = "24.11.0" if (major, minor) == (25, 11) else "25.11.2"
    other_release = ".".join(other.split(".")[:2])
    assert release_mismatch(other, output) == (
        f"pyslurm {other_release} does not match Slurm {major}.{minor:02d} on this cluster: "
        f"build pyslurm {major}.{minor} against this cluster's Slurm headers"
    )


def test_a_pyslurm_of_the_cluster_release_matches(slurm):
    output = cluster_slurm_version()
    major, minor = slurm_release(output) or (0, 0)
    assert release_mismatch(f"{major}.{minor}.0", output) is None


def test_a_host_without_slurm_commands_cannot_tell_the_release(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SchedulerError, match="sinfo is not on PATH"):
        cluster_slurm_version()


@no_pyslurm
def test_without_pyslurm_the_reason_says_it_is_not_installed():
    usable, reason = pyslurm_usable()
    assert not usable
    assert reason == f"pyslurm is not installed in this Python ({sys.executable})"


@no_pyslurm
def test_the_import_check_reports_the_import_error():
    assert pyslurm_import_error() == "ModuleNotFoundError: No module named 'pyslurm'"


def test_the_backend_module_imports_without_pyslurm_and_never_imports_it():
    """Block pyslurm (as on a host without it), import the backend, and ask for a scheduler."""
    code = (
        "import sys; sys.modules['pyslurm'] = None\n"
        "import server.main\n"
        "from server.scheduler import SchedulerError\n"
        "from server.scheduler.pyslurm_backend import PyslurmScheduler\n"
        "try:\n"
        "    PyslurmScheduler()\n"
        "except SchedulerError as err:\n"
        "    print(err)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("pyslurm cannot be imported: import of pyslurm halted")

    code = "import sys, server.scheduler.pyslurm_backend; assert 'pyslurm' not in sys.modules"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


# The backend against the real cluster, where a pyslurm of its release is installed.


@pytest.fixture(scope="module")
def pyslurm_scheduler() -> PyslurmScheduler:
    usable, reason = pyslurm_usable()
    if not usable:
        pytest.skip(f"the pyslurm backend cannot run here: {reason}")
    return PyslurmScheduler()


@pytest.mark.slurm
def test_pyslurm_follows_many_jobs_to_their_ends(slurm, pyslurm_scheduler, tmp_path):
    done = pyslurm_scheduler.submit(batch_script(tmp_path, "srun true", tasks=2), tmp_path)
    failed = pyslurm_scheduler.submit(batch_script(tmp_path, "exit 3"), tmp_path)
    statuses = wait_final(pyslurm_scheduler, [done, failed])
    assert (statuses[done].state, statuses[done].exit_code) == (RunState.completed, "0:0")
    assert (statuses[failed].state, statuses[failed].exit_code) == (RunState.failed, "3:0")
    assert (tmp_path / "out.log").exists()  # the working directory put the output in the run directory


@pytest.mark.slurm
def test_pyslurm_cancels(slurm, pyslurm_scheduler, tmp_path):
    job = pyslurm_scheduler.submit(batch_script(tmp_path, "sleep 120"), tmp_path)
    pyslurm_scheduler.cancel(job)
    assert wait_final(pyslurm_scheduler, [job])[job].state is RunState.cancelled


@pytest.mark.slurm
def test_pyslurm_refusal_is_a_scheduler_error(slurm, pyslurm_scheduler, tmp_path):
    with pytest.raises(SchedulerError, match="Slurm refused the job"):
        pyslurm_scheduler.submit(batch_script(tmp_path, "true", tasks=64), tmp_path)


@pytest.mark.slurm
def test_pyslurm_leaves_unknown_jobs_out(slurm, pyslurm_scheduler):
    assert pyslurm_scheduler.poll([Job("999999"), Job("local-abc")]) == {}
    assert pyslurm_scheduler.poll([]) == {}
