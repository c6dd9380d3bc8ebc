"""A shared instance as a centre runs it: the service as an unprivileged account, users signing in with their Unix
passwords, jobs submitted through slurmrestd as their users, run directories that belong to them.

Everything is real: the Unix users alice and bob (made here), PAM, slurmrestd with per-user JWTs minted by the
token helper through sudo, the local Slurm, the browser.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import pwd
import re
import stat
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, expect

from benches.server_process import running_server
from tests.browser.conftest import screenshot
from tests.factories import experiment_request

pytestmark = [pytest.mark.slurm, pytest.mark.browser, pytest.mark.torch]

REPO = Path(__file__).resolve().parents[2]
SERVICE = "scalelab"
USERS_GROUP = "scalelab-users"
STUDY_GROUP = "scalelab-study"  # alice shares with it; bob is a member
PREFIX = Path("/opt/scalelab")
RUNS_DIR = Path("/srv/scalelab/runs")
PASSWORDS = {"alice": "alice's long passphrase", "bob": "bob's long passphrase"}
SOCKET = Path("/run/scalelab-slurmrestd/slurmrestd.socket")


def sh(*argv: str, user: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    command = ["runuser", "-u", user, "--", *argv] if user else list(argv)
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    if check and result.returncode != 0:
        raise AssertionError(f"{command} exited {result.returncode}: {result.stderr[-3000:]}")
    return result


def ensure_user(name: str, password: str, groups: list[str]) -> None:
    if sh("id", "-u", name, check=False).returncode != 0:
        sh("useradd", "--create-home", "--shell", "/bin/bash", name)
    subprocess.run(["chpasswd"], input=f"{name}:{password}\n", text=True, check=True)
    sh("usermod", "--unlock", name, check=False)
    sh("usermod", "-a", "-G", ",".join(groups), name)


@pytest.fixture(scope="module")
def installed(slurm: None) -> Path:
    """The login node set up as the README's shared instance, with alice and bob."""
    if os.geteuid() != 0:
        pytest.skip("setting up a shared instance makes Unix users and writes /etc: it needs root")
    sh(str(REPO / "scripts" / "shared-instance"), "install", "--pam-shadow")
    if sh("getent", "group", STUDY_GROUP, check=False).returncode != 0:
        sh("groupadd", STUDY_GROUP)
    ensure_user("alice", PASSWORDS["alice"], [USERS_GROUP, STUDY_GROUP])
    ensure_user("bob", PASSWORDS["bob"], [USERS_GROUP, STUDY_GROUP])
    return PREFIX


@contextlib.contextmanager
def serving(installed: Path, **settings: str) -> Iterator[str]:
    """scalelab served by the service account, signing in through PAM, submitting through slurmrestd."""
    work = Path(pwd.getpwnam(SERVICE).pw_dir) / f"e2e-{uuid.uuid4().hex[:8]}"
    sh("mkdir", "-m", "0700", str(work), user=SERVICE)
    env = {
        "HOME": str(work.parent),
        "SCALELAB_AUTH": "true",
        "SCALELAB_SIGNIN": "pam",
        "SCALELAB_ALLOWED_GROUP": USERS_GROUP,
        "SCALELAB_SCHEDULER": "slurmrestd",
        "SCALELAB_RUNS_DIR": str(RUNS_DIR),
        # Tokens as short-lived as the helper allows: they expire, and are minted again, while the tests run.
        "SCALELAB_SLURM_TOKEN_LIFESPAN_S": "60",
        **settings,
    }
    with running_server(work, "slurmrestd", env, installed=installed, user=SERVICE) as url:
        yield url


@pytest.fixture(scope="module")
def shared_server(installed: Path) -> Iterator[str]:
    with serving(installed) as url:
        yield url


def token_of(url: str, name: str) -> dict[str, str]:
    credentials = base64.b64encode(f"{name}:{PASSWORDS[name]}".encode()).decode()
    made = httpx.post(f"{url}/api/tokens", headers={"Authorization": f"Basic {credentials}"}, timeout=30)
    assert made.status_code == 201, made.text
    return {"Authorization": f"Bearer {made.json()['token']}"}


