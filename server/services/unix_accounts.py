"""The login node's Unix accounts: a password checked through PAM, a user's groups, whether a name is a Unix user.

Nothing else in scalelab talks to PAM or reads the user and group databases (NSS): what sign-in and visibility
need of them comes from here. A user's groups are kept for GROUPS_TTL_S, so that a request does not ask NSS
(which may be LDAP or sssd across the network) each time; a user removed from a group loses it within that time.
"""

from __future__ import annotations

import enum
import grp
import logging
import os
import pwd
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from server.services import signed_in

log = logging.getLogger(__name__)

GROUPS_TTL_S = 60.0
# PAM calls that may run at once: each can wait seconds (pam_unix's delay after a failure, a remote directory), and
# a flood of sign-ins must not take every thread of the server's pool.
MAX_CONCURRENT_PAM = 8
# A password longer than this is no one's (PAM modules cut or refuse such lengths anyway).
MAX_PASSWORD_BYTES = 4096


class Verdict(enum.Enum):
    ok = "ok"
    wrong = "wrong"  # an unknown user, a wrong password, a locked account: PAM does not tell them apart reliably
    expired = "expired"  # the password was right, but the account or its password has expired
    error = "error"  # PAM itself failed (no such service, a module missing)


@dataclass(frozen=True)
class PamAnswer:
    verdict: Verdict
    detail: str  # PAM's own words, for the log


_pam_slots = threading.BoundedSemaphore(MAX_CONCURRENT_PAM)
# Where Linux-PAM looks for a service's rules (the admin's, then the distribution's).
PAM_DIRS = (Path("/etc/pam.d"), Path("/usr/lib/pam.d"))


def pam_service_defined(service: str) -> bool:
    """Whether the service has rules of its own. Linux-PAM falls back to the service `other` for a service it does
    not find, which on Debian accepts any Unix password: a misspelt SCALELAB_PAM_SERVICE must not pass for one."""
    return any((directory / service).is_file() for directory in PAM_DIRS)


def check_password(service: str, name: str, password: str) -> PamAnswer:
    """Authenticate `name` with `password` through the PAM `service`, then ask whether the account may be used
    (pam_acct_mgmt: locked, expired). Blocking: call it off the event loop.

    Each call has its own PAM handle and python-pam authenticator (which keeps the last call's code and messages),
    so calls from several threads share no state."""
    import pam  # only a PAM sign-in needs libpam

    try:
        encoded = password.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: no one's password
        return PamAnswer(Verdict.wrong, "refused before PAM: the password is not UTF-8")
    if "\0" in name or b"\0" in encoded or len(encoded) > MAX_PASSWORD_BYTES:
        return PamAnswer(Verdict.wrong, "refused before PAM: a NUL, or a password over 4096 bytes")
    if not pam_service_defined(service):
        return PamAnswer(Verdict.error, f"no PAM service {service!r} in {' or '.join(map(str, PAM_DIRS))}")
    with _pam_slots:
        authenticator = pam.PamAuthenticator()
        try:
            # No credentials are established: scalelab only asks whether the password is right.
            ok = authenticator.authenticate(name, encoded, service=service, resetcreds=False)
        except (ValueError, UnicodeError) as exc:
            return PamAnswer(Verdict.wrong, f"refused by python-pam: {exc}")
    code, reason = authenticator.code, str(authenticator.reason)
    if ok:
        return PamAnswer(Verdict.ok, reason)
    if code in (pam.PAM_ACCT_EXPIRED, pam.PAM_NEW_AUTHTOK_REQD, pam.PAM_AUTHTOK_EXPIRED):
        # python-pam asks for the account's state only once the password was right.
        return PamAnswer(Verdict.expired, reason)
    if code in (pam.PAM_AUTH_ERR, pam.PAM_USER_UNKNOWN, pam.PAM_PERM_DENIED, pam.PAM_MAXTRIES):
        return PamAnswer(Verdict.wrong, reason)
    return PamAnswer(Verdict.error, f"PAM code {code}: {reason}")


def is_unix_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except (KeyError, ValueError):  # ValueError: a NUL in the name
        return False
    return True


def group_exists(name: str) -> bool:
    try:
        grp.getgrnam(name)
    except (KeyError, ValueError):
        return False
    return True


_groups: dict[str, tuple[float, frozenset[str] | None]] = {}
_groups_lock = threading.Lock()


def groups_of(name: str) -> frozenset[str] | None:
    """The names of the user's groups, primary and supplementary; None for a name that is no Unix user.
    Kept GROUPS_TTL_S."""
    now = time.monotonic()
    with _groups_lock:
        cached = _groups.get(name)
    if cached is not None and cached[0] > now:
        return cached[1]
    found = _look_up_groups(name)
    with _groups_lock:
        _groups[name] = (now + GROUPS_TTL_S, found)
    return found


def _look_up_groups(name: str) -> frozenset[str] | None:
    try:
        entry = pwd.getpwnam(name)
    except (KeyError, ValueError):
        return None
    try:
        gids = os.getgrouplist(name, entry.pw_gid)
    except OSError:
        gids = [entry.pw_gid]
    names = set()
    for gid in gids:
        try:
            names.add(grp.getgrgid(gid).gr_name)
        except KeyError:  # a gid with no name
            continue
    return frozenset(names)


def forget_groups() -> None:
    """Drop every kept group list (tests, and an operator's change that must count at once), and with them every
    sender kept as allowed by them."""
    with _groups_lock:
        _groups.clear()
    signed_in.forget_everyone()
