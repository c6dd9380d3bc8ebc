"""Notifications, the sending side: the delivery loop, which sends each queued delivery (e-mail through the SMTP
host or the cluster's sendmail; a webhook's JSON POST) and records every attempt, retrying a failure after an
exponential back-off up to a bound. It runs beside the monitor, in the process holding its own lease (`notify`), so
that of several server processes one sends each delivery, and a slow receiver delays only other deliveries.

Each attempt is bounded: a timeout on connecting and on every read, the receiver's answer read no further than
its status line and a little of its body, and no redirect followed (a 3xx is a failure: the URL checked is the URL
reached). A webhook connects to the very address checked at that moment, so that a name resolving to an internal
address by then (DNS rebinding) is refused rather than reached."""

from __future__ import annotations

import asyncio
import http.client
import json
import logging
import smtplib
import socket
import ssl
import subprocess
from collections.abc import Callable
from datetime import datetime, timedelta
from email.message import EmailMessage

from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from server.config import Settings
from server.lease import Lease
from server.lease import timing as lease_timing
from server.models import Channel, DeliveryState, NotificationDelivery, utcnow
from server.models.notification import MAX_ERROR_CHARS
from server.services import webhook_rules
from server.services.notifications import email_available
from server.services.webhook_rules import Refused, Resolver, Target

log = logging.getLogger(__name__)

NOTIFY_LEASE = "notify"
# Deliveries sent per round: a backlog is worked through over several rounds, each bounded.
PER_ROUND = 50
MAX_BACKOFF = timedelta(hours=1)
# What is read of a receiver's answer beyond its status: enough for an error's first words, nothing more.
ANSWER_BYTES = 512


class SendFailed(Exception):
    """One attempt failed; the message says why, for the user's list of deliveries."""


def backoff(settings: Settings, attempts: int) -> timedelta:
    """The wait after the `attempts`-th failed attempt: the setting, doubled after each, at most an hour."""
    return min(timedelta(seconds=settings.notify_backoff_s * 2 ** (attempts - 1)), MAX_BACKOFF)


# ---- e-mail ------------------------------------------------------------------------------------------------------


def send_email(settings: Settings, to: str, subject: str, text: str) -> None:
    message = EmailMessage()
    message["From"], message["To"], message["Subject"] = settings.smtp_from, to, subject
    message.set_content(text)
    try:
        if settings.smtp_host:
            with smtplib.SMTP(settings.smtp_host, settings.smtp_port, timeout=settings.notify_timeout_s) as smtp:
                if settings.smtp_starttls:
                    smtp.starttls(context=ssl.create_default_context())
                if settings.smtp_user and settings.smtp_password:
                    smtp.login(settings.smtp_user, settings.smtp_password)
                smtp.send_message(message)
        elif settings.sendmail:
            # No shell: the address is one argument, after `--` (it was checked to be an address when set).
            done = subprocess.run(
                [str(settings.sendmail), "-i", "--", to],
                input=message.as_bytes(),
                capture_output=True,
                timeout=settings.notify_timeout_s,
                check=False,
            )
            if done.returncode != 0:
                raise SendFailed(f"sendmail exited with {done.returncode}: {done.stderr.decode(errors='replace')}")
        else:
            raise SendFailed("this server no longer sends e-mail (SCALELAB_SMTP_HOST and SCALELAB_SENDMAIL unset)")
    except (OSError, smtplib.SMTPException, subprocess.SubprocessError) as exc:
        raise SendFailed(f"{type(exc).__name__}: {exc}") from None


# ---- webhooks ----------------------------------------------------------------------------------------------------


class _PinnedHTTP(http.client.HTTPConnection):
    """A connection to one checked address, the URL's host named only in the Host header."""

    def __init__(self, target: Target, address: str, timeout: float) -> None:
        super().__init__(target.host, target.port, timeout=timeout)
        self.address = address

    def connect(self) -> None:
        self.sock = socket.create_connection((self.address, self.port), self.timeout)


class _PinnedHTTPS(http.client.HTTPSConnection):
    """The same over TLS: the certificate is checked against the URL's host name."""

    def __init__(self, target: Target, address: str, timeout: float) -> None:
        super().__init__(target.host, target.port, timeout=timeout, context=ssl.create_default_context())
        self.address = address

    def connect(self) -> None:
        raw = socket.create_connection((self.address, self.port), self.timeout)
        self.sock = self._context.wrap_socket(raw, server_hostname=self.host)  # type: ignore[attr-defined]


