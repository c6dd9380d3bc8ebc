"""The webhook rules and the sending side without a database: the allow-list, https, forbidden addresses (a name
resolving to one when it is sent, DNS rebinding), no redirect followed, and the cluster's sendmail."""

from __future__ import annotations

import json
import socket
import stat
from pathlib import Path
from typing import Any

import pytest

from server.config import Settings
from server.services import webhook_rules
from server.services.delivery import SendFailed, backoff, send_email, send_webhook
from server.services.webhook_rules import Refused
from tests.notify_receivers import webhook_receiver


def rules(**changes: Any) -> Settings:
    return Settings(scheduler="local", **{"webhook_allow": ["hooks.example.org"], **changes})


def resolving_to(address: str) -> webhook_rules.Resolver:
    def resolve(host: str, port: int) -> list[tuple[object, object, object, object, tuple[object, ...]]]:
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]

    return resolve


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("10.0.0.7", "private"),
        ("192.168.1.1", "private"),
        ("169.254.169.254", "link-local"),  # the cloud's metadata service
        ("::ffff:10.0.0.7", "private"),
        ("0.0.0.0", "unspecified"),  # noqa: S104  (an address refused, not bound)
    ],
)
def test_a_name_resolving_to_an_internal_address_is_refused(address, kind):
    target = webhook_rules.parse("https://hooks.example.org/x", rules())
    with pytest.raises(Refused, match=f"resolves to {address}, an? {kind} address.*SCALELAB_WEBHOOK_ALLOW_PRIVATE"):
        webhook_rules.addresses(target, rules(), resolving_to(address))
    assert webhook_rules.addresses(target, rules(webhook_allow_private=True), resolving_to(address)) == [address]


def test_a_public_address_is_reached():
    target = webhook_rules.parse("https://hooks.example.org/x?a=1", rules())
    assert (target.host, target.port, target.path) == ("hooks.example.org", 443, "/x?a=1")
    assert webhook_rules.addresses(target, rules(), resolving_to("93.184.216.34")) == ["93.184.216.34"]


@pytest.mark.parametrize(
    ("url", "allow", "rule"),
    [
        ("https://evil.example.net/x", ["hooks.example.org"], "SCALELAB_WEBHOOK_ALLOW"),
        ("https://hooks.example.org.evil.net/x", ["hooks.example.org"], "SCALELAB_WEBHOOK_ALLOW"),
        ("https://hooks.example.org/other", ["https://hooks.example.org/services/"], "SCALELAB_WEBHOOK_ALLOW"),
        ("https://a.example.org/x", [], "SCALELAB_WEBHOOK_ALLOW"),
        ("http://hooks.example.org/x", ["hooks.example.org"], "SCALELAB_WEBHOOK_ALLOW_HTTP"),
        ("https://user:pw@hooks.example.org/x", ["hooks.example.org"], "no user name"),
        ("https://hooks.example.org /x", ["hooks.example.org"], "no spaces"),
        ("file:///etc/passwd", ["hooks.example.org"], "https://HOST/PATH"),
    ],
)
def test_a_url_off_the_rules_is_refused_naming_the_rule(url, allow, rule):
    with pytest.raises(Refused, match=rule):
        webhook_rules.parse(url, rules(webhook_allow=allow))


def test_allow_list_entries_name_a_host_its_subdomains_or_a_prefix():
    allow = ["chat.site.org", ".hooks.org", "https://slack.example.com/services/"]
    for url in ("https://chat.site.org/a", "https://x.hooks.org/b", "https://hooks.org/c",
                "https://slack.example.com/services/T/B"):  # fmt: skip
        webhook_rules.parse(url, rules(webhook_allow=allow))


def test_a_webhook_is_refused_when_its_name_resolves_to_an_internal_address_at_delivery():
    """Accepted when set (a public address then), refused when sent: the address is checked again, and the
    connection goes to the address checked."""
    with webhook_receiver() as receiver:
        allowed = rules(webhook_allow=["hooks.example.org"], webhook_allow_http=True)
        url = f"http://hooks.example.org:{receiver.port}/hook"
        with pytest.raises(SendFailed, match=r"refused: .*127\.0\.0\.1, a loopback address"):
            send_webhook(allowed, url, "hello", resolving_to("127.0.0.1"))
        assert receiver.bodies == []
        # Where the operator allows it, the same name reaches the receiver at the address checked.
        send_webhook(
            allowed.model_copy(update={"webhook_allow_private": True}), url, "hello", resolving_to("127.0.0.1")
        )
        assert receiver.bodies == [{"text": "hello"}]


def test_a_redirect_is_not_followed():
    with webhook_receiver(answers=[302]) as receiver:
        receiver.headers["Location"] = f"http://127.0.0.1:{receiver.port}/elsewhere"
        allowed = rules(webhook_allow=["127.0.0.1"], webhook_allow_http=True, webhook_allow_private=True)
        with pytest.raises(SendFailed, match=r"302.*redirects are not followed"):
            send_webhook(allowed, receiver.url, "hello")
        assert receiver.paths == ["/hook"]


def test_a_receiver_that_never_answers_times_out():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)  # accepts the connection, never answers
    try:
        port = listener.getsockname()[1]
        allowed = rules(
            webhook_allow=["127.0.0.1"], webhook_allow_http=True, webhook_allow_private=True, notify_timeout_s=0.5
        )
        with pytest.raises(SendFailed, match=r"(?i)timed out"):
            send_webhook(allowed, f"http://127.0.0.1:{port}/hook", "hello")
    finally:
        listener.close()


def test_email_goes_through_the_clusters_sendmail_as_one_argument(tmp_path: Path):
    sendmail = tmp_path / "sendmail"
    sendmail.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {tmp_path}/args\ncat > {tmp_path}/message\n')
    sendmail.chmod(sendmail.stat().st_mode | stat.S_IXUSR)
    send_email(rules(sendmail=sendmail), "me@example.org", "subject line", "the text")
    assert (tmp_path / "args").read_text().splitlines() == ["-i", "--", "me@example.org"]
    message = (tmp_path / "message").read_text()
    assert "Subject: subject line" in message and "the text" in message


def test_a_failing_sendmail_is_a_failed_attempt(tmp_path: Path):
    sendmail = tmp_path / "sendmail"
    sendmail.write_text("#!/bin/sh\necho 'no route' >&2\nexit 75\n")
    sendmail.chmod(sendmail.stat().st_mode | stat.S_IXUSR)
    with pytest.raises(SendFailed, match="exited with 75: no route"):
        send_email(rules(sendmail=sendmail), "me@example.org", "s", "t")


def test_back_off_doubles_up_to_an_hour():
    settings = rules(notify_backoff_s=30)
    assert [backoff(settings, n).total_seconds() for n in (1, 2, 3)] == [30, 60, 120]
    assert backoff(settings, 20).total_seconds() == 3600


def test_the_webhook_body_is_slack_compatible_json():
    with webhook_receiver() as receiver:
        allowed = rules(webhook_allow=["127.0.0.1"], webhook_allow_http=True, webhook_allow_private=True)
        send_webhook(allowed, receiver.url, 'a "quoted"\nline')
    assert json.dumps(receiver.bodies[0]) == json.dumps({"text": 'a "quoted"\nline'})
