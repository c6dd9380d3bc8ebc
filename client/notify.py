"""`scalelab notify`: the events you are told of (an experiment ended, a run failed or hung, a regression) and
where (e-mail, a webhook), a test message, and what became of each notification."""

from __future__ import annotations

import argparse

from client.api import Client
from client.command import EXIT_OK, Command, UsageError
from client.schemas import DeliveryView

EVENTS = ("experiment_ended", "run_failed", "regression")


def _delivery_line(row: DeliveryView) -> str:
    when = f"{row.created_at:%Y-%m-%d %H:%M}"
    tried = f"{row.attempts} attempt{'s' if row.attempts != 1 else ''}"
    line = f"{when} {row.event} by {row.channel} to {row.target}: {row.state} ({tried})"
    if row.state == "pending" and row.next_attempt_at is not None and row.attempts:
        line += f", next at {row.next_attempt_at:%H:%M:%S}"
    return line + (f"\n    last error: {row.last_error}" if row.last_error else "") + f"\n    {row.subject}"


def _events(text: str) -> list[str]:
    chosen = [word.strip() for word in text.split(",") if word.strip()]
    unknown = [word for word in chosen if word not in EVENTS]
    if unknown:
        raise UsageError(f"--events: no event {', '.join(unknown)} (the events: {', '.join(EVENTS)}; none: '')")
    return chosen


def notify(client: Client, args: argparse.Namespace) -> int:
    if args.action == "test":
        for row in client.notify_test():
            print(f"a test notification is queued by {row.channel} to {row.target} (scalelab notify deliveries)")
        return EXIT_OK
    if args.action == "deliveries":
        listed = client.deliveries(args.limit)
        for row in listed.data:
            print(_delivery_line(row))
        print(f"{len(listed.data)} of {listed.count} notifications")
        return EXIT_OK
    current = client.notify_settings()
    if args.action == "set":
        events = _events(args.events) if args.events is not None else current.events
        email = None if args.no_email else (args.email if args.email is not None else current.email)
        webhook = None if args.no_webhook else (args.webhook if args.webhook is not None else current.webhook_url)
        current = client.set_notify(events, email, webhook)
    elif any(value is not None for value in (args.events, args.email, args.webhook)) or args.no_email:
        raise UsageError("--events, --email and --webhook change settings: scalelab notify set ...")
    print(f"events:  {', '.join(current.events) or 'none'}")
    mail = "" if current.email_available else " (this server sends no e-mail)"
    hooks = "" if current.webhooks_available else " (this server allows no webhook)"
    print(f"e-mail:  {current.email or 'none'}{mail}")
    print(f"webhook: {current.webhook_url or 'none'}{hooks}")
    return EXIT_OK


def _arguments(sub: argparse.ArgumentParser) -> None:
    sub.add_argument(
        "action",
        nargs="?",
        default="show",
        choices=("show", "set", "test", "deliveries"),
        help="show (the default): your settings; set: change them; test: send a test notification on each "
        "channel; deliveries: the latest notifications, each one's state and attempts",
    )
    sub.add_argument(
        "--events", metavar="E1,E2", help=f"the events to be told of, comma-separated, of: {', '.join(EVENTS)}"
    )
    email = sub.add_mutually_exclusive_group()
    email.add_argument("--email", metavar="ADDRESS", help="send e-mail to this address")
    email.add_argument("--no-email", action="store_true", help="send no e-mail")
    webhook = sub.add_mutually_exclusive_group()
    webhook.add_argument("--webhook", metavar="URL", help="POST JSON with a `text` field (Slack, Mattermost) here")
    webhook.add_argument("--no-webhook", action="store_true", help="use no webhook")
    sub.add_argument("--limit", type=int, default=20, metavar="N", help="deliveries: how many (default: 20)")


COMMANDS = (
    Command(
        "notify",
        notify,
        "Choose the events you are told of (an experiment ended, a run failed or hung, a regression) and where",
        "By e-mail (through the server's mail host) and by webhook (a JSON POST with a Slack/Mattermost-compatible "
        "text field, to the URLs the operator allows). Notifications are sent by the server, retried with back-off "
        "when a receiver fails; each attempt shows in `scalelab notify deliveries`.",
        _arguments,
        (
            "scalelab notify",
            "scalelab notify set --events experiment_ended,run_failed --email me@example.org",
            "scalelab notify set --webhook https://chat.example.org/hooks/abc",
            "scalelab notify test",
            "scalelab notify deliveries",
        ),
    ),
)
