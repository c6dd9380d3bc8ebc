"""Which webhook URLs a user may name and which addresses a webhook may reach: the operator's allow-list, https
unless plain http is allowed, and no private, loopback or link-local address unless allowed, checked on the address
the name resolves to at each delivery as well as when it is set (a name that resolved to a public address when set
may resolve to an internal one later: DNS rebinding). Each refusal names its rule."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from server.config import Settings

# What resolving a host answers: (family, type, proto, canonname, sockaddr) tuples, as socket.getaddrinfo's.
Resolver = Callable[[str, int], Sequence[tuple[object, object, object, object, tuple[object, ...]]]]


def system_resolver(host: str, port: int) -> Sequence[tuple[object, object, object, object, tuple[object, ...]]]:
    return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)


class Refused(ValueError):
    """A webhook URL or address the rules refuse: the message names the rule and what to change."""


@dataclass(frozen=True)
class Target:
    url: str
    scheme: str
    host: str
    port: int
    path: str  # with its query


def parse(url: str, settings: Settings) -> Target:
    """The URL's parts, once its scheme and the operator's allow-list accept it."""
    if any(ord(char) < 33 for char in url):
        raise Refused("a webhook URL has no spaces or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise Refused(f"not a URL: {exc}") from None
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise Refused("a webhook URL is https://HOST/PATH")
    if parts.scheme == "http" and not settings.webhook_allow_http:
        raise Refused("webhooks use https: the operator does not allow plain http (SCALELAB_WEBHOOK_ALLOW_HTTP)")
    if parts.username or parts.password:
        raise Refused("a webhook URL carries no user name or password")
    if not settings.webhook_allow:
        raise Refused("this server sends no webhooks: the operator allows no URL (SCALELAB_WEBHOOK_ALLOW)")
    host = parts.hostname.lower()
    if not any(_allowed(entry, url, host) for entry in settings.webhook_allow):
        raise Refused(
            f"{host} is not among the webhook hosts the operator allows (SCALELAB_WEBHOOK_ALLOW: "
            f"{', '.join(settings.webhook_allow)})"
        )
    path = parts.path or "/"
    if parts.query:
        path = f"{path}?{parts.query}"
    return Target(url, parts.scheme, host, port or (443 if parts.scheme == "https" else 80), path)


def _allowed(entry: str, url: str, host: str) -> bool:
    """An entry with a scheme is a URL prefix; `.example.org` is that domain's subdomains and itself; any other is
    one host."""
    if "://" in entry:
        return url.startswith(entry)
    entry = entry.lower()
    if entry.startswith("."):
        return host == entry[1:] or host.endswith(entry)
    return host == entry


def forbidden_why(address: str) -> str | None:
    """Why a webhook may not reach this address without the operator's leave; None: a public address."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    for kind, test in (
        ("loopback", ip.is_loopback),
        ("link-local", ip.is_link_local),
        ("unspecified", ip.is_unspecified),
        ("private", ip.is_private),
        ("multicast", ip.is_multicast),
        ("reserved", ip.is_reserved),
    ):
        if test:
            return kind
    return None


def _article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def addresses(target: Target, settings: Settings, resolve: Resolver = system_resolver) -> list[str]:
    """The addresses the target's host resolves to now, once each is one a webhook may reach: all of them, since a
    connection may go to any."""
    try:
        answers = resolve(target.host, target.port)
    except (OSError, UnicodeError) as exc:
        raise Refused(f"{target.host} cannot be resolved: {exc}") from None
    found = list(dict.fromkeys(str(answer[4][0]) for answer in answers))
    if not found:
        raise Refused(f"{target.host} resolves to no address")
    if not settings.webhook_allow_private:
        for address in found:
            why = forbidden_why(address)
            if why is not None:
                raise Refused(
                    f"{target.host} resolves to {address}, {_article(why)} {why} address: webhooks may reach only "
                    "public addresses unless the operator allows others (SCALELAB_WEBHOOK_ALLOW_PRIVATE)"
                )
    return found