def single_run(name: str, **base: object) -> dict:
    request = experiment_request(name=name, grid={"strategy": ["single"], "gpus": [1]})
    request["base"].update(base)
    return request


def submit(url: str, headers: dict[str, str], name: str, epochs: int = 1, **base: object) -> dict:
    created = httpx.post(
        f"{url}/api/experiments", json=single_run(name, epochs=epochs, **base), headers=headers, timeout=60
    )
    assert created.status_code == 201, created.text
    run: dict = created.json()["runs"][0]
    return run


def records(url: str, headers: dict[str, str], run_id: str) -> list[dict]:
    answer = httpx.get(f"{url}/api/runs/{run_id}/metrics", headers=headers, params={"history": "true"}, timeout=30)
    assert answer.status_code == 200, answer.text
    data: list[dict] = answer.json()["data"]
    return data


def wait_for(url: str, headers: dict[str, str], run_id: str, states: set[str], timeout_s: float = 180) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        run: dict = httpx.get(f"{url}/api/runs/{run_id}", headers=headers, timeout=30).json()
        if run["state"] in states:
            return run
        assert time.monotonic() < deadline, f"run {run_id} still {run['state']}: {run.get('message')}"
        time.sleep(1)


def test_alice_signs_in_with_her_cluster_password_in_the_browser(page: Page, shared_server: str):
    page.goto(f"{shared_server}/runs")
    expect(page).to_have_url(re.compile(r"/login\?next="))
    expect(page.locator("#account-hint")).to_contain_text("you log in to the cluster with")
    page.fill("#login-name", "alice")
    page.fill("#login-password", "not her password")
    page.click("button[type=submit]")
    expect(page.locator("#login-error")).to_be_visible()
    page.fill("#login-password", PASSWORDS["alice"])
    page.click("button[type=submit]")
    expect(page.locator("#signed-in-as")).to_have_text("alice")


def sign_in(page: Page, url: str, name: str, target: str) -> None:
    page.goto(f"{url}{target}")
    expect(page).to_have_url(re.compile(r"/login\?next="))
    page.fill("#login-name", name)
    page.fill("#login-password", PASSWORDS[name])
    page.click("button[type=submit]")
    expect(page.locator("#signed-in-as")).to_have_text(name)


def test_alice_shares_from_the_page_and_bob_sees_it_read_only(page: Page, shared_server: str):
    url = shared_server
    alice, bob = token_of(url, "alice"), token_of(url, "bob")
    request = experiment_request(name="alice's study", grid={"strategy": ["single"], "gpus": [1]})
    request["base"]["epochs"] = 1
    created = httpx.post(f"{url}/api/experiments", json=request, headers=alice, timeout=60).json()
    experiment = created["id"]
    try:
        assert httpx.get(f"{url}/api/experiments/{experiment}", headers=bob, timeout=30).status_code == 404

        sign_in(page, url, "alice", f"/experiments/{experiment}")
        expect(page.locator("#who-sees")).to_have_text("alice and the admins only")
        page.select_option("#sharing-with", "group")
        page.fill("#sharing-group", "sl-no-such-group")
        page.click("#sharing-form button[type=submit]")
        expect(page.locator("#sharing-status")).to_contain_text("no Unix group")
        page.fill("#sharing-group", STUDY_GROUP)
        page.click("#sharing-form button[type=submit]")
        expect(page.locator("#who-sees")).to_contain_text(f"the Unix group {STUDY_GROUP}")
        screenshot(page, "experiment-shared")

        shown = httpx.get(f"{url}/api/experiments/{experiment}", headers=bob, timeout=30)
        assert shown.status_code == 200 and shown.json()["sharing_group"] == STUDY_GROUP
        run = created["runs"][0]["id"]
        assert httpx.post(f"{url}/api/runs/{run}/cancel", headers=bob, timeout=30).status_code == 403

        page.select_option("#sharing-with", "private")
        page.click("#sharing-form button[type=submit]")
        expect(page.locator("#who-sees")).to_have_text("alice and the admins only")
        assert httpx.get(f"{url}/api/experiments/{experiment}", headers=bob, timeout=30).status_code == 404
    finally:
        httpx.post(f"{url}/api/experiments/{experiment}/cancel", headers=alice, timeout=30)


