"""The slurmrestd backend's pure parts: #SBATCH lines as v0.0.38 job fields and v0.0.40+'s typed ones, answers of
both API versions (recorded from the real 22.05 and 24.11 daemons), exit codes, URLs, token caching."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from contract.states import RunState
from server.profiles import load_catalog
from server.scheduler import SchedulerError, SchedulerUnavailable
from server.scheduler.slurmrestd import (
    _SUBMITTED_ANYWAY,
    API_VERSIONS,
    SBATCH_FIELDS,
    _cancel_refusals,
    _errors,
    _pinged,
    _stale_token,
    _state_word,
    _status,
    check_url,
    exit_code,
    job_description,
    offered_versions,
    typed_job,
)
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
    from server.scheduler.choice import make_scheduler
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


# ---- the API versions, from payloads recorded from the real daemons ------------------------------------------------

DATA = Path(__file__).parent / "data"
RELEASES = {"22.05": "v0.0.38", "24.11": "v0.0.42"}


def recorded(release: str) -> dict[str, Any]:
    """What slurmrestd of that release answered (recorded from the real daemon: see the file's recorded_from)."""
    answer: dict[str, Any] = json.loads((DATA / f"slurmrestd-{release}-{RELEASES[release]}.json").read_text())
    return answer


@pytest.mark.parametrize("release", RELEASES)
def test_the_newest_version_offered_is_spoken(release):
    offered = offered_versions(recorded(release)["openapi_slurm_paths"])
    assert next(version for version in API_VERSIONS if version in offered) == RELEASES[release]
    assert offered == {"22.05": ["v0.0.38"], "24.11": ["v0.0.40", "v0.0.41", "v0.0.42"]}[release]


@pytest.mark.parametrize("release", RELEASES)
def test_the_same_jobs_read_the_same_on_both_releases(release):
    jobs = {job["name"]: job for job in recorded(release)["jobs"]["body"]["jobs"]}
    read = {name: _status(job) for name, job in jobs.items()}
    assert {name: (s.state, s.raw_state, s.reason, s.exit_code, s.name) for name, s in read.items() if s} == {
        "rec-ok": (RunState.completed, "COMPLETED", None, "0:0", "rec-ok"),
        "rec-exit3": (RunState.failed, "FAILED", "NonZeroExitCode", "3:0", "rec-exit3"),
        "rec-running": (RunState.running, "RUNNING", None, None, "rec-running"),
        "rec-cancelled": (RunState.cancelled, "CANCELLED", None, "0:15", "rec-cancelled"),
    }
    for status in read.values():
        assert status is not None and status.submitted is not None and status.submitted.year >= 2026
        assert status.nodes


@pytest.mark.parametrize("release", RELEASES)
def test_a_job_too_big_and_another_users_cancel_are_refused_with_slurms_words(release):
    answers = recorded(release)
    assert _errors(answers["submit_rec-toobig"]["body"])[0][:1] == (2005,)
    assert "More processors requested than permitted" in _errors(answers["submit_rec-toobig"]["body"])[0][1]
    refused = answers["cancel_not_owner"]
    # 22.05 says so in its errors (HTTP 500); 24.11 answers HTTP 200 with the job's own error in "status"
    said = [text for _, text in _errors(refused["body"])] + _cancel_refusals(refused["body"])
    assert len(said) == 1 and "Access/permission denied" in said[0]


@pytest.mark.parametrize("release", RELEASES)
def test_refused_tokens_are_recognised(release):
    answers = recorded(release)
    for name in ("jobs_bad_token", "submit_bad_token", "cancel_bad_token"):
        answer = answers[name]
        response = httpx.Response(answer["status"], json=answer["body"])
        assert _stale_token(response, _errors(answer["body"])), name
    assert [_pinged(ping) for ping in answers["ping"]["body"]["pings"]] == [True]
    if release == "24.11":  # a refused token: HTTP 200, and the controller said to be DOWN
        assert [_pinged(ping) for ping in answers["ping_bad_token"]["body"]["pings"]] == [False]


@pytest.mark.parametrize(
    ("value", "code"),
    [
        ({"status": ["SUCCESS"], "return_code": {"set": True, "number": 0}, "signal": {"id": {"set": False}}}, "0:0"),
        ({"status": ["ERROR"], "return_code": {"set": True, "number": 7}, "signal": {"id": {"set": False}}}, "7:0"),
        ({"status": ["SIGNALED"], "return_code": {"set": False}, "signal": {"id": {"set": True, "number": 9}}}, "0:9"),
        ({"status": ["PENDING"], "return_code": {"set": False}, "signal": {"id": {"set": False}}}, None),
    ],
)
def test_v0_0_40_exit_codes(value, code):
    assert exit_code(value) == code


@pytest.mark.parametrize(
    ("value", "word"),
    [
        ("COMPLETING", "COMPLETING"),
        (["RUNNING"], "RUNNING"),
        (["COMPLETED", "COMPLETING"], "COMPLETING"),
        (["PENDING", "REQUEUED"], "REQUEUED"),
        (["PENDING", "NOT_A_STATE_WE_KNOW"], "PENDING"),
        ([], ""),
    ],
)
def test_state_lists_read_as_squeue_shows_them(value, word):
    assert _state_word(value) == word


def test_every_option_of_every_golden_script_has_a_typed_field():
    for path in golden_scripts():
        typed = typed_job(job_description(path.read_text()), "v0.0.42")
        assert typed and "time_limit" in typed, path


def test_a_rendered_head_as_typed_fields():
    fields = job_description(
        "#!/bin/bash\n#SBATCH --job-name=scalelab-abc\n#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=4\n"
        "#SBATCH --cpus-per-task=8\n#SBATCH --gres=gpu:4\n#SBATCH --gpus-per-node=2\n#SBATCH --exclusive\n"
        "#SBATCH --time=1-02:00:00\n#SBATCH --open-mode=append\n#SBATCH --signal=USR1@300\n#SBATCH --requeue\n"
        "#SBATCH --mem=4G\n#SBATCH --nice=100\n#SBATCH --ntasks=64\ntrue\n"
    )
    assert typed_job(fields, "v0.0.42") == {
        "name": "scalelab-abc", "nodes": "2", "tasks_per_node": 4, "cpus_per_task": 8,
        "tres_per_node": "gres/gpu:4,gres/gpu:2", "shared": ["none"],
        "time_limit": {"set": True, "infinite": False, "number": 26 * 60}, "open_mode": ["APPEND"],
        "kill_warning_signal": "USR1", "kill_warning_delay": {"set": True, "infinite": False, "number": 300},
        "requeue": True, "memory_per_node": {"set": True, "infinite": False, "number": 4096}, "nice": 100,
        "tasks": 64,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("text", "minutes"),
    [("5", 5), ("1", 1), ("10:30", 11), ("00:05:00", 5), ("02:00:00", 120), ("1-00:00:00", 1440), ("2-3", 51 * 60),
     ("1-0:1", 1441), ("UNLIMITED", None)],
)  # fmt: skip
def test_sbatch_times_in_minutes(text, minutes):
    expected = {"set": True, "infinite": minutes is None, "number": minutes or 0}
    assert typed_job({"time_limit": text}, "v0.0.42")["time_limit"] == expected


@pytest.mark.parametrize(
    ("text", "megabytes"), [("100", 100), ("100M", 100), ("4G", 4096), ("1T", 1 << 20), ("512K", 1)]
)
def test_sbatch_sizes_in_megabytes(text, megabytes):
    assert typed_job({"memory_per_cpu": text}, "v0.0.42")["memory_per_cpu"] == {
        "set": True,
        "infinite": False,
        "number": megabytes,
    }


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("#SBATCH --begin=now+1hour", "--begin has no field in v0.0.42"),
        ("#SBATCH --hint=nomultithread", "--hint has no field in v0.0.42"),
        ("#SBATCH --time=soon", "cannot read the time 'soon'"),
        ("#SBATCH --mem=lots", "cannot read the size 'lots'"),
    ],
)
def test_what_v0_0_40_cannot_say_is_refused_by_name(line, why):
    with pytest.raises(SchedulerError, match=re.escape(why)):
        typed_job(job_description(f"#!/bin/bash\n{line}\ntrue\n"), "v0.0.42")


