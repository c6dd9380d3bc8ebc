"""The import rules of DESIGN.md, read from the source: which package may import which.

- contract imports neither server, worker nor client, nor torch: it is pydantic and the standard library only;
- server never imports torch or the worker (the contract is what they share);
- worker never imports server or client;
- client never imports server (it talks to the REST API);
- services know nothing of HTTP (no FastAPI), and table models depend on no service;
- routers never import routers, and the pages never import routers (both go through the services);
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
# Modules of server/api/ that are not routers: what every router shares.
ROUTER_HELPERS = frozenset(
    {"server.api", "server.api.deps", "server.api.errors", "server.api.downloads", "server.api.prepared"}
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


# (who, what it must not import, why)
HTTP = ("fastapi", "starlette", "server.api", "server.web")
UPPER = ("server.services", "server.api", "server.web", "server.monitor")
DATABASE = ("sqlmodel", "sqlalchemy", "server.db")
RULES: list[tuple[str, tuple[str, ...], str]] = [
    ("contract", ("server", "worker", "client", "torch", "fastapi", "sqlmodel", "httpx"), "everyone imports it"),
    ("server", ("torch", "worker", "client"), "no torch on login nodes; the contract is what it shares"),
    ("worker", ("server", "client"), "the worker runs on compute nodes from the contract alone"),
    ("client", ("server", "worker", "torch", "sqlmodel"), "the client talks to the REST API only"),
    ("server.services", HTTP, "services know nothing of HTTP"),
    ("server.models", UPPER, "tables depend on no domain code"),
    ("server.runstate", UPPER, "the state machine depends on nothing above it"),
    ("server.errors", ("server",), "every layer raises them: they import nothing of the server"),
    ("server.scheduler", UPPER, "schedulers only talk to the scheduler"),
    ("server.render", UPPER, "rendering is a pure function"),
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
        if _within(item.module, "server.web") and _is_router(item.imported):
            found.append(f"{item.where}: page module {item.module} imports router {item.imported} (read services)")
    return sorted(set(found))


def test_the_project_keeps_its_import_rules():
    imports = all_imports(ROOT, ("contract", "server", "worker", "client"))
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
        ("worker/train.py", "import server.db\n", "worker.train imports server.db"),
        (
            "server/models/run.py",
            "from server.services.sweep import MAX_RUNS_PER_EXPERIMENT\n",
            "imports server.services.sweep",
        ),
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
