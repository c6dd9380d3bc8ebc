"""The monitor's lease: one holder at a time, renewed by its holder, taken over once it expires, given up at
shutdown; and the monitor cycles only while it holds it. Clocks are injected: nothing here waits for time to pass."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

from sqlmodel import Session

from server.lease import HUNG_AFTER, Lease, current, timing
from server.models import Lease as LeaseRow
from server.monitor import Monitor
from server.processes import process_runs

START = datetime(2026, 11, 24, 16, 0, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def two(engine, clock, interval_s: float = 2.0) -> tuple[Lease, Lease]:
    rule = timing(interval_s)
    return Lease(engine, rule, holder="a", clock=clock), Lease(engine, rule, holder="b", clock=clock)


def test_the_first_to_ask_holds_it_and_the_other_does_not(engine):
    clock = Clock()
    a, b = two(engine, clock)
    assert a.ask() and a.held
    assert not b.ask() and not b.held
    row = current(engine)
    assert row is not None and row.holder == "a" and row.acquired_at == START


def test_the_holder_keeps_it_by_renewing_for_as_long_as_it_lives(engine):
    clock = Clock()
    a, b = two(engine, clock)
    a.ask()
    for _ in range(10):  # ten renewals, each a period apart: far longer than one lease's life
        clock.advance(a.timing.period_s)
        assert a.ask()
        assert not b.ask()
    row = current(engine)
    assert row is not None and row.holder == "a" and row.acquired_at == START  # renewing is not taking again


def test_a_holder_that_stops_renewing_is_taken_over_once_its_lease_expires(engine):
    clock = Clock()
    a, b = two(engine, clock)
    a.ask()
    clock.advance(a.timing.ttl_s)
    assert not b.ask()  # expired only after ttl, not at it
    clock.advance(0.001)
    assert b.ask()
    row = current(engine)
    assert row is not None and row.holder == "b" and row.acquired_at == clock.now
    assert not a.ask() and not a.held  # the old holder, back to life, learns it lost it


def test_a_holder_on_this_host_whose_process_ended_is_taken_over_at_once(engine):
    """No waiting for its lease to run out: its process is gone (kill -9), so the next ask takes it."""
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    clock = Clock()
    rule = timing(2.0)
    dead = Lease(engine, rule, holder=f"{socket.gethostname()}:{ended.stdout.strip()}:0", clock=clock)
    standby = Lease(engine, rule, holder="b", clock=clock)
    assert dead.ask()
    assert standby.ask()  # the same instant: the dead holder's lease has not expired


def test_a_holder_on_this_host_whose_process_runs_keeps_it_past_its_expiry_until_it_looks_hung(engine):
    """A live holder whose renewals are late (a loaded host, SQLite's one writer busy with its own ingestion) is
    not replaced by a second monitor; one that has not renewed for HUNG_AFTER past its expiry is."""
    clock = Clock()
    rule = timing(2.0)
    alive = Lease(engine, rule, holder=f"{socket.gethostname()}:{os.getpid()}:0", clock=clock)
    standby = Lease(engine, rule, holder="b", clock=clock)
    assert alive.ask()
    clock.advance(rule.ttl_s + 10)
    assert not standby.ask()
    assert alive.ask()  # a late renewal still renews
    clock.advance(rule.ttl_s + HUNG_AFTER.total_seconds() + 0.001)
    assert standby.ask()


def test_a_zombie_is_no_running_process():
    """A killed worker stays a zombie until its parent reaps it: it holds nothing meanwhile."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    for _ in range(3000):
        if not process_runs(child.pid):
            break
        time.sleep(0.01)
    assert not process_runs(child.pid)  # exited, not yet reaped
    child.wait()
    assert not process_runs(child.pid)
    assert process_runs(os.getpid())


def test_a_dead_holders_lease_passes_on_within_two_monitor_intervals():
    """The rule for a holder on another host: the others ask every period, so the last renewal's lease plus one
    period bounds the wait."""
    for interval_s in (0.1, 1.0, 2.0, 30.0):
        rule = timing(interval_s)
        assert rule.takeover_bound_s <= 2 * interval_s
        assert rule.ttl_s >= 3 * rule.period_s  # a holder may miss two renewals in a row and keep it


def test_a_released_lease_is_taken_at_the_next_ask(engine):
    clock = Clock()
    a, b = two(engine, clock)
    a.ask()
    a.release()
    assert not a.held
    assert b.ask()


def test_only_one_of_many_processes_asking_at_once_holds_it(engine):
    """Rivals asking at the same instant on a fresh database (the row does not exist yet): one wins."""
    clock = Clock()
    rule = timing(2.0)
    leases = [Lease(engine, rule, holder=f"p{i}", clock=clock) for i in range(8)]
    barrier = threading.Barrier(len(leases))
    answers: list[bool] = []

    def ask(lease: Lease) -> None:
        barrier.wait()
        answers.append(lease.ask())

    threads = [threading.Thread(target=ask, args=(lease,)) for lease in leases]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(answers) == [False] * 7 + [True]
    row = current(engine)
    assert row is not None and [lease.holder for lease in leases if lease.held] == [row.holder]


def test_a_database_that_cannot_be_reached_means_not_holding(engine, tmp_path):
    from server.db import make_engine

    broken = make_engine(f"sqlite:///{tmp_path / 'missing-dir-is-a-file'}")
    (tmp_path / "missing-dir-is-a-file").mkdir()  # a directory where the database file should be: cannot open
    lease = Lease(broken, timing(2.0), holder="a")
    lease.held = True
    assert not lease.ask() and not lease.held
    broken.dispose()


class CountingMonitor(Monitor):
    def __init__(self, engine, interval_s: float) -> None:
        super().__init__(engine, scheduler=None, interval_s=interval_s)  # type: ignore[arg-type]
        self.cycles = 0

    def cycle(self) -> None:
        self.cycles += 1


def test_the_monitor_cycles_only_while_its_process_holds_the_lease(engine):
    """Two monitors on one database: the one without the lease never cycles; when the holder stops (and gives the
    lease up), the other takes over and cycles."""
    interval_s = 0.1
    first, second = CountingMonitor(engine, interval_s), CountingMonitor(engine, interval_s)
    first_lease, second_lease = Lease(engine, timing(interval_s)), Lease(engine, timing(interval_s))

    async def scenario() -> None:
        running_first = asyncio.create_task(first.run_forever(first_lease))
        await until(lambda: first.cycles >= 3)
        running_second = asyncio.create_task(second.run_forever(second_lease))
        await until(lambda: first.cycles >= 8)
        assert second.cycles == 0 and first_lease.held and not second_lease.held
        running_first.cancel()  # a shutdown: the lease is given up
        await asyncio.gather(running_first, return_exceptions=True)
        await until(lambda: second.cycles >= 3)
        running_second.cancel()
        await asyncio.gather(running_second, return_exceptions=True)

    # In a thread of its own: after the browser tests, Playwright's loop runs in pytest's thread, and asyncio.run
    # refuses to start a second one there.
    with ThreadPoolExecutor(max_workers=1) as thread:
        thread.submit(asyncio.run, scenario()).result()
    with Session(engine) as session:
        row = session.get(LeaseRow, "monitor")
    assert row is not None and row.holder is None  # the second gave it up too


async def until(condition, timeout_s: float = 30.0) -> None:
    """Wait for a condition (a generous bound, not a timing assertion: it only stops a broken test hanging)."""
    for _ in range(int(timeout_s / 0.01)):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the condition never held")
