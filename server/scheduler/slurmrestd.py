"""The scheduler through slurmrestd, Slurm's REST daemon: each job runs as its user.

slurmrestd offers API versions of its own release only: Slurm 22.05 v0.0.38, Slurm 24.11 v0.0.40 to v0.0.42.
The backend reads the versions the daemon offers (its OpenAPI document, once) and speaks the newest it knows.
v0.0.40 and later describe a job with typed fields (numbers, lists, {set, infinite, number} objects) where
v0.0.38 took sbatch's option text, and answer job states as lists and exit codes as objects: each such
difference is translated in one place below (`typed_job`, `_state_word`, `exit_code`, `_number`, `_pinged`).

A job is submitted and cancelled with its owner's JWT, so Slurm itself decides what the user may do; the states
of all jobs are read with the service's own token in one request per cycle. Jobs that have left the controller,
and the accounting of ended jobs, come from `sacct -P` run as the service, as for the CLI backend: the
slurmdb v0.0.38 job records share `sacct --json`'s serializer, which misreported exit codes in 22.05.
"""

from __future__ import annotations

import json
import logging
import os
import pwd
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from server.scheduler import (
    EndedJob,
    Job,
    JobAccounting,
    JobStatus,
    SchedulerError,
    SchedulerUnavailable,
    states,
    statuses_of,
)
from server.scheduler.commands import Runner, run_command
from server.scheduler.naming import NO_ARRAYS, ArrayTasks, job_name, jobs_by_run
from server.scheduler.sacct import ended_jobs_named, sacct_accounting, sacct_statuses
from server.scheduler.tokens import Tokens

log = logging.getLogger(__name__)

# The API versions this backend speaks, newest first. 40, 41 and 42 share every field it writes and reads.
API_VERSIONS = ("v0.0.42", "v0.0.41", "v0.0.40", "v0.0.38")
_UNTYPED = "v0.0.38"
_JOBS_PATH = re.compile(r"^/slurm/(v\d+\.\d+\.\d+)/jobs/?$")
REQUEST_TIMEOUT_S = 30
# Where the jobs look for programs; the batch script names the worker's Python by its full path anyway.
JOB_PATH = "/usr/local/bin:/usr/bin:/bin"
# slurmrestd 22.05 answers 401 only to a request without the X-SLURM-USER-* headers. A token that slurmctld
# refuses (expired, garbage, another user's) comes back as HTTP 500 with error -1 ("Unspecified error": GET
# /jobs, /ping) or 5005 ("Zero Bytes were transmitted or received": submit, cancel); with slurmctld down, /jobs
# and /ping answer the same -1 and submit and cancel 1800 ("Unable to contact slurm controller"). So on those
# the token is minted again (which fails at once, saying so, when slurmctld is down) and the request retried
# once; if it fails the same way with a fresh token, Slurm counts as unreachable.
# slurmrestd 24.11 answers a refused token with HTTP 511 and error 1007 ("Protocol authentication error"), but
# /ping with HTTP 200 and the controller "DOWN" (as when it is down): `ping` mints again on that.
_STALE_TOKEN_ERRORS = {-1, 5005, 1007}
_STALE_TOKEN_HTTP = {401, 511}
_UNREACHABLE_ERRORS = {-1, 1800, 1801, 5004, 5005}
# 22.05 answers a held job's submission (--hold) with its job id AND the error 2042 (ESLURM_JOB_HELD, "Job is in
# held state, pending scheduler release"), which sbatch reports and succeeds on: the job exists. 24.11 does not.
_SUBMITTED_ANYWAY = frozenset({2042})
_UNREACHABLE = (
    "Unable to contact slurm controller",
    "Socket timed out",
    "Connection refused",
    "Zero Bytes were transmitted",
    "Problem talking to the database",
)


# ---- #SBATCH lines as a v0.0.38 job description ------------------------------------------------------------------


@dataclass(frozen=True)
class _Field:
    """Where an sbatch option goes in the job description, and what a flag (no value) means there."""

    name: str
    flag: object = None  # the value of `--option` without `=value`; None: the option needs a value


