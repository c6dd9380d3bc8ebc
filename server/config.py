"""All settings, from SCALELAB_* environment variables."""

from __future__ import annotations

import os
import re
import shlex
import sys
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

# Paths that reach the batch script must be plain: they also appear in #SBATCH lines, which sbatch parses
# without a shell, so quoting cannot protect them there.
_SAFE_PATH = re.compile(r"^/[A-Za-z0-9._/+-]*$")
# A Unix group's name, as the shadow tools accept one.
_GROUP = r"^[a-z_][a-z0-9_.-]{0,31}$"


def _data_home() -> Path:
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share") / "scalelab"


def _require_safe_path(value: Path, name: str) -> Path:
    resolved = value.expanduser().absolute()
    if not _SAFE_PATH.match(str(resolved)):
        raise ValueError(
            f"{name} {str(resolved)!r} must be an absolute path of letters, digits and . _ / + - only, "
            "because it is written into batch scripts"
        )
    return resolved


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SCALELAB_")

    database_url: str = Field(
        default_factory=lambda: f"sqlite:///{_data_home() / 'scalelab.db'}",
        description="SQLAlchemy URL of the database: sqlite:///PATH (the default, embedded), or "
        "postgresql+psycopg://USER:PASSWORD@HOST:PORT/DATABASE for a shared instance",
    )
    runs_dir: Path = Field(
        default_factory=lambda: _data_home() / "runs",
        description="one directory per run; must be on a file system the compute nodes share",
    )
    scheduler: Literal["auto", "slurm", "slurmrestd", "pyslurm", "local"] = Field(
        default="auto",
        description="auto: pyslurm where it matches the cluster's Slurm, else slurm where sbatch is found, else "
        "local; slurmrestd (never chosen by auto): jobs run as their users, through Slurm's REST daemon",
    )
    slurmrestd_url: str = Field(
        default="unix:/run/scalelab-slurmrestd/slurmrestd.socket",
        description="slurmrestd's unix socket (unix:/path) or a loopback http URL; nothing beyond this machine",
    )
    slurm_token_command: str = Field(
        default="sudo -n /usr/local/sbin/scalelab-slurm-token",
        description="the command that mints a user's Slurm JWT: run as COMMAND USER LIFESPAN_S (no shell), it "
        "prints SLURM_JWT=<token>",
    )
    slurm_token_lifespan_s: int = Field(
        default=600, ge=60, le=86_400, description="seconds each Slurm token lives; renewed after 2/3 of it"
    )
    worker_python: Path = Field(
        default_factory=lambda: Path(sys.executable),
        description="the Python (with torch) that runs the worker on the compute nodes",
    )
    profiles_dir: Path | None = Field(
        default=None, description="the operator's cluster profiles (*.toml), beside and over the built-in ones"
    )
    profile: str = Field(default="local", description="the cluster profile of runs that name none")
    program_roots: Annotated[list[Path], NoDecode] = Field(
        default=[],
        description="colon-separated directories on the shared file system under which users' programs may run, "
        "added to every cluster profile's program_roots",
    )
    programs_for_all_as_service_account: bool = Field(
        default=False,
        description="where jobs run as the service's own account (every scheduler but slurmrestd): let every user, "
        "not only admins, run programs; each user can then do anything that account can, the database included",
    )
    poll_interval_s: float = Field(
        default=2.0, gt=0.05, le=600, description="seconds from one monitor cycle's start to the next"
    )
    monitor_in_web: bool = Field(
        default=True,
        description="whether the web processes follow the jobs (one at a time: the holder of the monitor's lease); "
        "false: they only serve, and `python -m server monitor` follows the jobs",
    )
    unknown_job_after_s: float = Field(
        default=600,
        ge=0,
        le=7 * 24 * 3600,
        description="seconds a live run's job may be unknown to both squeue and sacct before the run ends failed, "
        "saying so (slurmdbd may lag behind a job that just left the queue)",
    )
    job_arrays: bool = Field(
        default=True,
        description="submit the runs of one experiment whose batch scripts differ only in their run id as one Slurm "
        "job array (one sbatch, one queue entry), where the scheduler backend submits arrays (Slurm's commands); "
        "false: one job per run",
    )
    auth: bool = Field(
        default=True,
        description="require a signed-in user (API token or browser session); off, everyone acts as the admin "
        "`local`, which the server allows only when it listens on loopback",
    )
    session_hours: float = Field(default=12, gt=0, le=24 * 30, description="how long a browser stays signed in")
    secure_cookies: bool = Field(default=False, description="mark the session cookie Secure (served over HTTPS)")
    signed_in_ttl_s: float = Field(
        default=5,
        ge=0,
        le=300,
        description="how long a server process keeps who a token or session cookie stands for: a revocation made "
        "elsewhere (another server process, the admin command) counts within it; 0 looks every request up",
    )
    instance_name: str | None = Field(
        default=None,
        max_length=200,
        description="this instance's name, written on the scaling cards it exports as where they came from (with the "
        "URL they were asked for by): a site and cluster, e.g. 'cscs-daint'",
    )
    max_body_bytes: int = Field(
        default=2 * 2**20,
        ge=64 * 1024,
        description="the most bytes a request's body may hold (but an import's): larger ones are answered 413 "
        "unread; the largest experiment request (a program's 256 words of 4 KiB, its env, a 256-run grid) needs "
        "about 1.4 MiB",
    )
    max_import_body_bytes: int = Field(
        default=96 * 2**20,
        ge=64 * 1024,
        description="the most bytes an import's body (POST /api/imports) may hold: its 64 MiB of logs, with room "
        "for JSON's escapes; and a scaling card's (POST /api/cards, /api/cards/verify)",
    )
    signin_failures_per_name: int = Field(
        default=10,
        ge=1,
        le=10_000,
        description="failed password sign-ins of one user name within SCALELAB_SIGNIN_WINDOW_S before further "
        "attempts are refused (429) until the window ends",
    )
    signin_failures_per_address: int = Field(
        default=50,
        ge=1,
        le=100_000,
        description="failed password sign-ins from one client address within SCALELAB_SIGNIN_WINDOW_S before "
        "further attempts from it are refused (429) until the window ends",
    )
    signin_window_s: float = Field(
        default=900,
        gt=0,
        le=86_400,
        description="the window of the failure budgets: it opens at a name's or address's first failure, and a "
        "throttled sign-in may try again when it ends",
    )
    password_checks: int = Field(
        default=4,
        ge=1,
        le=256,
        description="password checks (scrypt or PAM) one server process runs at once; more wait their turn",
    )
    password_check_wait_s: float = Field(
        default=5,
        gt=0,
        le=300,
        description="how long a sign-in waits for a turn to check its password before it is answered 503",
    )
    max_concurrent_runs: int | None = Field(default=None, ge=0, description="per user, where the user has no own")
    max_gpus_in_use: int | None = Field(default=None, ge=0, description="per user, where the user has no own")
    max_runs_per_day: int | None = Field(
        default=None, ge=0, description="per user, where the user has no own; imported runs count too"
    )
    hang_pace_factor: float = Field(
        default=4.0,
        ge=1.5,
        le=100,
        description="a live run is stalled after this many times the median interval between its recent records "
        "with none new (within hang_floor_s and hang_ceiling_s): the bound follows the run's own pace",
    )
    hang_floor_s: float = Field(
        default=60,
        ge=1,
        le=7 * 24 * 3600,
        description="the shortest a run may go without a new record before it is stalled, however fast its pace",
    )
    hang_ceiling_s: float = Field(
        default=1800,
        ge=1,
        le=7 * 24 * 3600,
        description="the longest a run may go without a new record before it is stalled, however slow its pace; "
        "also the bound before its first progress record (start-up: loading data, compiling)",
    )
    hang_dump_wait_s: float = Field(
        default=5,
        ge=0,
        le=600,
        description="seconds from asking a stalled run's ranks for their stacks to reading them",
    )
    max_records_per_run: int = Field(
        default=1_000_000,
        ge=1,
        description="metric records stored of one run's output (or one imported log); beyond, its reading stops, "
        "with a flag on the run",
    )
    max_output_bytes_per_run: int = Field(
        default=2 * 1024**3,
        ge=1,
        description="bytes of one run's output read for metric records; beyond (by at most one 4 MiB read), its "
        "reading stops, with a flag on the run (its log can still be read)",
    )
    signin: Literal["local", "pam"] = Field(
        default="local",
        description="local: scalelab's own accounts (a one-person instance); pam: the login node's Unix accounts, "
        "their passwords checked through PAM (a shared instance); accounts an admin made with a password still sign "
        "in with it",
    )
    pam_service: str = Field(
        default="scalelab",
        pattern=r"^[a-z0-9][a-z0-9_.-]{0,63}$",
        description="the PAM service that checks Unix passwords: its rules are /etc/pam.d/<pam_service>",
    )
    allowed_group: str | None = Field(
        default=None,
        pattern=_GROUP,
        description="the Unix group whose members may sign in and use their API tokens; unset: any Unix user",
    )
    prediction_tolerance: float = Field(
        default=0.5,
        gt=0,
        le=100,
        description="off_model: how much slower than the step model's prediction a measured point may be (0.5: 50 %) "
        "before it is flagged; the latency-bandwidth model alone misses collectives by up to about 20 %, and scaling "
        "the 1-process compute by the per-rank batch misses fixed per-step costs on small runs",
    )
    admin_group: str | None = Field(
        default=None,
        pattern=_GROUP,
        description="the Unix group whose members are scalelab admins; unset: admins are named with "
        "`python -m server users set NAME --admin yes`",
    )

    smtp_host: str | None = Field(
        default=None,
        max_length=253,
        description="the SMTP host that sends notification e-mail; unset: SCALELAB_SENDMAIL, if set, else no e-mail",
    )
    smtp_port: int = Field(default=25, ge=1, le=65_535, description="its port")
    smtp_starttls: bool = Field(default=False, description="upgrade the SMTP connection with STARTTLS")
    smtp_user: str | None = Field(default=None, description="the SMTP login, if the host asks for one")
    smtp_password: str | None = Field(default=None, description="its password")
    smtp_from: str = Field(
        default="scalelab@localhost", max_length=254, description="the From address of notification e-mail"
    )
    sendmail: Path | None = Field(
        default=None,
        description="the cluster's mail transfer agent (e.g. /usr/sbin/sendmail), used where SCALELAB_SMTP_HOST is "
        "unset: run as SENDMAIL -i -- ADDRESS, the message on its input",
    )
    webhook_allow: Annotated[list[str], NoDecode] = Field(
        default=[],
        description="comma-separated host names (chat.example.org; .example.org for its subdomains too) or URL "
        "prefixes (https://hooks.slack.com/services/) that users' webhooks may name; unset: no webhooks",
    )
    webhook_allow_private: bool = Field(
        default=False,
        description="let webhooks reach private, loopback and link-local addresses (a chat server inside the "
        "site's network); off, a webhook cannot be pointed at the site's internal services",
    )
    webhook_allow_http: bool = Field(default=False, description="let webhooks use plain http (else https only)")
    notify_timeout_s: float = Field(
        default=10, gt=0, le=120, description="how long one delivery attempt (SMTP or webhook) may take"
    )
    notify_max_attempts: int = Field(
        default=6, ge=1, le=20, description="attempts per notification before it is marked failed"
    )
    notify_backoff_s: float = Field(
        default=30,
        gt=0,
        le=3600,
        description="the wait after a failed attempt, doubled after each (at most an hour)",
    )

    @field_validator("database_url")
    @classmethod
    def _supported_database(cls, value: str) -> str:
        from server.db import supported_url

        return supported_url(value)

    @field_validator("runs_dir")
    @classmethod
    def _runs_dir_safe(cls, value: Path) -> Path:
        return _require_safe_path(value, "SCALELAB_RUNS_DIR")

    @field_validator("program_roots", mode="before")
    @classmethod
    def _colon_separated(cls, value: object) -> object:
        # As PATH is written: the environment gives one string.
        return [part for part in value.split(":") if part] if isinstance(value, str) else value

    @field_validator("webhook_allow", mode="before")
    @classmethod
    def _comma_separated(cls, value: object) -> object:
        return [part.strip() for part in value.split(",") if part.strip()] if isinstance(value, str) else value

    @field_validator("program_roots")
    @classmethod
    def _program_roots_safe(cls, roots: list[Path]) -> list[Path]:
        for root in roots:
            if not root.is_absolute():
                raise ValueError(f"SCALELAB_PROGRAM_ROOTS: {str(root)!r} is not an absolute path")
        return [_require_safe_path(root, "SCALELAB_PROGRAM_ROOTS") for root in roots]

    @field_validator("slurmrestd_url")
    @classmethod
    def _slurmrestd_on_loopback(cls, value: str) -> str:
        from server.scheduler.slurmrestd import check_url

        return check_url(value)

    @field_validator("slurm_token_command")
    @classmethod
    def _token_command_words(cls, value: str) -> str:
        if not shlex.split(value):
            raise ValueError("SCALELAB_SLURM_TOKEN_COMMAND is empty")
        return value

    @field_validator("worker_python")
    @classmethod
    def _worker_python_safe(cls, value: Path) -> Path:
        return _require_safe_path(value, "SCALELAB_WORKER_PYTHON")


@lru_cache
def get_settings() -> Settings:
    return Settings()
