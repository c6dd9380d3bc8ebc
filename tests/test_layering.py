"""The import rules of DESIGN.md, read from the source: which package may import which.

- contract imports neither server, worker nor client, nor torch: it is pydantic and the standard library only;
- server never imports torch or the worker (the contract is what they share);
- worker never imports server or client;
- client never imports server (it talks to the REST API), nor the Python API built on it;
- the Python API (scalelab) imports the client and the contract, never the server or the worker;
- services know nothing of HTTP (no FastAPI), and table models depend on no service;
- routers never import routers, and the pages never import routers (both go through the services);
- the container runtimes import nothing of the server: the profiles check their settings with them;
- the scheduler package imports neither the renderer nor the table models, and no scheduler backend imports another
  (what they share is the package's own: naming, commands, sacct);
- the database layer (db, db_bulk) depends on nothing above it;
- ingestion's counting rule is pure (nothing of the server or the database), and its reading of a run's output knows
  nothing of the database;
- flags are decided, and a comparison's series, fits and CSV made, from values already read: no database there.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ROUTERS = "server.api."
# The scheduler backends: each stands alone on what the scheduler package shares.
BACKENDS = frozenset(
    {
        "server.scheduler.slurm",
        "server.scheduler.slurmrestd",
        "server.scheduler.pyslurm_backend",
        "server.scheduler.local",
    }
)
# Modules of server/api/ that are not routers: what every router shares.
ROUTER_HELPERS = frozenset(
    {
        "server.api",
        "server.api.deps",
        "server.api.errors",
        "server.api.downloads",
        "server.api.limits",
        "server.api.prepared",
    }
)


@dataclass(frozen=True)
class Import:
    module: str  # the importing module, e.g. server.api.runs
    imported: str  # what it imports, e.g. server.services.submission
    where: str  # file:line


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, root: Path) -> Iterator[Import]:
    """Every import in the file, at any depth (inside functions and TYPE_CHECKING blocks too)."""
    module = module_name(path, root)
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        where = f"{path.relative_to(root)}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(module, alias.name, where)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the importing package
                package = module.split(".") if path.name == "__init__.py" else module.split(".")[: -node.level]
                base = ".".join(package + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            yield Import(module, base, where)
            # `from server.api import runs` imports the module server.api.runs
            for alias in node.names:
                yield Import(module, f"{base}.{alias.name}", where)


def all_imports(root: Path, packages: tuple[str, ...]) -> list[Import]:
    found: list[Import] = []
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            if "migrations" in path.parts:
                continue  # alembic's scripts import the table models by design
            found.extend(imports_of(path, root))
    return found


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _is_router(name: str) -> bool:
    return name.startswith(ROUTERS) and name.count(".") == 2 and name not in ROUTER_HELPERS


def _backend_of(name: str) -> str | None:
    return next((backend for backend in BACKENDS if _within(name, backend)), None)


# (who, what it must not import, why)
HTTP = ("fastapi", "starlette", "server.api", "server.web")
UPPER = ("server.services", "server.api", "server.web", "server.monitor")
DATABASE = ("sqlmodel", "sqlalchemy", "server.db")
RULES: list[tuple[str, tuple[str, ...], str]] = [
    (
        "contract",
        ("server", "worker", "client", "scalelab", "torch", "fastapi", "sqlmodel", "httpx"),
        "everyone imports it",
    ),
    ("server", ("torch", "worker", "client"), "no torch on login nodes; the contract is what it shares"),
    ("worker", ("server", "client"), "the worker runs on compute nodes from the contract alone"),
    ("client", ("server", "worker", "torch", "sqlmodel", "scalelab"), "the client talks to the REST API only"),
    (
        "scalelab",
        ("server", "worker", "torch", "sqlmodel"),
        "the Python API is built on the client (its config, its REST client): one client, over the REST API",
    ),
    ("server.services", HTTP, "services know nothing of HTTP"),
    ("server.models", UPPER, "tables depend on no domain code"),
    ("server.runstate", UPPER, "the state machine depends on nothing above it"),
    ("server.errors", ("server",), "every layer raises them: they import nothing of the server"),
    ("server.scheduler", (*UPPER, "server.render", "server.models"), "schedulers only talk to the scheduler"),
    ("server.render", UPPER, "rendering is a pure function"),
    ("server.runtimes", ("server",), "the profiles, the renderer and the services ask them; they ask nobody"),
    ("server.db", UPPER, "the database layer depends on nothing above it"),
    ("server.db_bulk", UPPER, "the database layer depends on nothing above it"),
    (
        "server.services.ingestion.counting",
        ("server", "sqlalchemy", "sqlmodel"),
        "the counting rule is pure: the migration and the tests replay it without a database",
    ),
    (
        "server.services.ingestion.reading",
        ("server.models", "server.db", "server.services", "server.api", "server.web", "sqlalchemy", "sqlmodel"),
        "reading a run's output knows nothing of the database: the caller stores what it read",
    ),
    (
        "server.runfiles",
        ("server", "sqlalchemy", "sqlmodel"),
        "every reader of a run's files opens them through it: it knows nothing of the server or the database",
    ),
    ("server.services.flags", DATABASE, "each flag is decided from plain values, tested without a database"),
    ("server.services.comparison.series", DATABASE, "series and fits are formed from rows already read"),
    ("server.services.comparison.export", DATABASE, "the CSV is written from rows already read"),
]


def violations(imports: list[Import]) -> list[str]:
    found: list[str] = []
    for item in imports:
        for who, forbidden, why in RULES:
            if _within(item.module, who) and any(_within(item.imported, bad) for bad in forbidden):
                found.append(f"{item.where}: {item.module} imports {item.imported} ({why})")
        if _is_router(item.module) and _is_router(item.imported) and item.imported != item.module:
            found.append(f"{item.where}: router {item.module} imports router {item.imported} (share a service)")
        if _backend_of(item.module) and _backend_of(item.imported) not in (None, _backend_of(item.module)):
            found.append(f"{item.where}: backend {item.module} imports backend {item.imported} (share a module)")
        if _within(item.module, "server.web") and _is_router(item.imported):
            found.append(f"{item.where}: page module {item.module} imports router {item.imported} (read services)")
    return sorted(set(found))


def test_the_project_keeps_its_import_rules():
    imports = all_imports(ROOT, ("contract", "server", "worker", "client", "scalelab"))
    assert len(imports) > 500, "the checker found too few imports to be reading the source"
    assert violations(imports) == []


@pytest.mark.parametrize(
    ("path", "source", "expected"),
    [
        ("contract/spec.py", "import torch\n", "contract.spec imports torch"),
        ("server/services/x.py", "def f():\n    from worker.train import train\n", "imports worker.train"),
        ("server/services/x.py", "from fastapi import HTTPException\n", "imports fastapi"),
        ("server/api/runs.py", "from server.api import experiments\n", "router server.api.runs imports router"),
        ("server/web/pages.py", "from server.api.runs import get_run\n", "page module server.web.pages imports router"),
        ("client/cli.py", "from server.models import Run\n", "client.cli imports server.models"),
        ("client/experiments.py", "from scalelab import Experiment\n", "client.experiments imports scalelab"),
        ("scalelab/lab.py", "from server.services import submission\n", "scalelab.lab imports server.services"),
        ("scalelab/frames.py", "import worker.report\n", "scalelab.frames imports worker.report"),
        ("worker/train.py", "import server.db\n", "worker.train imports server.db"),
        (
            "server/models/run.py",
            "from server.services.sweep import MAX_RUNS_PER_EXPERIMENT\n",
            "imports server.services.sweep",
        ),
        ("server/runtimes.py", "from server.profiles import Container\n", "server.runtimes imports server.profiles"),
        ("server/scheduler/slurm.py", "from server.render import job_name\n", "imports server.render.job_name"),
        ("server/scheduler/local.py", "from server.models import new_id\n", "imports server.models.new_id"),
        (
            "server/scheduler/slurmrestd.py",
            "from server.scheduler.slurm import sacct_statuses\n",
            "backend server.scheduler.slurmrestd imports backend server.scheduler.slurm",
        ),
        (
            "server/scheduler/pyslurm_backend.py",
            "def f():\n    from server.scheduler import local\n",
            "backend server.scheduler.pyslurm_backend imports backend server.scheduler.local",
        ),
        ("server/db_bulk.py", "from server.services import ingestion\n", "server.db_bulk imports server.services"),
        ("server/services/ingestion/counting.py", "from server.models import Metric\n", "imports server.models"),
        ("server/services/ingestion/counting.py", "import sqlalchemy\n", "counting imports sqlalchemy"),
        ("server/services/ingestion/reading.py", "from sqlmodel import Session\n", "reading imports sqlmodel"),
    ],
)
def test_the_checker_sees_each_kind_of_breach(tmp_path: Path, path: str, source: str, expected: str):
    file = tmp_path / path
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(source)
    found = violations(list(imports_of(file, tmp_path)))
    assert any(expected in line for line in found), found


def test_routers_may_share_deps_and_errors(tmp_path: Path):
    file = tmp_path / "server/api/runs.py"
    file.parent.mkdir(parents=True)
    file.write_text("from server.api.deps import SessionDep\nfrom server.api.errors import not_found\n")
    assert violations(list(imports_of(file, tmp_path))) == []


def test_backends_may_share_the_scheduler_packages_modules(tmp_path: Path):
    file = tmp_path / "server/scheduler/slurmrestd.py"
    file.parent.mkdir(parents=True)
    file.write_text(
        "from server.scheduler import Job\nfrom server.scheduler.sacct import sacct_statuses\n"
        "from server.scheduler.slurmrestd import check_url\n"
    )
    assert violations(list(imports_of(file, tmp_path))) == []
