"""Real Unix users and groups for the PAM and sharing tests, made idempotently (as root), all named `sl-...` so
that they stay apart from other tests' users; and the PAM service the tests sign in through.

The tests' PAM service is the product's (server/pam/scalelab) with pam_unix's `nodelay`: pam_unix otherwise waits
about 2 s after each wrong password, which the product keeps (it slows guessing) and the suite cannot afford.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from server.services import unix_accounts

REPO = Path(__file__).resolve().parent.parent
PRODUCT_PAM = REPO / "server" / "pam" / "scalelab"
TEST_SERVICE = "scalelab-test"
USERS_GROUP = "sl-users"
ADMINS_GROUP = "sl-admins"
STUDY_GROUP = "sl-study"
OTHER_GROUP = "sl-other"
# name: (password, groups); every password is the name's own, long enough for any policy.
PEOPLE: dict[str, list[str]] = {
    "sl-alice": [USERS_GROUP, STUDY_GROUP],
    "sl-bob": [USERS_GROUP, STUDY_GROUP],
    "sl-erin": [USERS_GROUP, OTHER_GROUP],  # in the allowed group, not in alice's study group
    "sl-carol": [OTHER_GROUP],  # a Unix user outside the allowed group
    "sl-root": [USERS_GROUP, ADMINS_GROUP],  # an admin through admin_group
    "sl-dave": [USERS_GROUP],  # removed from the allowed group by a test
    "sl-locked": [USERS_GROUP],  # usermod -L
    "sl-expired": [USERS_GROUP],  # chage -E 0
}


def password_of(name: str) -> str:
    return f"{name}'s long passphrase"


def sh(*argv: str, stdin: str | None = None) -> None:
    subprocess.run(argv, input=stdin, capture_output=True, text=True, check=True, timeout=60)


def _exists(database: str, name: str) -> bool:
    return subprocess.run(["getent", database, name], capture_output=True, check=False).returncode == 0


def install_pam_services() -> None:
    """/etc/pam.d/scalelab (the product's file, as the shared instance installs it) and the tests' service."""
    product = PRODUCT_PAM.read_text()
    quick = product.replace("auth     required   pam_unix.so", "auth     required   pam_unix.so nodelay")
    assert quick != product, "the tests' PAM service must differ from the product's only by nodelay"
    for path, text in ((Path("/etc/pam.d/scalelab"), product), (Path(f"/etc/pam.d/{TEST_SERVICE}"), quick)):
        # Written only when it differs: a test on another worker (the shared instance's) may be signing in through it.
        if not path.is_file() or path.read_text() != text:
            path.write_text(text)


def ensure_people() -> None:
    """Every group and user above, as described, whatever an earlier run left."""
    for group in (USERS_GROUP, ADMINS_GROUP, STUDY_GROUP, OTHER_GROUP):
        if not _exists("group", group):
            sh("groupadd", group)
    for name, groups in PEOPLE.items():
        if not _exists("passwd", name):
            sh("useradd", "--create-home", "--shell", "/bin/bash", name)
        sh("usermod", "--groups", ",".join(groups), name)  # exactly these supplementary groups
        sh("chpasswd", stdin=f"{name}:{password_of(name)}\n")
        sh("usermod", "--unlock", name)
        sh("chage", "-E", "-1", name)
    sh("usermod", "--lock", "sl-locked")
    sh("chage", "-E", "0", "sl-expired")
    unix_accounts.forget_groups()


@pytest.fixture(scope="session")
def unix_people() -> None:
    """The users and groups above, and the PAM services; skipped where the tests are not root."""
    if os.geteuid() != 0:
        pytest.skip("making Unix users and writing /etc/pam.d needs root")
    install_pam_services()
    ensure_people()