def test_alices_job_runs_as_her_and_its_files_are_hers(shared_server: str):
    alice = token_of(shared_server, "alice")
    run = wait_for(shared_server, alice, submit(shared_server, alice, "as alice")["id"], {"completed", "failed"})
    assert run["state"] == "completed", run
    uid = pwd.getpwnam("alice").pw_uid
    # Slurm's accounting says whose job it was.
    # By the job's name too: job ids start again after a controller's state is wiped, and slurmdbd keeps the old.
    name = f"--name=scalelab-{run['id']}"
    accounted = sh("sacct", "-n", "-X", "-P", "-j", run["job_id"], name, "-o", "User,UID").stdout.split()
    assert accounted and accounted[0].split("|")[0] == "alice", accounted
    # The job says so itself, in its output, which the service could read through its group.
    log = httpx.get(f"{shared_server}/api/runs/{run['id']}/log", headers=alice, timeout=30).json()
    assert f"uid {uid}" in log["text"], log["text"][-2000:]
    # Its directory and files are alice's, readable by the service's group and nobody else.
    run_dir = Path(run["run_dir"])
    service_gid = pwd.getpwnam(SERVICE).pw_gid
    for path in [run_dir, *run_dir.rglob("*")]:
        info = path.lstat()
        assert info.st_uid == uid, path
        assert info.st_gid == service_gid, path
        assert not info.st_mode & (stat.S_IRWXO | stat.S_IWGRP), f"{path}: {stat.filemode(info.st_mode)}"
    metrics = httpx.get(f"{shared_server}/api/runs/{run['id']}/metrics", headers=alice, timeout=30).json()
    assert metrics["count"] >= 1, metrics


def test_bob_can_neither_read_see_nor_cancel_alices_run_until_she_shares_it(shared_server: str):
    alice, bob = token_of(shared_server, "alice"), token_of(shared_server, "bob")
    run = submit(shared_server, alice, "alice's private one", epochs=50)
    run = wait_for(shared_server, alice, run["id"], {"running", "failed", "completed"})
    assert run["state"] == "running", run
    experiment = run["experiment_id"]

    # On disk: bob cannot read her run's directory.
    denied = sh("ls", run["run_dir"], user="bob", check=False)
    assert denied.returncode != 0 and "Permission denied" in denied.stderr
    # Through scalelab: as if it did not exist.
    assert httpx.get(f"{shared_server}/api/experiments/{experiment}", headers=bob, timeout=30).status_code == 404
    assert httpx.get(f"{shared_server}/api/runs/{run['id']}/log", headers=bob, timeout=30).status_code == 404
    listed = httpx.get(f"{shared_server}/api/experiments", headers=bob, timeout=30).json()
    assert experiment not in {item["id"] for item in listed["data"]}
    assert httpx.post(f"{shared_server}/api/runs/{run['id']}/cancel", headers=bob, timeout=30).status_code == 404
    # Through slurmrestd, with his own token: Slurm itself refuses.
    bob_jwt = sh("scontrol", "token", "username=bob", "lifespan=120").stdout.strip().partition("=")[2]
    refused = sh(
        "curl", "-sS", "--unix-socket", str(SOCKET), "-X", "DELETE",
        "-H", "X-SLURM-USER-NAME: bob", "-H", f"X-SLURM-USER-TOKEN: {bob_jwt}",
        f"http://localhost/slurm/v0.0.38/job/{run['job_id']}",
    )  # fmt: skip
    errors = json.loads(refused.stdout)["errors"]
    assert [error["error_number"] for error in errors] == [2002], errors  # ESLURM_ACCESS_DENIED
    assert wait_for(shared_server, alice, run["id"], {"running"})["state"] == "running"

    # Shared with a group bob is in: he sees it, read-only.
    shared = httpx.put(
        f"{shared_server}/api/experiments/{experiment}/sharing",
        json={"with": "group", "group": STUDY_GROUP},
        headers=alice,
        timeout=30,
    )
    assert shared.status_code == 200, shared.text
    assert httpx.get(f"{shared_server}/api/experiments/{experiment}", headers=bob, timeout=30).status_code == 200
    assert httpx.get(f"{shared_server}/api/runs/{run['id']}/log", headers=bob, timeout=30).status_code == 200
    assert httpx.post(f"{shared_server}/api/runs/{run['id']}/cancel", headers=bob, timeout=30).status_code in (403, 404)

    # alice cancels her own job: through slurmrestd with her token.
    assert httpx.post(f"{shared_server}/api/runs/{run['id']}/cancel", headers=alice, timeout=30).status_code == 202
    assert wait_for(shared_server, alice, run["id"], {"cancelled"})["state"] == "cancelled"