def test_signals_to_the_batch_shell_and_the_default_delay():
    assert typed_job({"signal": "B:USR1@30"}, "v0.0.42") == {
        "kill_warning_signal": "USR1", "kill_warning_delay": {"set": True, "infinite": False, "number": 30},
        "kill_warning_flags": ["BATCH_JOB"],
    }  # fmt: skip
    assert typed_job({"signal": "TERM"}, "v0.0.42")["kill_warning_delay"] == {
        "set": True,
        "infinite": False,
        "number": 60,
    }


@pytest.mark.parametrize("release", RELEASES)
def test_a_held_jobs_submission_has_its_job_id_and_no_error_that_counts(release):
    answer = recorded(release)["submit_rec-held"]
    assert answer["status"] == 200 and isinstance(answer["body"]["job_id"], int)
    numbers = [number for number, _ in _errors(answer["body"])]
    # 22.05 says 2042 (the job is held), which sbatch reports and succeeds on; 24.11 says nothing
    assert numbers == {"22.05": [2042], "24.11": []}[release]
    assert not set(numbers) - _SUBMITTED_ANYWAY


def test_a_dependent_inference_waits_through_slurmrestd_too():
    described = job_description((GOLDEN / "job-inference-after.sbatch").read_text())
    assert (described["dependency"], described["kill_on_invalid_dependency"]) == ("afterok:4242", "yes")
    typed = typed_job(described, "v0.0.42")
    assert (typed["dependency"], typed["kill_on_invalid_dependency"]) == ("afterok:4242", True)
