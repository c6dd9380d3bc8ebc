"""Each read waits for a thread of the pool once at most: on a loaded server every hop to the pool waits its turn
again, so a plain `def` dependency, or a response model validated on its way out of a sync route, doubled a read's
time under the load benchmark (experiments list, home page and run page at twice the others' latency)."""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterator
from typing import Any

import anyio.to_thread
import pytest

from benches.load import READS
from server.config import Settings
from tests.factories import experiment_row, run_row


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """Who a sender is, kept for the whole test however slow the machine (a loaded CI took over the default 5 s
    between two reads, and looked the sender up again): this test counts hops, not seconds."""
    return settings.model_copy(update={"signed_in_ttl_s": 300})


@pytest.fixture
def hops(monkeypatch: pytest.MonkeyPatch) -> Iterator[collections.Counter[str]]:
    """Calls into the thread pool, by what was called: FastAPI and Starlette call anyio.to_thread.run_sync."""
    counted: collections.Counter[str] = collections.Counter()
    run_sync = anyio.to_thread.run_sync

    async def counting(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        # Not the routes' pool: a PostgreSQL session is closed by a thread of its own (server.api.deps.get_session).
        if kwargs.get("limiter") is None:
            counted[repr(func)[:120]] += 1
        return await run_sync(func, *args, **kwargs)

    monkeypatch.setattr(anyio.to_thread, "run_sync", counting)
    yield counted


# The load benchmark's reads, and the other pages and details a dashboard asks for.
PATHS = [template for _, template in READS] + [
    "/api/experiments/{experiment}",
    "/api/runs?experiment_id={experiment}",
    "/api/experiments/{experiment}/compare",
    "/api/experiments/{experiment}/scaling",
    "/experiments/new",
]


@pytest.mark.parametrize("template", PATHS)
def test_a_read_waits_for_a_thread_once_at_most(client, session, tmp_path, hops, template):
    experiment = experiment_row(session)
    run = run_row(session, experiment, tmp_path)
    path = template.format(run=run.id, experiment=experiment.id)
    # A sender is looked up in the pool on first sight, then kept a few seconds (server.services.signed_in).
    assert client.get("/healthz").status_code == 200 and client.get("/api/profiles").status_code == 200
    for _ in range(2):  # the first time, and once what the server keeps is kept
        hops.clear()
        assert client.get(path).status_code == 200
        assert sum(hops.values()) <= 1, f"{path}: {dict(hops)}"


def test_liveness_is_answered_without_the_pool(client, hops):
    # A probe asks whether the process answers: behind busy pool threads (slow reads, a loaded machine) a plain
    # `def` route waited its turn, and a one-second probe timed out under CI's load while the server was well.
    assert client.get("/healthz").status_code == 200
    assert sum(hops.values()) == 0, dict(hops)
