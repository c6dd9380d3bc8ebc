"""The front end's own checks, in the suite: tsc type-checks every module against its JSDoc types and the API's
(frontend/tsconfig.json), and node runs the unit tests of the pure helpers (tests/frontend/*.test.mjs). Both need
the front end's npm packages (npm ci --prefix frontend; scripts/test installs them): skipped without them, except
where the suite was told it must run everything."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from tests.conftest import REQUIRE_SLURM
from tests.factories import ROOT

FRONTEND = ROOT / "frontend"
TSC = FRONTEND / "node_modules" / ".bin" / "tsc"
UNIT_TESTS = sorted((ROOT / "tests" / "frontend").glob("*.test.mjs"))


def _need(what: str, present: bool) -> None:
    if present:
        return
    message = f"the front end's checks need {what} (scripts/test installs it)"
    if REQUIRE_SLURM:
        pytest.fail(message)
    pytest.skip(message)


def _run(command: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)


def test_tsc_finds_no_type_error_in_the_modules() -> None:
    _need("TypeScript (npm ci --prefix frontend)", TSC.exists() and shutil.which("node") is not None)
    done = _run([str(TSC), "--noEmit", "-p", str(FRONTEND)])
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_helpers_unit_tests_pass_in_node() -> None:
    node = shutil.which("node")
    _need("node", node is not None)
    assert UNIT_TESTS, "no unit test found in tests/frontend"
    done = _run([str(node), "--test", *map(str, UNIT_TESTS)])
    sys.stdout.write(done.stdout[-4000:])
    assert done.returncode == 0, done.stdout[-8000:] + done.stderr
