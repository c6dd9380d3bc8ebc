"""`scalelab notify`: show and set the events and channels, a test notification queued and then delivered to a
local receiver, the deliveries listed, and the refusals (a bad address, a forbidden webhook, an unknown event)."""

from __future__ import annotations

import pytest

from client import cli
from server.services import delivery
from tests.client.helpers import scalelab
from tests.conftest import make_client
from tests.notify_receivers import webhook_receiver
from tests.server.api.test_notifications import notifying


@pytest.fixture
def notify_client(settings, local_scheduler):
    with make_client(notifying(settings), local_scheduler) as client:
        yield client


def test_set_show_test_and_list_deliveries(notify_client, capsys):
    client = notify_client
    code, out, _ = scalelab(client, capsys, "notify")
    assert code == cli.EXIT_OK and "events:  none" in out and "this server sends no e-mail" in out
    with webhook_receiver(answers=[500]) as receiver:
        code, out, _ = scalelab(
            client, capsys, "notify", "set", "--events", "experiment_ended,run_failed", "--webhook", receiver.url
        )
        assert code == cli.EXIT_OK and "events:  experiment_ended, run_failed" in out and receiver.url in out
        code, out, _ = scalelab(client, capsys, "notify", "test")
        assert code == cli.EXIT_OK and f"by webhook to {receiver.url}" in out
        settings = client.app.state.settings
        delivery.deliver_due(client.app.state.engine, settings, delivery.sender(settings))
        code, out, _ = scalelab(client, capsys, "notify", "deliveries")
        assert code == cli.EXIT_OK and "test by webhook" in out and "pending (1 attempt), next at" in out
        assert "last error: the receiver answered 500" in out and "1 of 1 notifications" in out
    # Set changes only what it names.
    code, out, _ = scalelab(client, capsys, "notify", "set", "--events", "")
    assert code == cli.EXIT_OK and "events:  none" in out and receiver.url in out


def test_refusals(notify_client, capsys):
    client = notify_client
    code, _, err = scalelab(client, capsys, "notify", "set", "--events", "ended")
    assert code == cli.EXIT_USAGE and "no event ended" in err
    code, _, err = scalelab(client, capsys, "notify", "set", "--webhook", "https://10.0.0.1/x")
    assert code == cli.EXIT_USAGE and "SCALELAB_WEBHOOK_ALLOW" in err
    code, _, err = scalelab(client, capsys, "notify", "set", "--email", "not an address")
    assert code == cli.EXIT_USAGE and "email" in err
    code, _, err = scalelab(client, capsys, "notify", "test")
    assert code != cli.EXIT_OK and "set an e-mail address or a webhook URL first" in err
    code, _, err = scalelab(client, capsys, "notify", "--email", "me@example.org")
    assert code == cli.EXIT_USAGE and "scalelab notify set" in err
