"""The models package: every public name of its modules re-exported, and no domain code imported."""

from __future__ import annotations

import ast
import pkgutil
from pathlib import Path

import server.models
from tests.test_layering import ROOT, imports_of, violations

PACKAGE = Path(server.models.__file__).parent


def defined_names(path: Path) -> set[str]:
    """The public names a module defines at its top level (not those it imports)."""
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(target.id for target in node.targets if isinstance(target, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {name for name in names if not name.startswith("_")}


def test_every_public_name_is_importable_from_the_package():
    modules = [info.name for info in pkgutil.iter_modules([str(PACKAGE)])]
    assert len(modules) > 5, "the package's modules were not found"
    defined = set().union(*(defined_names(PACKAGE / f"{module}.py") for module in modules))
    assert defined == set(server.models.__all__)
    assert all(hasattr(server.models, name) for name in server.models.__all__)


def test_the_models_import_no_domain_code():
    found: list[str] = []
    for path in sorted(PACKAGE.glob("*.py")):
        found.extend(violations(list(imports_of(path, ROOT))))
    assert found == []
