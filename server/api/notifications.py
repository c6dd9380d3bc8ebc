"""Notifications: the user's events and channels, a test message, and every delivery with its attempts."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from server.api.deps import CurrentUser, SessionDep, SettingsDep
from server.api.errors import UNREADABLE_BODY
from server.errors import Conflict
from server.models import (
    NotificationDeliveriesPublic,
    NotificationDeliveryPublic,
    NotificationSettingsPublic,
    NotificationSettingsUpdate,
)
from server.services import notifications

router = APIRouter(prefix="/api/notifications", tags=["notifications"])


@router.get(
    "/settings",
    response_model=NotificationSettingsPublic,
    summary="Your notification settings: the events you are told of, and where",
)
def get_settings(session: SessionDep, user: CurrentUser, settings: SettingsDep) -> NotificationSettingsPublic:
    return notifications.settings_of(session, user, settings)


@router.put(
    "/settings",
    response_model=NotificationSettingsPublic,
    summary="Choose the events you are told of (experiment_ended, run_failed, regression) and the channels",
    responses={
        **UNREADABLE_BODY,
        422: {
            "description": "not an e-mail address or URL, no e-mail on this server, or a webhook URL the operator's "
            "rules refuse (the message names the rule: the allow-list, https, or a private, loopback or "
            "link-local address)"
        },
    },
)
def put_settings(
    change: NotificationSettingsUpdate, session: SessionDep, user: CurrentUser, settings: SettingsDep
) -> NotificationSettingsPublic:
    """The settings are replaced whole: a channel left out (null) is no longer used. A webhook URL is checked
    against the operator's allow-list and its host resolved now; it is checked again at every delivery."""
    return notifications.update(session, user, change, settings)


@router.post(
    "/test",
    response_model=list[NotificationDeliveryPublic],
    summary="Send a test notification on each of your channels (queued; its delivery shows in /deliveries)",
    responses={409: {"description": "you have set no channel (neither e-mail nor webhook)"}},
)
def send_test(session: SessionDep, user: CurrentUser) -> list[NotificationDeliveryPublic]:
    queued = notifications.queue_test(session, user)
    if not queued:
        raise Conflict("set an e-mail address or a webhook URL first (PUT /api/notifications/settings)")
    return queued


@router.get(
    "/deliveries",
    response_model=NotificationDeliveriesPublic,
    summary="Your notifications, newest first: each one's state (pending, delivered, failed) and attempts",
)
def list_deliveries(
    session: SessionDep,
    user: CurrentUser,
    limit: Annotated[int, Query(ge=1, le=notifications.MAX_DELIVERIES_LISTED)] = 50,
) -> NotificationDeliveriesPublic:
    return notifications.deliveries(session, user, limit)