def send_webhook(settings: Settings, url: str, text: str, resolve: Resolver = webhook_rules.system_resolver) -> None:
    """POST {"text": ...} to the URL, at an address the rules allow now."""
    try:
        target = webhook_rules.parse(url, settings)
        address = webhook_rules.addresses(target, settings, resolve)[0]
    except Refused as exc:
        raise SendFailed(f"refused: {exc}") from None
    body = json.dumps({"text": text}).encode()
    kind = _PinnedHTTPS if target.scheme == "https" else _PinnedHTTP
    connection = kind(target, address, settings.notify_timeout_s)
    try:
        connection.request(
            "POST", target.path, body, {"Content-Type": "application/json", "User-Agent": "scalelab-notify"}
        )
        answer = connection.getresponse()
        head = answer.read(ANSWER_BYTES).decode(errors="replace")
    except (OSError, http.client.HTTPException) as exc:
        raise SendFailed(f"{type(exc).__name__}: {exc}") from None
    finally:
        connection.close()
    if not 200 <= answer.status < 300:
        moved = f" to {answer.getheader('Location')} (redirects are not followed)" if 300 <= answer.status < 400 else ""
        raise SendFailed(f"the receiver answered {answer.status} {answer.reason}{moved}: {head[:200]}")


# ---- the loop ----------------------------------------------------------------------------------------------------


Sender = Callable[[NotificationDelivery], None]


def sender(settings: Settings, resolve: Resolver = webhook_rules.system_resolver) -> Sender:
    def send(delivery: NotificationDelivery) -> None:
        if delivery.channel == Channel.email:  # a str as read back: the column is text
            if not email_available(settings):
                raise SendFailed("this server no longer sends e-mail (SCALELAB_SMTP_HOST and SCALELAB_SENDMAIL unset)")
            send_email(settings, delivery.target, delivery.subject, delivery.text)
        else:
            send_webhook(settings, delivery.target, delivery.text, resolve)

    return send


def deliver_due(engine: Engine, settings: Settings, send: Sender, now: datetime | None = None) -> int:
    """Send each pending delivery that is due (its first attempt, or its back-off over) and record the attempt:
    delivered, failed for good after the last attempt, or pending until its next. How many were attempted."""
    now = now or utcnow()
    with Session(engine) as session:
        due = session.exec(
            select(NotificationDelivery.id)
            .where(
                col(NotificationDelivery.state) == DeliveryState.pending,
                col(NotificationDelivery.next_attempt_at) <= now,
            )
            .order_by(col(NotificationDelivery.next_attempt_at), col(NotificationDelivery.id))
            .limit(PER_ROUND)
        ).all()
    for delivery_id in due:
        _attempt(engine, settings, send, delivery_id, now)
    return len(due)


def _attempt(engine: Engine, settings: Settings, send: Sender, delivery_id: int | None, now: datetime) -> None:
    with Session(engine) as session:
        delivery = session.get(NotificationDelivery, delivery_id)
        if delivery is None or delivery.state != DeliveryState.pending:
            return
        # Sent outside any transaction's lock on the database: the row is read, the session's connection returned.
        session.expunge(delivery)
        session.rollback()
    error: str | None = None
    try:
        send(delivery)
    except SendFailed as exc:
        error = str(exc)[:MAX_ERROR_CHARS]
    except Exception as exc:  # a bug in a sender must not stop the loop; it is recorded like a failure
        log.exception("notification %s: sending failed unexpectedly", delivery_id)
        error = f"{type(exc).__name__}: {exc}"[:MAX_ERROR_CHARS]
    with Session(engine) as session:
        row = session.get(NotificationDelivery, delivery_id)
        if row is None:
            return
        row.attempts += 1
        row.history = [*row.history, {"at": utcnow().isoformat(), "ok": error is None, "error": error}]
        if error is None:
            row.state, row.delivered_at, row.next_attempt_at, row.last_error = (
                DeliveryState.delivered,
                utcnow(),
                None,
                None,
            )
        elif row.attempts >= settings.notify_max_attempts:
            row.state, row.next_attempt_at, row.last_error = DeliveryState.failed, None, error
            log.warning("notification %s failed for good after %d attempts: %s", row.id, row.attempts, error)
        else:
            row.next_attempt_at, row.last_error = now + backoff(settings, row.attempts), error
        session.add(row)
        session.commit()


class DeliveryLoop:
    """Sends the due deliveries every interval, while this process holds the `notify` lease."""

    def __init__(self, engine: Engine, settings: Settings, send: Sender | None = None) -> None:
        self.engine = engine
        self.settings = settings
        self.send = send or sender(settings)
        self.interval_s = settings.poll_interval_s
        self.rounds = 0

    def lease(self) -> Lease:
        return Lease(self.engine, lease_timing(self.interval_s), name=NOTIFY_LEASE)

    async def run_forever(self, lease: Lease | None = None) -> None:
        if lease is not None:
            await asyncio.to_thread(lease.ask)
        keeping = asyncio.create_task(lease.keep()) if lease is not None else None
        try:
            while True:
                if lease is None or lease.held:
                    try:
                        await asyncio.to_thread(deliver_due, self.engine, self.settings, self.send)
                    except Exception:
                        log.exception("notification delivery round failed; trying again")
                    self.rounds += 1
                await asyncio.sleep(self.interval_s)
        finally:
            if keeping is not None and lease is not None:
                keeping.cancel()
                lease.release()
