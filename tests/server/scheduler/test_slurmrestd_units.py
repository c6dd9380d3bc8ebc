"""The slurmrestd backend's pure parts: #SBATCH lines as v0.0.38 job fields, exit codes, URLs, token caching."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from server.profiles import load_catalog
from server.scheduler import SchedulerError, SchedulerUnavailable
from server.scheduler.slurmrestd import SBATCH_FIELDS, check_url, exit_code, job_description
from server.scheduler.tokens import Tokens, run_token_command

GOLDEN = Path(__file__).parents[2] / "golden"


def golden_scripts() -> list[Path]:
    return sorted(GOLDEN.glob("*.sbatch"))


def test_every_option_of_every_golden_script_has_a_field():
    assert golden_scripts()
    for path in golden_scripts():
        options = re.findall(r"^#SBATCH --([a-z-]+)", path.read_text(), re.MULTILINE)
        assert options, path
        described = job_description(path.read_text())
        assert len(described) == len(set(options)), (path, described)
        for option in options:
            assert option in SBATCH_FIELDS, f"{path.name}: --{option}"


def test_every_option_a_builtin_profile_offers_has_a_field():
    catalog = load_catalog(None, "local")
    offered = {name for profile in catalog.profiles.values() for name in profile.sbatch_options}
    assert offered
    assert offered <= set(SBATCH_FIELDS), offered - set(SBATCH_FIELDS)


def test_a_rendered_head_as_job_fields():
    script = (
        "#!/bin/bash\n# scalelab run abc\n"
        "#SBATCH --job-name=scalelab-abc\n#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=4\n"
        "#SBATCH --cpus-per-task=8\n#SBATCH --gres=gpu:4\n#SBATCH --exclusive\n#SBATCH --time=02:00:00\n"
        "#SBATCH --partition=normal\n#SBATCH --account=g34\n#SBATCH --qos=high\n#SBATCH --output=/dev/null\n"
        "#SBATCH --open-mode=append\n#SBATCH --signal=USR1@300\n#SBATCH --requeue\n#SBATCH --mem=4G\n"
        "#SBATCH --nice=100\n"
        "set -euo pipefail\n#SBATCH --partition=ignored-after-the-first-command\n"
    )
    assert job_description(script) == {
        "name": "scalelab-abc", "nodes": "2", "tasks_per_node": "4", "cpus_per_task": "8", "gres": "gpu:4",
        "exclusive": "exclusive", "time_limit": "02:00:00", "partition": "normal", "account": "g34", "qos": "high",
        "standard_output": "/dev/null", "open_mode": "append", "signal": "USR1@300", "requeue": True,
        "memory_per_node": "4G", "nice": "100",
    }  # fmt: skip


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("#SBATCH --chdir=/tmp", "--chdir has no field"),
        ("#SBATCH --export=ALL", "--export has no field"),
        ("#SBATCH -N 2", "cannot read the line"),
        ("#SBATCH --nodes 2", "cannot read the line"),
        ("#SBATCH --time", "--time needs a value"),
    ],
)
def test_what_the_table_cannot_say_is_refused_by_name(line, why):
    with pytest.raises(SchedulerError, match=re.escape(why)):
        job_description(f"#!/bin/bash\n{line}\ntrue\n")


def test_no_requeue_and_hold_are_flags():
    assert job_description("#!/bin/sh\n#SBATCH --no-requeue\n#SBATCH --hold\n") == {"requeue": False, "hold": True}


@pytest.mark.parametrize(
    ("status", "code"), [(0, "0:0"), (3 << 8, "3:0"), (75 << 8, "75:0"), (15, "0:15"), (9, "0:9"), (None, None)]
)
def test_raw_wait_status_as_slurm_writes_exit_codes(status, code):
    assert exit_code(status) == code


@pytest.mark.parametrize(
    "url", ["unix:/run/scalelab-slurmrestd/slurmrestd.socket", "http://127.0.0.1:6820", "http://[::1]:6820",
            "http://localhost:6820/"],
)  # fmt: skip
def test_loopback_urls_are_accepted(url):
    assert check_url(url) == url


@pytest.mark.parametrize(
    "url", ["http://10.0.0.1:6820", "http://slurm.example.org:6820", "https://127.0.0.1:6820", "unix:relative",
            "http://127.0.0.1.example.org:6820", "ftp://localhost/"],
)  # fmt: skip
def test_other_urls_are_refused(url):
    with pytest.raises(ValueError, match="slurmrestd URL"):
        check_url(url)


def test_settings_refuse_a_remote_slurmrestd(monkeypatch):
    from pydantic import ValidationError

    from server.config import Settings

    with pytest.raises(ValidationError, match="loopback"):
        Settings(scheduler="slurmrestd", slurmrestd_url="http://192.0.2.1:6820")


def test_the_settings_select_the_slurmrestd_backend(tmp_path):
    from server.config import Settings
    from server.main import make_scheduler
    from server.scheduler.slurmrestd import SlurmrestdScheduler

    settings = Settings(scheduler="slurmrestd", runs_dir=tmp_path, slurmrestd_url="http://127.0.0.1:6820")
    scheduler = make_scheduler(settings)
    assert isinstance(scheduler, SlurmrestdScheduler)
    assert (scheduler.name, scheduler.runs_as_user, scheduler.url) == ("slurmrestd", True, "http://127.0.0.1:6820")


def test_concurrent_first_requests_share_one_mint():
    from concurrent.futures import ThreadPoolExecutor

    mint = FakeMint()
    tokens = Tokens(["helper"], 600, run=mint)
    with ThreadPoolExecutor(8) as pool:
        assert set(pool.map(lambda _: tokens.user_token("alice"), range(16))) == {"tok1"}
    assert len(mint.calls) == 1


# ---- tokens --------------------------------------------------------------------------------------------------------


class FakeMint:
    """The token command's boundary: records each call, answers as told."""

    def __init__(self, answer: tuple[int, str, str] = (0, "SLURM_JWT=tok{n}\n", "")) -> None:
        self.calls: list[list[str]] = []
        self.answer = answer

    def __call__(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        self.calls.append(list(argv))
        code, out, err = self.answer
        return subprocess.CompletedProcess(argv, code, out.format(n=len(self.calls)), err)


class Clock:
    now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_tokens_are_cached_until_two_thirds_of_their_lifespan():
    mint, clock = FakeMint(), Clock()
    tokens = Tokens(["sudo", "-n", "/usr/local/sbin/scalelab-slurm-token"], 600, run=mint, clock=clock)
    assert tokens.user_token("alice") == "tok1"
    assert mint.calls == [["sudo", "-n", "/usr/local/sbin/scalelab-slurm-token", "alice", "600"]]
    clock.now += 399
    assert tokens.user_token("alice") == "tok1"
    assert tokens.user_token("bob") == "tok2"
    clock.now += 2
    assert tokens.user_token("alice") == "tok3"
    assert tokens.service_token() == "tok4"
    assert mint.calls[-1] == ["scontrol", "token", "lifespan=600"]
    tokens.forget("alice")
    assert tokens.user_token("alice") == "tok5"
    assert tokens.service_token() == "tok4"


def test_a_users_token_lives_at_most_the_helpers_hour():
    mint = FakeMint()
    Tokens(["helper"], 86_400, run=mint).user_token("alice")
    assert mint.calls == [["helper", "alice", "3600"]]


def test_a_refusal_names_the_user_and_what_the_helper_said():
    said = "scalelab-slurm-token: refused: alice is not a member of the group scalelab-users\n"
    tokens = Tokens(["helper"], 600, run=FakeMint((2, "", said)))
    with pytest.raises(SchedulerError, match="for alice: scalelab-slurm-token: refused: alice is not a member") as e:
        tokens.user_token("alice")
    assert not isinstance(e.value, SchedulerUnavailable)


def test_no_token_line_is_an_error():
    with pytest.raises(SchedulerError, match="no SLURM_JWT= line"):
        Tokens(["helper"], 600, run=FakeMint((0, "hello\n", ""))).user_token("alice")


def test_an_odd_user_name_never_reaches_the_helper():
    mint = FakeMint()
    with pytest.raises(SchedulerError, match="not a Unix user name"):
        Tokens(["helper"], 600, run=mint).user_token("-n root")
    assert mint.calls == []


def test_slurmctld_down_while_minting_is_unavailable():
    down = "scontrol token failed for alice: slurm_request_token: Unable to contact slurm controller (connect failure)"
    with pytest.raises(SchedulerUnavailable):
        Tokens(["helper"], 600, run=FakeMint((1, "", down))).user_token("alice")


def test_a_missing_or_hanging_command_is_unavailable(tmp_path, monkeypatch):
    with pytest.raises(SchedulerUnavailable, match="not found"):
        run_token_command([str(tmp_path / "missing"), "alice", "600"])
    monkeypatch.setattr("server.scheduler.tokens.TOKEN_COMMAND_TIMEOUT_S", 0.2)
    with pytest.raises(SchedulerUnavailable, match="did not answer"):
        run_token_command(["sleep", "5"])
