"""Notifications: each user's choice of events and channels (table `notification_settings`), and each delivery
queued for them with its attempts (table `notification_delivery`), as the API shows them."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field
from sqlalchemy import JSON, Column, Index
from sqlmodel import AutoString, SQLModel
from sqlmodel import Field as SQLField

from server.models.common import utcnow

# Bounds: an e-mail address as SMTP allows one (RFC 5321), a URL as browsers keep them short, a message's text.
MAX_EMAIL_CHARS = 254
MAX_URL_CHARS = 2000
MAX_TEXT_CHARS = 2000
MAX_ERROR_CHARS = 500


class NotifyEvent(StrEnum):
    experiment_ended = "experiment_ended"  # all its runs ended, completed or not: one line of what became of them
    run_failed = "run_failed"  # a run failed (its failure kind and the sentence of what to do) or hung
    regression = "regression"  # an experiment ended slower than the pinned reference of its spec
    test = "test"  # asked for by the user (POST /api/notifications/test): always sent


class Channel(StrEnum):
    email = "email"
    webhook = "webhook"


class DeliveryState(StrEnum):
    pending = "pending"  # waiting for its next attempt
    delivered = "delivered"
    failed = "failed"  # every attempt failed, or it can never be sent (the operator took the channel away)


class NotificationSettingsBase(SQLModel):
    events: list[NotifyEvent] = SQLField(
        default_factory=list,
        sa_column=Column(JSON, nullable=False),
        description="the events to be told of: experiment_ended, run_failed (failed or hung), regression",
    )
    email: str | None = SQLField(
        default=None, max_length=MAX_EMAIL_CHARS, description="where e-mail goes; none: no e-mail"
    )
    webhook_url: str | None = SQLField(
        default=None,
        max_length=MAX_URL_CHARS,
        description="where a JSON POST with a Slack/Mattermost-compatible `text` goes, among the URLs the operator "
        "allows (SCALELAB_WEBHOOK_ALLOW); none: no webhook",
    )


class NotificationSettings(NotificationSettingsBase, table=True):
    __tablename__ = "notification_settings"

    user_name: str = SQLField(primary_key=True, foreign_key="user.name", max_length=32)
    updated_at: datetime = SQLField(default_factory=utcnow)


class NotificationSettingsPublic(NotificationSettingsBase):
    email_available: bool = Field(description="whether this server can send e-mail (the operator set a transport)")
    webhooks_available: bool = Field(description="whether the operator allows any webhook URL")


class NotificationSettingsUpdate(BaseModel):
    events: list[NotifyEvent] = Field(default_factory=list, max_length=8)
    email: str | None = Field(default=None, max_length=MAX_EMAIL_CHARS)
    webhook_url: str | None = Field(default=None, max_length=MAX_URL_CHARS)


class NotificationDeliveryBase(SQLModel):
    event: NotifyEvent = SQLField(sa_type=AutoString(length=32))  # text, as the migration makes it
    channel: Channel = SQLField(sa_type=AutoString(length=16))
    target: str = SQLField(max_length=MAX_URL_CHARS, description="the address or URL, as it was when queued")
    subject: str = SQLField(max_length=200)
    text: str = SQLField(max_length=MAX_TEXT_CHARS, description="the message: one line, then its details")
    experiment_id: str | None = SQLField(default=None, max_length=16)
    run_id: str | None = SQLField(default=None, max_length=16)
    state: DeliveryState = SQLField(default=DeliveryState.pending, sa_type=AutoString(length=16))
    attempts: int = 0
    created_at: datetime = SQLField(default_factory=utcnow)
    next_attempt_at: datetime | None = SQLField(default_factory=utcnow, description="none once it is settled")
    delivered_at: datetime | None = None
    last_error: str | None = SQLField(default=None, max_length=MAX_ERROR_CHARS)
    history: list[dict[str, Any]] = SQLField(
        default_factory=list,
        sa_column=Column(JSON, nullable=False),
        description="each attempt: {at, ok, error}, oldest first (at most SCALELAB_NOTIFY_MAX_ATTEMPTS)",
    )


class NotificationDelivery(NotificationDeliveryBase, table=True):
    __tablename__ = "notification_delivery"
    # The delivery loop's question each round: the pending rows that are due.
    __table_args__ = (Index("ix_notification_delivery_due", "state", "next_attempt_at"),)

    id: int | None = SQLField(default=None, primary_key=True)
    user_name: str = SQLField(foreign_key="user.name", index=True, max_length=32)


class NotificationDeliveryPublic(NotificationDeliveryBase):
    id: int


class NotificationDeliveriesPublic(BaseModel):
    data: list[NotificationDeliveryPublic]
    count: int


class RegressionWatch(SQLModel, table=True):
    """An ended experiment whose owner wants to hear of a regression: tested against the reference pinned for its
    spec once all its runs are read to their end, then deleted."""

    __tablename__ = "regression_watch"

    experiment_id: str = SQLField(primary_key=True, foreign_key="experiment.id", max_length=16)
    user_name: str = SQLField(foreign_key="user.name", max_length=32)
    created_at: datetime = SQLField(default_factory=utcnow)