def test_the_service_is_not_root_and_slurmrestd_listens_on_no_network(shared_server: str):
    port = shared_server.rsplit(":", 1)[1]
    listening = sh("ss", "-Hltnp", f"sport = :{port}").stdout
    pid = re.search(r"pid=(\d+)", listening)
    assert pid, listening
    uid_line = next(line for line in Path(f"/proc/{pid[1]}/status").read_text().splitlines() if line.startswith("Uid"))
    assert uid_line.split()[1:] == [str(pwd.getpwnam(SERVICE).pw_uid)] * 4, uid_line
    # slurmrestd: a unix socket, no TCP or UDP listener, and not root.
    assert SOCKET.is_socket()
    assert "slurmrestd" not in sh("ss", "-Hlntup").stdout
    restd = sh("pgrep", "-x", "slurmrestd").stdout.split()
    assert restd
    for restd_pid in restd:
        assert Path(f"/proc/{restd_pid}").stat().st_uid != 0


def test_a_requeued_job_comes_back_as_its_user_and_resumes(shared_server: str):
    """What a preemption with PreemptMode=REQUEUE does: the job is killed and queued again; the next start is
    still alice's, in her directory, and goes on from her checkpoint. Meanwhile the 60 s tokens expire."""
    alice = token_of(shared_server, "alice")
    run = submit(shared_server, alice, "requeued", epochs=10_000, steps_per_epoch=50, checkpoint_every=1)
    deadline = time.monotonic() + 240
    while 2 not in [r["epoch"] for r in records(shared_server, alice, run["id"]) if r["kind"] == "epoch"]:
        assert time.monotonic() < deadline, "no second epoch"
        time.sleep(1)
    job_id = httpx.get(f"{shared_server}/api/runs/{run['id']}", headers=alice, timeout=30).json()["job_id"]
    sh("scontrol", "requeue", job_id)
    while not any(r["kind"] == "resume" for r in records(shared_server, alice, run["id"])):
        assert time.monotonic() < deadline + 120, "the requeued job did not resume"
        time.sleep(1)
    assert httpx.post(f"{shared_server}/api/runs/{run['id']}/cancel", headers=alice, timeout=30).status_code == 202
    ended = wait_for(shared_server, alice, run["id"], {"cancelled"})
    log = httpx.get(f"{shared_server}/api/runs/{ended['id']}/log", headers=alice, timeout=30).json()["text"]
    assert log.count(f"runs as alice (uid {pwd.getpwnam('alice').pw_uid})") == 2, log[-3000:]
    kinds = [r["kind"] for r in records(shared_server, alice, run["id"])]
    assert kinds.count("start") == 2 and kinds.count("resume") == 1