# Every option render.py writes, and those a cluster profile may offer users (server/profiles.py). The values go
# as sbatch would read them: slurmrestd parses each field with sbatch's own option code, so "02:00:00", "4G" and
# "USR1@300" mean what they mean on an #SBATCH line.
SBATCH_FIELDS: dict[str, _Field] = {
    "job-name": _Field("name"),
    "nodes": _Field("nodes"),
    "ntasks": _Field("tasks"),
    "ntasks-per-node": _Field("tasks_per_node"),
    "cpus-per-task": _Field("cpus_per_task"),
    "gres": _Field("gres"),
    "gpus": _Field("gpus"),
    "gpus-per-node": _Field("gpus_per_node"),
    "gpus-per-task": _Field("gpus_per_task"),
    "cpus-per-gpu": _Field("cpus_per_gpu"),
    # 22.05 takes "exclusive", "user" or "mcs" here, not the "true" its OpenAPI description lists.
    "exclusive": _Field("exclusive", flag="exclusive"),
    "time": _Field("time_limit"),
    "time-min": _Field("time_minimum"),
    "partition": _Field("partition"),
    "account": _Field("account"),
    "qos": _Field("qos"),
    "reservation": _Field("reservation"),
    "constraint": _Field("constraints"),
    "nodelist": _Field("nodelist"),
    "exclude": _Field("exclude_nodes"),
    "output": _Field("standard_output"),
    "error": _Field("standard_error"),
    "open-mode": _Field("open_mode"),
    "signal": _Field("signal"),
    "requeue": _Field("requeue", flag=True),
    "no-requeue": _Field("requeue", flag=False),
    "hold": _Field("hold", flag=True),
    "mem": _Field("memory_per_node"),
    "mem-per-cpu": _Field("memory_per_cpu"),
    "mem-per-gpu": _Field("memory_per_gpu"),
    "tmp": _Field("temporary_disk_per_node"),
    "nice": _Field("nice"),
    "comment": _Field("comment"),
    "wckey": _Field("wckey"),
    "licenses": _Field("licenses"),
    "begin": _Field("begin_time"),
    "deadline": _Field("deadline"),
    "mail-type": _Field("mail_type"),
    "mail-user": _Field("mail_user"),
    "hint": _Field("cpu_binding_hint"),
    "distribution": _Field("distribution"),
    "threads-per-core": _Field("threads_per_core"),
    "gres-flags": _Field("gres_flags"),
    # An inference run waiting for its training run's job (server/services/dependencies.py).
    "dependency": _Field("dependency"),
    "kill-on-invalid-dep": _Field("kill_on_invalid_dependency"),
}

_DIRECTIVE = re.compile(r"^#SBATCH\s+--([a-z][a-z0-9-]*)(?:=(\S+))?\s*$")


def job_description(script: str) -> dict[str, object]:
    """The job description fields of the script's #SBATCH lines, read where sbatch reads them: from after the
    first line to the first command. A line or option the table does not know is an error naming it, rather
    than an option silently dropped."""
    fields: dict[str, object] = {}
    for line in script.splitlines()[1:]:
        text = line.strip()
        if text and not text.startswith("#"):
            break
        if not text.startswith("#SBATCH"):
            continue
        match = _DIRECTIVE.match(text)
        if match is None:
            raise SchedulerError(f"cannot submit through slurmrestd: cannot read the line {text[:80]!r}")
        option, value = match[1], match[2]
        spec = SBATCH_FIELDS.get(option)
        if spec is None:
            raise SchedulerError(f"cannot submit through slurmrestd: the option --{option} has no field there")
        if value is None:
            if spec.flag is None:
                raise SchedulerError(f"cannot submit through slurmrestd: --{option} needs a value")
            fields[spec.name] = spec.flag
        else:
            fields[spec.name] = value
    return fields


def job_environment(user: str) -> dict[str, str]:
    """A job's environment: only what names its user and finds programs (sbatch would pass the service's)."""
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        raise SchedulerError(f"cannot submit as {user}: no such Unix user on this host") from None
    return {
        "PATH": JOB_PATH,
        "HOME": entry.pw_dir,
        "USER": user,
        "LOGNAME": user,
        "SHELL": entry.pw_shell or "/bin/sh",
        # slurmstepd applies it before the script starts (sbatch sends the submitter's umask this way).
        "SLURM_UMASK": "0027",
    }


# ---- v0.0.38's job description in v0.0.40+'s typed fields ---------------------------------------------------------

_TIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")
_SIZE = re.compile(r"^(\d+)([KMGT]?)B?$", re.IGNORECASE)
_SIZE_MB = {"K": 1 / 1024, "": 1, "M": 1, "G": 1024, "T": 1024 * 1024}


