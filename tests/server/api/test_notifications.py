"""Notifications through the API and the monitor, on both databases: settings refused field by field and rule by
rule, an experiment that ends told by e-mail (a local SMTP server) and webhook (a local HTTP receiver), a failing
receiver retried with back-off until it takes it, and a receiver that hangs never holding the monitor's cycles."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session, col, select

from contract.states import FailureKind, RunState
from server.config import Settings
from server.models import NotificationDelivery, RegressionWatch, Run, utcnow
from server.monitor import Monitor
from server.scheduler.local import LocalScheduler
from server.services import delivery, failed_runs, notifications
from server.services.failure_kinds import ADVICE
from tests.conftest import ADMIN, make_client
from tests.factories import experiment_row, run_row
from tests.notify_receivers import smtp_server, webhook_receiver
from tests.server.api.test_references import measured, steady

EVERY_EVENT = ["experiment_ended", "run_failed", "regression"]


def notifying(settings: Settings, **changes: Any) -> Settings:
    """The settings with webhooks to this machine's loopback allowed, as a test's receiver needs."""
    allowed = {"webhook_allow": ["127.0.0.1"], "webhook_allow_private": True, "webhook_allow_http": True}
    return settings.model_copy(update={**allowed, "notify_backoff_s": 30.0, **changes})


@pytest.fixture
def app_client(settings: Settings, local_scheduler: LocalScheduler) -> Iterator[TestClient]:
    with make_client(notifying(settings, smtp_host="127.0.0.1", smtp_port=9), local_scheduler) as client:
        yield client


def engine_of(client: TestClient) -> Any:
    return client.app.state.engine  # type: ignore[attr-defined]


def put(client: TestClient, **fields: Any) -> Any:
    return client.put("/api/notifications/settings", json={"events": EVERY_EVENT, **fields})


def refusal(answer: Any, field: str) -> str:
    assert answer.status_code == 422, answer.text
    (problem,) = answer.json()["detail"]
    assert problem["loc"] == ["body", field]
    return str(problem["msg"])


def test_settings_are_kept_and_a_bad_address_or_url_is_refused_naming_the_field(app_client):
    assert app_client.get("/api/notifications/settings").json()["events"] == []
    answer = put(app_client, email="me@example.org", webhook_url="http://127.0.0.1:9/hook")
    assert answer.status_code == 200, answer.text
    kept = app_client.get("/api/notifications/settings").json()
    assert kept["events"] == EVERY_EVENT and kept["email"] == "me@example.org"
    assert kept["email_available"] and kept["webhooks_available"]

    assert "not an e-mail address" in refusal(put(app_client, email="me@example.org\r\nBcc: x@y.org"), "email")
    assert "not an e-mail address" in refusal(put(app_client, email="-oQ/tmp/x@example.org"), "email")
    assert "https://HOST/PATH" in refusal(put(app_client, webhook_url="ftp://127.0.0.1/x"), "webhook_url")
    assert put(app_client, events=["no_such_event"]).status_code == 422
    # Nothing refused was kept.
    assert app_client.get("/api/notifications/settings").json()["email"] == "me@example.org"


def test_a_webhook_to_a_forbidden_address_is_refused_naming_the_rule(settings, local_scheduler):
    strict = settings.model_copy(update={"webhook_allow": ["localhost", "10.1.2.3", ".example.org"]})
    with make_client(strict, local_scheduler) as client:
        # A name that resolves to loopback, a private address, a host off the allow-list, plain http.
        loopback = refusal(put(client, webhook_url="https://localhost/hook"), "webhook_url")
        assert "loopback" in loopback and "SCALELAB_WEBHOOK_ALLOW_PRIVATE" in loopback
        private = refusal(put(client, webhook_url="https://10.1.2.3/hook"), "webhook_url")
        assert "10.1.2.3, a private address" in private
        elsewhere = refusal(put(client, webhook_url="https://chat.elsewhere.net/hook"), "webhook_url")
        assert "SCALELAB_WEBHOOK_ALLOW" in elsewhere and "chat.elsewhere.net" in elsewhere
        plain = refusal(put(client, webhook_url="http://10.1.2.3/hook"), "webhook_url")
        assert "SCALELAB_WEBHOOK_ALLOW_HTTP" in plain
        assert "SCALELAB_SMTP_HOST" in refusal(put(client, email="me@example.org"), "email")
        assert client.get("/api/notifications/settings").json()["webhook_url"] is None


def quick_run(session: Session, tmp_path: Path, scheduler: LocalScheduler, experiment: Any, position: int) -> Run:
    run_dir = tmp_path / f"run{position}"
    run_dir.mkdir()
    script = run_dir / "job.sbatch"
    script.write_text("#!/bin/bash\nexit 0\n")
    job_id = scheduler.submit(script, run_dir)
    return run_row(
        session, experiment, run_dir, job_id=job_id, scheduler=scheduler.name, position=position, owner=ADMIN
    )


def cycle_until(monitor: Monitor, done: Any, timeout_s: float = 60) -> int:
    """Monitor cycles until `done()`: how many it took."""
    cycles = 0
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        monitor.cycle()
        cycles += 1
        if done():
            return cycles
        time.sleep(0.05)
    raise AssertionError("not done within the time")


def rows(engine: Any) -> list[NotificationDelivery]:
    with Session(engine) as session:
        return list(session.exec(select(NotificationDelivery).order_by(col(NotificationDelivery.id))).all())


def ended(engine: Any) -> bool:
    return any(row.event == "experiment_ended" for row in rows(engine))


def test_an_experiment_that_ended_is_told_by_email_and_webhook(settings, local_scheduler, tmp_path):
    with smtp_server() as smtp, webhook_receiver() as receiver:
        configured = notifying(settings, smtp_host="127.0.0.1", smtp_port=smtp.server_address[1])
        with make_client(configured, local_scheduler) as client:
            assert put(client, email="me@example.org", webhook_url=receiver.url).status_code == 200
            engine = engine_of(client)
            with Session(engine) as session:
                experiment = experiment_row(session, "sweep", owner=ADMIN)
                for position in range(2):
                    quick_run(session, tmp_path, local_scheduler, experiment, position)
                experiment_id = experiment.id
            cycle_until(Monitor(engine, local_scheduler, interval_s=0.1), lambda: ended(engine))
            # Queued by the monitor, one per channel, and nothing sent by it.
            assert [(row.channel, row.state) for row in rows(engine)] == [("email", "pending"), ("webhook", "pending")]
            assert smtp.received == [] and receiver.bodies == []

            assert delivery.deliver_due(engine, configured, delivery.sender(configured)) == 2
            line = f"experiment sweep ({experiment_id}) completed: 2 completed of 2 runs"
            ((recipients, message),) = smtp.received
            assert recipients == ["me@example.org"] and message["Subject"] == line
            assert line in message.get_payload()
            assert receiver.bodies == [{"text": line}] and receiver.paths == ["/hook"]

            listed = client.get("/api/notifications/deliveries").json()
            assert listed["count"] == 2
            assert {(row["state"], row["attempts"]) for row in listed["data"]} == {("delivered", 1)}
            assert all(row["history"][0]["ok"] for row in listed["data"])


def test_a_failed_run_is_told_with_its_kind_and_what_to_do(app_client, tmp_path):
    assert put(app_client, webhook_url="http://127.0.0.1:9/hook", events=["run_failed"]).status_code == 200
    engine = engine_of(app_client)
    with Session(engine) as session:
        experiment = experiment_row(session, owner=ADMIN)
        run = run_row(session, experiment, tmp_path, state=RunState.failed, ingest_done=True, owner=ADMIN)
        run_id, experiment_id = run.id, experiment.id
    failed_runs.classify_ended(engine, app_client.app.state.scheduler)
    (row,) = rows(engine)
    assert row.event == "run_failed" and row.run_id == run_id
    assert row.subject == f"run {run_id} of experiment {experiment_id} failed: launcher_error"
    assert ADVICE[FailureKind.launcher_error] in row.text


def test_a_failing_receiver_is_retried_with_back_off_until_it_takes_it(settings, local_scheduler):
    with webhook_receiver(answers=[500, 503]) as receiver:
        configured = notifying(settings)
        with make_client(configured, local_scheduler) as client:
            assert put(client, webhook_url=receiver.url).status_code == 200
            (queued,) = client.post("/api/notifications/test").json()
            assert queued["state"] == "pending" and queued["event"] == "test"
            engine = engine_of(client)
            send = delivery.sender(configured)
            start = utcnow() + timedelta(seconds=1)
            assert delivery.deliver_due(engine, configured, send, start) == 1  # 500
            (row,) = rows(engine)
            assert (row.state, row.attempts) == ("pending", 1) and "500" in (row.last_error or "")
            # Not again before its back-off (30 s), then after it; the second wait is twice the first.
            assert delivery.deliver_due(engine, configured, send, start + timedelta(seconds=29)) == 0
            assert delivery.deliver_due(engine, configured, send, start + timedelta(seconds=30)) == 1  # 503
            assert delivery.deliver_due(engine, configured, send, start + timedelta(seconds=89)) == 0
            assert delivery.deliver_due(engine, configured, send, start + timedelta(seconds=90)) == 1  # 200
            (row,) = rows(engine)
            assert (row.state, row.attempts, row.last_error) == ("delivered", 3, None)
            assert [entry["ok"] for entry in row.history] == [False, False, True]
            assert len(receiver.bodies) == 3
            listed = client.get("/api/notifications/deliveries").json()["data"][0]
            assert "503" in (listed["history"][1]["error"] or "")


def test_a_receiver_that_never_takes_it_is_given_up_after_the_last_attempt(settings, local_scheduler):
    with webhook_receiver(answers=[500, 500, 500]) as receiver:
        configured = notifying(settings, notify_max_attempts=2, notify_backoff_s=0.001)
        with make_client(configured, local_scheduler) as client:
            assert put(client, webhook_url=receiver.url).status_code == 200
            client.post("/api/notifications/test")
            engine = engine_of(client)
            later = utcnow() + timedelta(seconds=10)
            for second in range(4):
                delivery.deliver_due(engine, configured, delivery.sender(configured), later + timedelta(seconds=second))
            (row,) = rows(engine)
            assert (row.state, row.attempts) == ("failed", 2) and len(receiver.bodies) == 2


def test_a_test_notification_needs_a_channel(app_client):
    answer = app_client.post("/api/notifications/test")
    assert answer.status_code == 409 and "PUT /api/notifications/settings" in answer.json()["detail"]


def test_a_receiver_that_hangs_does_not_hold_the_monitor(settings, local_scheduler, tmp_path):
    """The delivery loop runs as the server runs it (its own task, in its own thread here) while a receiver holds
    its first delivery; the monitor meanwhile ends an experiment and queues its notification."""
    release = threading.Event()
    with webhook_receiver(hold=release) as receiver:
        configured = notifying(settings, notify_timeout_s=120.0, poll_interval_s=0.05)
        with make_client(configured, local_scheduler) as client:
            assert put(client, webhook_url=receiver.url).status_code == 200
            client.post("/api/notifications/test")
            engine = engine_of(client)
            loop = asyncio.new_event_loop()
            sending = loop.create_task(delivery.DeliveryLoop(engine, configured).run_forever())

            def until_cancelled() -> None:
                with contextlib.suppress(asyncio.CancelledError):
                    loop.run_until_complete(sending)
                loop.close()

            thread = threading.Thread(target=until_cancelled, daemon=True)
            thread.start()
            try:
                assert receiver.entered.wait(60), "the delivery loop never sent the test notification"
                with Session(engine) as session:
                    experiment = experiment_row(session, owner=ADMIN)
                    quick_run(session, tmp_path, local_scheduler, experiment, 0)
                monitor = Monitor(engine, local_scheduler, interval_s=0.1)
                cycles = cycle_until(monitor, lambda: ended(engine))
                for _ in range(3):
                    monitor.cycle()
                    cycles += 1
                # The monitor ended the experiment and went on cycling while the receiver still held the first one.
                assert not release.is_set() and cycles >= 4
                assert [(row.event, row.state) for row in rows(engine)] == [
                    ("test", "pending"),
                    ("experiment_ended", "pending"),
                ]
                assert len(receiver.bodies) == 1
                release.set()
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline and any(row.state == "pending" for row in rows(engine)):
                    time.sleep(0.05)
                assert [row.state for row in rows(engine)] == ["delivered", "delivered"]
            finally:
                release.set()
                loop.call_soon_threadsafe(sending.cancel)
                thread.join(30)


def test_the_account_page_shows_the_settings_and_mounts_their_form(app_client):
    assert put(app_client, email="me@example.org", events=["run_failed"]).status_code == 200
    page = app_client.get("/account")
    assert page.status_code == 200
    assert 'value="run_failed" checked' in page.text and 'value="experiment_ended">' in page.text
    assert 'value="me@example.org"' in page.text and "js/account.js" in page.text
    assert "This server allows no webhook" not in page.text
    assert 'href="/account" id="signed-in-as"' in app_client.get("/runs").text or "signed-in-as" not in page.text


def test_a_regression_against_the_pinned_reference_is_told_once_its_runs_are_read(app_client, tmp_path):
    assert put(app_client, webhook_url="http://127.0.0.1:9/hook", events=["regression"]).status_code == 200
    engine = engine_of(app_client)
    with Session(engine) as session:
        reference = measured(session, tmp_path, "ref", steady()).id
        assert app_client.put(f"/api/experiments/{reference}/reference").status_code == 200
        ended_ids = []
        for name, factor in (("slowed", 2.0), ("same", 1.01)):
            experiment = measured(session, tmp_path, name, steady(factor))
            experiment.owner = ADMIN
            session.add(experiment)
            ended_ids.append(experiment.id)
        session.commit()
        runs = list(session.exec(select(Run).where(col(Run.experiment_id).in_(ended_ids))).all())
        # One run of `slowed` not yet read to its end: the test waits for it.
        unread = next(run for run in runs if run.experiment_id == ended_ids[0])
        unread.ingest_done = False
        session.add(unread)
        notifications.experiments_ended(session, runs)
        session.commit()
        unread_id = unread.id
    assert {row.event for row in rows(engine)} == set()  # no experiment_ended: not chosen
    notifications.check_regressions(engine)
    assert rows(engine) == []  # `same` tested and let go; `slowed` still waits for its run
    with Session(engine) as session:
        assert [watch.experiment_id for watch in session.exec(select(RegressionWatch)).all()] == [ended_ids[0]]
        run = session.get(Run, unread_id)
        assert run is not None
        run.ingest_done = True
        session.add(run)
        session.commit()
    notifications.check_regressions(engine)
    (row,) = rows(engine)
    assert row.event == "regression" and row.experiment_id == ended_ids[0]
    assert row.subject == f"experiment {ended_ids[0]} regressed against reference {reference}"
    assert "regressed" in row.text
    notifications.check_regressions(engine)
    assert len(rows(engine)) == 1  # told once


def run_loops(engine: Any, configured: Settings, leased: bool, done: Any) -> None:
    """Two delivery loops on one database, as two server processes run them, until `done()`."""
    loops = [delivery.DeliveryLoop(engine, configured) for _ in range(2)]

    async def both() -> None:
        running = [asyncio.create_task(one.run_forever(one.lease() if leased else None)) for one in loops]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not done():
            await asyncio.sleep(0.05)
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)

    # In a thread of their own, with an event loop of their own: an earlier test on this pytest worker may have left
    # an event loop marked running in this thread (seen once in CI: asyncio.run refused to start).
    failed: list[BaseException] = []

    def in_thread() -> None:
        try:
            asyncio.run(both())
        except BaseException as exc:  # handed to the test's thread, which fails with it
            failed.append(exc)

    thread = threading.Thread(target=in_thread)
    thread.start()
    thread.join(timeout=120)
    assert not thread.is_alive() and not failed, failed


def test_of_two_delivery_loops_only_the_lease_holder_sends_each_notification_once(settings, local_scheduler):
    with webhook_receiver() as receiver:
        configured = notifying(settings, poll_interval_s=0.05)
        with make_client(configured, local_scheduler) as client:
            assert put(client, webhook_url=receiver.url).status_code == 200
            for _ in range(5):
                client.post("/api/notifications/test")
            engine = engine_of(client)
            run_loops(engine, configured, True, lambda: all(row.state == "delivered" for row in rows(engine)))
            assert [row.attempts for row in rows(engine)] == [1] * 5
            assert len(receiver.bodies) == 5


def test_a_hung_run_is_told_with_where_its_ranks_were(app_client, tmp_path):
    assert put(app_client, webhook_url="http://127.0.0.1:9/hook", events=["run_failed"]).status_code == 200
    engine = engine_of(app_client)
    with Session(engine) as session:
        experiment = experiment_row(session, owner=ADMIN)
        run = run_row(session, experiment, tmp_path, state=RunState.running, owner=ADMIN)
        notifications.run_hung(session, run, "rank 1 waits in all_reduce; rank 0 in its data loader")
        session.commit()
        run_id = run.id
    (row,) = rows(engine)
    assert row.subject.endswith("hung") and row.run_id == run_id
    assert "rank 1 waits in all_reduce" in row.text and ADVICE[FailureKind.hung] in row.text


def test_nothing_is_queued_for_an_event_not_chosen_or_a_user_without_settings(app_client, tmp_path):
    engine = engine_of(app_client)
    with Session(engine) as session:
        experiment = experiment_row(session, owner=ADMIN)
        run = run_row(session, experiment, tmp_path, state=RunState.running, owner=ADMIN)
        notifications.run_hung(session, run, "no settings yet")
        session.commit()
        run_id = run.id
    assert rows(engine) == []
    assert put(app_client, webhook_url="http://127.0.0.1:9/hook", events=["experiment_ended"]).status_code == 200
    with Session(engine) as session:
        again = session.get(Run, run_id)
        assert again is not None
        notifications.run_hung(session, again, "not chosen")
        session.commit()
    assert rows(engine) == []
