"""What a rank imports at its start: the worker's training module leaves torch's heavy parallel modules to the runs
that use them (worker.parallel.on_use), and a run of one of them imports it when it needs it."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import worker.parallel

# Each costs seconds of CPU at every rank's start (torch._dynamo and sympy through pipelining, DTensor through FSDP,
# tensor parallelism and distributed checkpoints); a DDP run needs none of them.
ON_USE = (
    "torch._dynamo",
    "torch.distributed.pipelining",
    "torch.distributed.tensor",
    "torch.distributed.fsdp",
    "torch.distributed.checkpoint",
    "sympy",
)


def imported_after(code: str) -> set[str]:
    """The ON_USE modules loaded once `code` has run in a fresh Python (the test's own process has them all)."""
    probe = f"{code}\nimport sys\nprint(' '.join(m for m in {ON_USE!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120)
    return set(done.stdout.split())


def test_starting_the_worker_imports_none_of_the_strategies_it_may_not_use():
    assert imported_after("import worker.__main__, worker.train") == set()


@pytest.mark.parametrize(
    ("strategy", "brings"),
    [("fsdp", "torch.distributed.fsdp"), ("tp", "torch.distributed.tensor"), ("pp", "torch.distributed.pipelining")],
)
def test_a_strategy_is_imported_when_it_is_used(strategy, brings):
    assert brings in imported_after(f"import worker.parallel\nworker.parallel.apply_{strategy}.load()")
    real = importlib.import_module(f"worker.parallel.{strategy}")
    assert getattr(worker.parallel, f"apply_{strategy}").load() is getattr(real, f"apply_{strategy}")