def test_slurmrestd_down_is_a_503_and_nothing_is_lost(shared_server: str):
    alice = token_of(shared_server, "alice")
    sh("pkill", "-x", "slurmrestd")
    try:
        refused = httpx.post(
            f"{shared_server}/api/experiments", json=single_run("while slurmrestd is down"), headers=alice, timeout=60
        )
        assert refused.status_code == 503, refused.text
        assert int(refused.headers["Retry-After"]) > 0
        kept = refused.json()["experiment_id"]
        runs = httpx.get(f"{shared_server}/api/runs", params={"experiment_id": kept}, headers=alice, timeout=30)
        assert [run["state"] for run in runs.json()["data"]] == ["submit_failed"]
    finally:
        sh(str(REPO / "scripts" / "slurm-local"), "up")  # starts what is not running: slurmrestd
    again = httpx.post(f"{shared_server}/api/experiments/{kept}/resubmit", headers=alice, timeout=60)
    assert again.status_code == 200, again.text
    assert (
        wait_for(shared_server, alice, again.json()["data"][0]["id"], {"completed", "failed"})["state"] == "completed"
    )


def start_slurmrestd(conf: Path, socket: Path) -> subprocess.Popen[bytes]:
    """Another slurmrestd, as scripts/slurm-local runs one (its own user, JWT, a unix socket), reading `conf`."""
    sh("install", "-d", "-o", "slurmrestd", "-g", "slurmrestd", "-m", "0755", str(socket.parent))
    socket.unlink(missing_ok=True)
    command = ["setpriv", "--reuid=slurmrestd", "--regid=slurmrestd", "--clear-groups", "slurmrestd", "-f", str(conf)]
    command += ["-a", "rest_auth/jwt", "-s", "v0.0.38,dbv0.0.38", f"unix:{socket}"]
    with (socket.parent / "slurmrestd.log").open("ab") as log:
        process = subprocess.Popen(command, env={**os.environ, "SLURM_JWT": "daemon"}, stdout=log, stderr=log)
    deadline = time.monotonic() + 30
    while not socket.is_socket():
        assert process.poll() is None and time.monotonic() < deadline, "slurmrestd did not start"
        time.sleep(0.2)
    return process


def test_a_controller_slurmrestd_cannot_reach_is_a_503_and_resubmitting_works_once_it_is_back(installed):
    """slurmrestd up, slurmctld out of its reach (its slurm.conf names a port nobody listens on): a submission is
    kept submit_failed with a 503, /readyz says so; once slurmrestd reaches the controller, resubmitting runs it."""
    real = Path("/etc/slurm/slurm.conf").read_text()
    socket = Path("/run/scalelab-slurmrestd-outage/slurmrestd.socket")
    sh("install", "-d", "-m", "0755", str(socket.parent))
    conf = socket.parent / "slurm.conf"  # where the slurmrestd user can read it
    conf.write_text(re.sub(r"(?m)^SlurmctldPort=.*$", "", real) + "SlurmctldPort=6999\n")
    restd = start_slurmrestd(conf, socket)
    try:
        with serving(installed, SCALELAB_SLURMRESTD_URL=f"unix:{socket}") as url:
            alice = token_of(url, "alice")
            refused = httpx.post(f"{url}/api/experiments", json=single_run("outage"), headers=alice, timeout=120)
            assert refused.status_code == 503, refused.text
            assert int(refused.headers["Retry-After"]) > 0
            assert httpx.get(f"{url}/readyz", timeout=60).status_code == 503
            kept = refused.json()["experiment_id"]

            restd.terminate()
            restd.wait(timeout=30)
            conf.write_text(real)
            restd = start_slurmrestd(conf, socket)
            again = httpx.post(f"{url}/api/experiments/{kept}/resubmit", headers=alice, timeout=120)
            assert again.status_code == 200, again.text
            run = again.json()["data"][0]
            assert wait_for(url, alice, run["id"], {"completed", "failed"})["state"] == "completed"
            assert httpx.get(f"{url}/readyz", timeout=60).status_code == 200
    finally:
        restd.terminate()
        restd.wait(timeout=30)