def _no_val(number: int | None) -> dict[str, object]:
    """v0.0.40+'s {set, infinite, number}; None: infinite."""
    if number is None:
        return {"set": True, "infinite": True, "number": 0}
    return {"set": True, "infinite": False, "number": number}


def _minutes(text: object) -> dict[str, object]:
    """sbatch's time (minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS, UNLIMITED) in whole minutes, rounded
    up as sbatch does."""
    value = str(text).strip()
    if value.upper() in ("UNLIMITED", "INFINITE", "-1"):
        return _no_val(None)
    match = _TIME.match(value)
    if match is None:
        raise SchedulerError(f"cannot submit through slurmrestd: cannot read the time {value!r}")
    days, first, second, third = (int(part) if part else None for part in match.groups())
    if days is None:  # minutes, minutes:seconds or hours:minutes:seconds
        parts = [part for part in (first, second, third) if part is not None]
        if len(parts) == 3:
            seconds = parts[0] * 3600 + parts[1] * 60 + parts[2]
        else:
            seconds = parts[0] * 60 + (parts[1] if len(parts) == 2 else 0)
    else:  # days-hours[:minutes[:seconds]]
        seconds = days * 86400 + (first or 0) * 3600 + (second or 0) * 60 + (third or 0)
    return _no_val(-(-seconds // 60))


def _megabytes(text: object) -> int:
    """sbatch's memory or disk size (default unit MB; K, M, G, T) in whole megabytes."""
    match = _SIZE.match(str(text).strip())
    if match is None:
        raise SchedulerError(f"cannot submit through slurmrestd: cannot read the size {text!r}")
    return max(1, round(int(match[1]) * _SIZE_MB[match[2].upper()]))


def _signal(text: object) -> dict[str, object]:
    """--signal=[{R|B}:]SIG[@TIME] as kill_warning_signal, _delay (seconds; sbatch's default 60) and _flags."""
    value = str(text)
    flags: list[str] = []
    prefix, colon, rest = value.partition(":")
    if colon and prefix.upper() in ("B", "R", "BR", "RB"):
        value = rest
        flags = ["BATCH_JOB"] if "B" in prefix.upper() else []
    signal, _, delay = value.partition("@")
    return {
        "kill_warning_signal": signal,
        "kill_warning_delay": {"set": True, "infinite": False, "number": int(delay or 60)},
        **({"kill_warning_flags": flags} if flags else {}),
    }


def _gres(kind: str) -> Callable[[object], dict[str, object]]:
    """A GPU count or a gres list as the trackable resources (TRES) sbatch turns them into: "gpu:4" becomes
    "gres/gpu:4", and --gpus-per-node=4 "gres/gpu:4" per node."""

    def typed(value: object) -> dict[str, object]:
        if kind == "tres_per_node_gres":
            text = ",".join(f"gres/{item}" for item in str(value).split(","))
            return {"tres_per_node": text}
        return {kind: f"gres/gpu:{value}"}

    return typed


def _same(name: str) -> Callable[[object], dict[str, object]]:
    return lambda value: {name: value}


def _integer(name: str) -> Callable[[object], dict[str, object]]:
    return lambda value: {name: int(str(value))}


# Each v0.0.38 field (SBATCH_FIELDS' names) as v0.0.40+ fields. A field missing here has none there, and a job
# asking for it is refused by name rather than submitted without it.
_SAME_FIELDS = ("name", "nodes", "partition", "account", "qos", "reservation", "constraints", "requeue", "hold",
                "standard_output", "standard_error", "comment", "wckey", "licenses", "mail_user", "distribution",
                "current_working_directory", "dependency")  # fmt: skip
_TYPED_FIELDS: dict[str, Callable[[object], dict[str, object]]] = {
    **{name: _same(name) for name in _SAME_FIELDS},
    **{name: _integer(name) for name in ("tasks", "tasks_per_node", "cpus_per_task", "nice", "threads_per_core")},
    "time_limit": lambda value: {"time_limit": _minutes(value)},
    "time_minimum": lambda value: {"time_minimum": _minutes(value)},
    "memory_per_node": lambda value: {"memory_per_node": _no_val(_megabytes(value))},
    "memory_per_cpu": lambda value: {"memory_per_cpu": _no_val(_megabytes(value))},
    "temporary_disk_per_node": lambda value: {"temporary_disk_per_node": _megabytes(value)},
    "open_mode": lambda value: {"open_mode": [str(value).upper()]},
    # --exclusive[=user|mcs]: the job shares its nodes with nobody ("none"), or only with the user's jobs
    "exclusive": lambda value: {"shared": ["none" if value == "exclusive" else str(value)]},
    "signal": _signal,
    "gres": _gres("tres_per_node_gres"),
    "gpus": _gres("tres_per_job"),
    "gpus_per_node": _gres("tres_per_node"),
    "gpus_per_task": _gres("tres_per_task"),
    "cpus_per_gpu": lambda value: {"cpus_per_tres": f"gres/gpu:{value}"},
    "nodelist": lambda value: {"required_nodes": [str(value)]},
    "exclude_nodes": lambda value: {"excluded_nodes": [str(value)]},
    "mail_type": lambda value: {"mail_type": [item.upper() for item in str(value).split(",")]},
    "kill_on_invalid_dependency": lambda value: {"kill_on_invalid_dependency": str(value) == "yes"},
}
# Fields whose values add up when two options name them (--gres and --gpus-per-node both ask per node).
_JOINED = {"tres_per_node"}


def typed_job(fields: Mapping[str, object], version: str) -> dict[str, object]:
    """A v0.0.38 job description as v0.0.40+'s typed fields."""
    typed: dict[str, object] = {}
    for name, value in fields.items():
        translate = _TYPED_FIELDS.get(name)
        if translate is None:
            option = next((option for option, spec in SBATCH_FIELDS.items() if spec.name == name), name)
            raise SchedulerError(f"cannot submit through slurmrestd: the option --{option} has no field in {version}")
        for key, item in translate(value).items():
            if key in _JOINED and key in typed:
                item = f"{typed[key]},{item}"
            typed[key] = item
    return typed


# ---- reading a job, as either version answers it ----------------------------------------------------------------


def _number(value: object) -> int | None:
    """An integer: v0.0.38's plain one, or v0.0.40+'s {set, infinite, number} (None when unset or infinite)."""
    if isinstance(value, dict):
        if not value.get("set") or value.get("infinite"):
            return None
        value = value.get("number")
    if not isinstance(value, int) or isinstance(value, bool):
        return None
    return value


def _state_word(value: object) -> str:
    """The state squeue's long form shows. v0.0.38 gives that word; v0.0.40+ a list, the base state first and
    its flags after (["COMPLETED", "COMPLETING"]), where squeue shows a flag it knows (COMPLETING, REQUEUED, ...)
    over the base state: so does this, with the flags the state table knows."""
    if isinstance(value, list):
        words = [str(word) for word in value if word]
        if not words:
            return ""
        return next((word for word in words[1:] if states.from_slurm(word) is not None), words[0])
    return str(value or "")


def exit_code(status: object) -> str | None:
    """An exit code as Slurm writes them: "3:0" (exited 3), "0:15" (killed by SIGTERM). v0.0.38 gives
    slurmctld's raw wait status; v0.0.40+ {status, return_code: {set, number}, signal: {id: {set, number}}}."""
    if isinstance(status, dict):
        code = _number(status.get("return_code"))
        signal = status.get("signal")
        number = _number(signal.get("id")) if isinstance(signal, dict) else None
        if code is None and number is None:
            return None
        return f"{code or 0}:{number or 0}"
    if not isinstance(status, int) or isinstance(status, bool) or status < 0:
        return None
    return f"{(status >> 8) & 0xFF}:{status & 0x7F}"


def _pinged(ping: object) -> bool:
    """A controller answered: v0.0.38 says {"ping": "UP"}, v0.0.40+ {"pinged": "UP", "responding": true}."""
    return isinstance(ping, dict) and (ping.get("ping") == "UP" or ping.get("pinged") == "UP")


def _cancel_refusals(answer: Mapping[str, Any]) -> list[str]:
    """v0.0.40+ answers a refused cancel with HTTP 200 and no errors, but the job's own error in "status":
    [{"error": {"code": 2002, "message": "Access/permission denied"}, "job_id": ...}]. v0.0.38 has no such list."""
    said = []
    for entry in answer.get("status") or []:
        error = entry.get("error") if isinstance(entry, dict) else None
        if isinstance(error, dict) and error.get("code"):
            said.append(str(error.get("message") or error.get("string") or error.get("code")))
    return said


def _status(job: Mapping[str, Any]) -> JobStatus | None:
    raw = _state_word(job.get("job_state"))
    state = states.from_slurm(raw)
    if state is None:
        log.warning("job %s: unknown Slurm state %r from slurmrestd", job.get("job_id"), raw)
        return None
    reason = job.get("state_reason")
    nodes = str(job.get("nodes") or "").strip() or None
    code = exit_code(job.get("exit_code")) if state.is_final else None
    said = None if reason in (None, "", "None") else str(reason)
    name = job.get("name") if isinstance(job.get("name"), str) else None
    return JobStatus(state, raw, said, code, nodes, name, _submitted(job.get("submit_time")))


def _submitted(value: object) -> datetime | None:
    """The controller's submit time (seconds since the epoch) as an aware datetime; None where it gives none."""
    epoch = _number(value)
    if epoch is None or epoch <= 0:
        return None
    return datetime.fromtimestamp(epoch, UTC)


def offered_versions(paths: Sequence[str] | Mapping[str, object]) -> list[str]:
    """The slurmctld API versions an OpenAPI document's paths offer (those with a /slurm/VERSION/jobs path)."""
    return sorted({match[1] for path in paths if (match := _JOBS_PATH.match(str(path)))})


# ---- the backend ---------------------------------------------------------------------------------------------------


def check_url(url: str) -> str:
    """`unix:/path` or an http URL on loopback; ValueError otherwise (slurmrestd must not be reached over a
    network: the tokens travel in clear)."""
    if url.startswith("unix:"):
        if not url.removeprefix("unix:").startswith("/"):
            raise ValueError(f"slurmrestd URL {url!r}: a unix socket needs an absolute path (unix:/run/...)")
        return url
    parts = urlsplit(url)
    if parts.scheme != "http" or parts.hostname not in ("127.0.0.1", "::1", "localhost"):
        raise ValueError(
            f"slurmrestd URL {url!r}: only unix:/path or http://127.0.0.1:PORT, http://[::1]:PORT or "
            "http://localhost:PORT (loopback), since tokens must not cross a network"
        )
    return url


def _client(url: str, timeout_s: float) -> httpx.Client:
    check_url(url)
    if url.startswith("unix:"):
        transport = httpx.HTTPTransport(uds=url.removeprefix("unix:"))
        return httpx.Client(transport=transport, base_url="http://localhost", timeout=timeout_s)
    return httpx.Client(base_url=url.rstrip("/"), timeout=timeout_s)


def _errors(body: Mapping[str, Any]) -> list[tuple[int | None, str]]:
    """slurmrestd's errors, as (number, text): it answers {"errors": [{"error": TEXT, "error_number" or
    "error_code": NUMBER, "description": MORE, "source": FUNCTION}]}, an empty list when all went well."""
    said: list[tuple[int | None, str]] = []
    for error in body.get("errors") or []:
        if isinstance(error, dict):
            number = error.get("error_number", error.get("error_code"))
            text = " — ".join(str(error[key]) for key in ("error", "description") if error.get(key))
            said.append((number if isinstance(number, int) else None, text or json.dumps(error)))
    return said


def _parsed(response: httpx.Response) -> dict[str, Any]:
    try:
        answer = response.json()
    except ValueError:
        return {}
    return answer if isinstance(answer, dict) else {}


def _stale_token(response: httpx.Response, errors: list[tuple[int | None, str]]) -> bool:
    if response.status_code in _STALE_TOKEN_HTTP:
        return True
    return response.status_code >= 500 and any(number in _STALE_TOKEN_ERRORS for number, _ in errors)


class SlurmrestdScheduler:
    name = "slurmrestd"
    submit_concurrency = 4
    runs_as_user = True
    uses_slurm = True

    def __init__(
        self,
        url: str,
        tokens: Tokens,
        *,
        service_user: str | None = None,
        run: Runner = run_command,
        timeout_s: float = REQUEST_TIMEOUT_S,
        client: Callable[[str, float], httpx.Client] = _client,
        version: str | None = None,
    ) -> None:
        self.url = url
        self._http = client(url, timeout_s)
        self._tokens = tokens
        # The service's own token is for the user the service runs as.
        self._service_user = service_user or pwd.getpwuid(os.geteuid()).pw_name
        self._run = run
        if version is not None and version not in API_VERSIONS:
            raise ValueError(f"slurmrestd API {version!r}: this backend speaks {', '.join(API_VERSIONS)}")
        self._version = version  # None: read from slurmrestd on first use

    @property
    def version(self) -> str:
        """The API version spoken: the newest of API_VERSIONS that slurmrestd's OpenAPI document lists, read once
        (one request, which reaches no slurmctld). SchedulerError when it offers none of them."""
        if self._version is None:
            paths = self._request("GET", "/openapi/v3", None).get("paths") or {}
            offered = offered_versions(paths)
            version = next((version for version in API_VERSIONS if version in offered), None)
            if version is None:
                raise SchedulerError(
                    f"slurmrestd ({self.url}) offers the API versions {', '.join(offered) or 'none'}; this "
                    f"backend speaks {', '.join(API_VERSIONS)}"
                )
            log.info("slurmrestd at %s: API %s (offered: %s)", self.url, version, ", ".join(offered))
            self._version = version
        return self._version

    def _api(self, path: str) -> str:
        return f"/slurm/{self.version}/{path}"

    # -- HTTP -----------------------------------------------------------------------------------------------------

    def _request(
        self, method: str, path: str, user: str | None, body: object = None, not_errors: frozenset[int] = frozenset()
    ) -> dict[str, Any]:
        """One request as `user` (None: the service); a refused token is minted again and the request retried
        once. Raises SchedulerUnavailable when slurmrestd (or slurmctld behind it) cannot be reached, and
        SchedulerError with slurmrestd's errors when it answers with any but those numbered in `not_errors`."""
        for attempt in range(2):
            token = self._tokens.service_token() if user is None else self._tokens.user_token(user)
            headers = {"X-SLURM-USER-NAME": user or self._service_user, "X-SLURM-USER-TOKEN": token}
            try:
                response = self._http.request(method, path, headers=headers, json=body)
            except httpx.TimeoutException:
                raise SchedulerUnavailable(f"slurmrestd ({self.url}) did not answer in time") from None
            except httpx.TransportError as exc:
                raise SchedulerUnavailable(f"slurmrestd cannot be reached at {self.url}: {exc}") from None
            answer = _parsed(response)
            errors = [error for error in _errors(answer) if error[0] not in not_errors]
            if attempt == 0 and _stale_token(response, errors):
                log.info("slurmrestd refused the token of %s, or failed: minting another", user or "the service")
                self._tokens.forget(user)
                continue
            break
        said = "; ".join(text for _, text in errors)
        if response.status_code in _STALE_TOKEN_HTTP:
            raise SchedulerError(
                f"slurmrestd refused the token of {user or 'the service'} (HTTP {response.status_code}"
                + (f": {said})" if said else ")")
            )
        if response.status_code in (502, 503) or any(
            number in _UNREACHABLE_ERRORS or any(marker in text for marker in _UNREACHABLE) for number, text in errors
        ):
            raise SchedulerUnavailable(
                f"Slurm cannot be reached through slurmrestd, or refused a fresh token of {user or 'the service'}: "
                f"{said or f'HTTP {response.status_code}'}"
            )
        if response.status_code >= 400 or errors:
            raise SchedulerError(said or f"slurmrestd answered HTTP {response.status_code}")
        return answer

    def _jobs(self) -> list[Mapping[str, Any]]:
        """Every job the controller has: ONE request, with the service's token."""
        jobs = self._request("GET", self._api("jobs"), None).get("jobs")
        return [job for job in jobs or [] if isinstance(job, dict)]

    # -- the protocol ---------------------------------------------------------------------------------------------

    def submit(self, script: Path, run_dir: Path, user: str | None) -> str:
        if user is None:
            raise SchedulerError("the slurmrestd scheduler runs each job as its user, but this run has no owner")
        text = script.read_text(encoding="utf-8")
        job = job_description(text)
        # The run's directory does not exist yet: the job makes it, as its user.
        job["current_working_directory"] = str(run_dir.parent)
        environment = job_environment(user)
        version = self.version
        if version == _UNTYPED:
            body: dict[str, object] = {"script": text, "job": {**job, "environment": environment}}
        else:  # the script goes in the job (the top-level one is deprecated), the environment as NAME=value
            typed = typed_job(job, version)
            body = {"job": {**typed, "script": text, "environment": [f"{k}={v}" for k, v in environment.items()]}}
        try:
            answer = self._request("POST", self._api("job/submit"), user, body, _SUBMITTED_ANYWAY)
        except SchedulerUnavailable:
            raise
        except SchedulerError as exc:
            raise SchedulerError(f"slurmrestd refused the job of {user}: {exc}") from None
        job_id = answer.get("job_id")
        if not isinstance(job_id, int) or isinstance(job_id, bool):
            raise SchedulerError(f"slurmrestd answered no job id: {json.dumps(answer)[:200]}")
        return str(job_id)

    def poll(self, jobs: Sequence[Job]) -> dict[Job, JobStatus]:
        if not jobs:
            return {}
        wanted = {job.job_id for job in jobs}
        records = []
        for job in self._jobs():
            job_id = str(job.get("job_id"))
            if job_id in wanted and (status := _status(job)) is not None:
                records.append((job_id, status))
        found = statuses_of(jobs, records)
        # The controller forgets a job MinJobAge after it ended, and after a wipe has another job under its id:
        # the accounting database has it.
        gone = [job for job in jobs if job not in found]
        if gone:
            found.update(sacct_statuses(gone, self._run))
        return found

    def cancel(self, job_id: str, user: str | None) -> None:
        self._delete_job(job_id, user, "cancel", "")

    def signal(self, job_id: str, signal_name: str, user: str | None) -> None:
        if not signal_name.isalnum():
            raise SchedulerError(f"not a signal's name: {signal_name[:16]!r}")
        if self.version == _UNTYPED:
            # Its DELETE signals the batch script too, whose shell ends of a signal it does not catch (measured on
            # 22.05): the job would end, not dump its stacks.
            raise SchedulerError(
                f"slurmrestd's API {_UNTYPED} cannot signal a job's tasks without its batch script: no stacks asked for"
            )
        # A DELETE with a signal signals instead of cancelling (slurmrestd's scancel); FULL_STEPS_ONLY: the steps'
        # tasks and not the batch script, as scancel --signal does.
        self._delete_job(job_id, user, "signal", f"?signal=SIG{signal_name}&flags=FULL_STEPS_ONLY")

    def _delete_job(self, job_id: str, user: str | None, verb: str, query: str) -> None:
        """slurmrestd's DELETE of a job (cancel, or signal with `query`), with the owner's token: Slurm lets a user
        cancel or signal only their own jobs."""
        if user is None:
            raise SchedulerError(f"cannot {verb} job {job_id} through slurmrestd: the run has no owner")
        if not job_id.isdigit():
            raise SchedulerError(f"not a Slurm job id: {job_id[:40]!r}")
        try:
            answer = self._request("DELETE", self._api(f"job/{job_id}{query}"), user)
        except SchedulerUnavailable:
            raise
        except SchedulerError as exc:
            raise SchedulerError(f"Slurm refused to {verb} job {job_id} as {user}: {exc}") from None
        if refusals := _cancel_refusals(answer):
            raise SchedulerError(f"Slurm refused to {verb} job {job_id} as {user}: {'; '.join(refusals)}")

    def ping(self) -> None:
        for attempt in range(2):
            pings = self._request("GET", self._api("ping"), None).get("pings") or []
            if any(_pinged(ping) for ping in pings):
                return
            if attempt == 0:  # 24.11 answers a refused token so too: once more with a fresh one
                self._tokens.forget(None)
        raise SchedulerUnavailable(f"slurmrestd answers, but no slurmctld is up: {json.dumps(pings)[:200]}")

    def jobs_of(self, run_ids: Sequence[str], arrays: ArrayTasks = NO_ARRAYS) -> dict[str, str]:
        # `arrays` is left alone: this backend submits one job per run, none as a task of an array.
        if not run_ids:
            return {}
        names = {job_name(run_id) for run_id in run_ids}
        named = ended_jobs_named(sorted(names), self._run, all_users=True)
        for job in self._jobs():  # the controller's answer comes last and wins
            queued_name = job.get("name")
            if isinstance(queued_name, str) and queued_name in names:
                named[queued_name] = str(job.get("job_id"))
        return jobs_by_run(named, run_ids)

    def accounting(self, jobs: Sequence[EndedJob]) -> dict[str, JobAccounting]:
        return sacct_accounting(jobs, self._run)
