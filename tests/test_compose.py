"""docker-compose.yml: the service with its volumes, and a development Slurm cluster built from containers/."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]

REPO = Path(__file__).resolve().parent.parent
COMPOSE = REPO / "docker-compose.yml"
SLURM_CONF = REPO / "containers" / "slurm" / "slurm.conf"
CLUSTER = {"munge", "mariadb", "slurmdbd", "slurmctld", "slurmd1", "slurmd2"}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return loaded


def test_the_service_and_the_cluster_are_there(compose):
    assert set(compose["services"]) == {"scalelab", *CLUSTER}


def test_every_service_is_built_from_containers(compose):
    for name, service in compose["services"].items():
        build = service["build"]
        assert build["context"] == "."
        assert (REPO / build["dockerfile"]).is_file(), name
        assert build["dockerfile"].startswith("containers/"), name


def test_every_service_has_a_shell_healthcheck(compose):
    # CMD-SHELL: the checks use pipes, and compose implementations agree on it.
    for name, service in compose["services"].items():
        check = service["healthcheck"]
        assert check["test"][0] == "CMD-SHELL" and len(check["test"]) == 2, name
        assert check["interval"] and check["timeout"] and check["retries"] >= 3, name


def test_the_service_keeps_its_database_and_runs_in_volumes_shared_with_the_nodes(compose):
    scalelab = compose["services"]["scalelab"]
    mounts = dict(volume.split(":", 1) for volume in scalelab["volumes"])
    env = scalelab["environment"]
    assert env["SCALELAB_SCHEDULER"] == "slurm"
    database = env["SCALELAB_DATABASE_URL"].removeprefix("sqlite:///")
    assert mounts["scalelab-db"] == str(Path(database).parent)
    assert mounts["runs"] == env["SCALELAB_RUNS_DIR"]
    # The nodes write each run's output where the service reads it: the same volume at the same path.
    for node in ("slurmd1", "slurmd2"):
        assert f"runs:{env['SCALELAB_RUNS_DIR']}" in compose["services"][node]["volumes"], node
    named = {volume.split(":", 1)[0] for service in compose["services"].values() for volume in service["volumes"]}
    assert {name for name in named if not name.startswith(".")} == set(compose["volumes"])
    assert {"scalelab-db", "runs", "database"} <= set(compose["volumes"])
    # Only this machine reaches the service.
    assert all(port.startswith("127.0.0.1:") for port in scalelab["ports"])


def test_slurmdbd_keeps_accounting_in_mariadb_and_each_daemon_has_its_role(compose):
    services = compose["services"]
    assert services["mariadb"]["volumes"] == ["database:/var/lib/mysql"]
    roles = {name: services[name]["command"] for name in CLUSTER}
    assert roles == {
        "munge": ["munged"],
        "mariadb": ["mariadb"],
        "slurmdbd": ["slurmdbd"],
        "slurmctld": ["slurmctld"],
        "slurmd1": ["slurmd"],
        "slurmd2": ["slurmd"],
    }
    assert "mariadb" in services["slurmdbd"]["depends_on"]


def test_slurm_conf_names_the_compose_hosts(compose):
    conf = SLURM_CONF.read_text()
    assert re.search(r"^SlurmctldHost=slurmctld$", conf, re.MULTILINE)
    assert re.search(r"^AccountingStorageHost=slurmdbd$", conf, re.MULTILINE)
    nodes = re.search(r"^NodeName=(\S+)", conf, re.MULTILINE)
    assert nodes is not None
    assert set(nodes.group(1).split(",")) == {"slurmd1", "slurmd2"}
    assert {compose["services"][name]["hostname"] for name in ("slurmctld", "slurmdbd", "slurmd1", "slurmd2")} == {
        "slurmctld",
        "slurmdbd",
        "slurmd1",
        "slurmd2",
    }
    dbd = (SLURM_CONF.parent / "slurmdbd.conf").read_text()
    assert re.search(r"^StorageHost=mariadb$", dbd, re.MULTILINE)


@pytest.mark.skipif(shutil.which("docker-compose") is None, reason="Debian's docker-compose validates offline")
def test_docker_compose_accepts_the_file():
    checked = subprocess.run(
        ["docker-compose", "-f", str(COMPOSE), "config", "-q"], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stderr
