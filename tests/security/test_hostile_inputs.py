"""Nothing a user types reaches a shell: every field of the API against the hostile-input corpus.

The fields come from the app's own OpenAPI schema (body fields recursively, dict keys and values, list items, query
and path parameters), so a field added later is covered without touching this file. Each corpus value goes into
each field of an otherwise valid request; the answer is a 422 naming the field, or an answer the route gives to
harmless input, never a 5xx; a refusal leaves no row or directory behind; an accepted submission's scripts parse,
pass shellcheck, and hold no hostile text outside single quotes (the experiment's name not at all). The last test
runs every accepted submission's scripts on the real Slurm and checks that the canary file never appears.
"""

from __future__ import annotations

import functools
import json
import logging
import re
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlmodel import SQLModel

from contract.states import FINAL_STATES
from server.config import Settings
from server.scheduler import Job
from server.scheduler.local import LocalScheduler
from server.services import users
from tests.conftest import make_client
from tests.hostile import HOSTILE, as_text, json_safe, tries_to_run, values
from tests.security.fields import (
    MAX_URL,
    VALID_BODIES,
    Answer,
    Case,
    Operation,
    Prepared,
    Target,
    cheap_request,
    operations,
    prepare,
    send,
    targets,
    valid_body,
    with_value,
)

log = logging.getLogger(__name__)
TRUE = Path(shutil.which("true") or "/bin/true")
FINAL = {str(state) for state in FINAL_STATES}


# The path parameters the sweep has a valid value for (of the rows it makes first).
PATH_PARAMS = ("experiment_id", "run_id", "name", "token_id", "plan_id")
# The routes whose accepted requests submit jobs: the Slurm test runs what they render (the sweep checks the list).
SUBMITTING = {("POST", "/api/experiments"), ("POST", "/api/experiments/{experiment_id}/clone")}


# ---- checks -----------------------------------------------------------------------------------------------------


def names_field(error: dict[str, Any], target: Target) -> bool:
    """The error's location is the target or inside it; or, for a problem of the combined spec (reported at the
    grid, as every combination is), its message names the target field."""
    loc = tuple(error.get("loc", ()))
    expected = target.loc
    if loc[: len(expected)] == expected:
        return True
    # A rule over a list's words or a dict's values (none holds a control character; the first word names the
    # program) is told at the list or dict: a program's command, env and parameters.
    if loc == expected[:-1] and loc[:3] == ("body", "base", "program"):
        return True
    # A card refused on import for not verifying names the figure or record that differs from what its records give:
    # where the value shows, not always where it was put (an id put on a run is in every figure that carries it).
    if target.operation.body == "ScalingCard" and loc[:2] in (("body", "figures"), ("body", "runs")):
        return True
    named = [part for part in target.field if isinstance(part, str)]
    said = bool(named) and named[-1] in str(error.get("msg", ""))
    # A rule over an object's fields together (a target's one bound of two) is told at the object, naming the field.
    return said and (loc == ("body", "grid") or (len(expected) > 2 and loc == expected[:-1]))


# What bash still reads within double quotes, and quotes that a value means to break out of any quoting with: text
# without these (a glob, a space) is as literal within double quotes as within single quotes.
_LIVE_IN_DOUBLE_QUOTES = frozenset("$`\\\"!'")
_QUOTED_HERE_DOCUMENT = re.compile(r"<<-?'([A-Za-z_][A-Za-z0-9_]*)'")


def quoting(script: str) -> list[str]:
    """For each character of a bash script, how bash reads it: "single" (inside single quotes, or in the body of a
    here-document whose delimiter is quoted: literal), "double" (inside double quotes), "comment" or "plain"."""
    states = ["plain"] * len(script)
    state, index = "plain", 0
    while index < len(script):
        char = script[index]
        if state == "single":
            if char == "'":
                state = "plain"
            else:
                states[index] = "single"
        elif state == "double":
            if char == "\\":
                index += 1
            elif char == '"':
                state = "plain"
            else:
                states[index] = "double"
        elif state == "comment":
            if char == "\n":
                state = "plain"
            else:
                states[index] = "comment"
        elif char == "\\":
            index += 1
        elif (here := _QUOTED_HERE_DOCUMENT.match(script, index)) is not None:
            # The body starts on the next line and ends at the delimiter's own line; bash expands nothing in it.
            body = script.find("\n", index) + 1
            end = script.find(f"\n{here.group(1)}\n", body - 1)
            end = len(script) if end == -1 or body == 0 else end + 1
            states[body:end] = ["single"] * (end - body)
            index = end
            continue
        elif char == "'":
            state = "single"
        elif char == '"':
            state = "double"
        elif char == "#" and (index == 0 or script[index - 1] in " \t\n;"):
            state = "comment"
        index += 1
    return states


_DIRECTIVE_ALPHABET = re.compile(r"^[A-Za-z0-9_./:+@-]+$")
# A word of these characters alone bash takes as it is, quoted or not (shlex.quote leaves it bare): a user's
# program words, env values and parameters reach a script as such words.
_LITERAL_WORD = re.compile(r"^[A-Za-z0-9_@%+=:,./-]+$")


def unsafe_occurrences(script: str, text: str) -> list[str]:
    """Where `text` appears in the script other than inside single quotes, as a plain #SBATCH value, or (outside
    #SBATCH lines) as a word that bash takes literally."""
    problems = []
    states: list[str] | None = None
    literal_within = {"single"} | ({"double"} if not _LIVE_IN_DOUBLE_QUOTES & set(text) else set())
    start = script.find(text)
    while start != -1 and text:
        line_start = script.rfind("\n", 0, start) + 1
        line = script[line_start : script.find("\n", start) if "\n" in script[start:] else len(script)]
        directive = line.startswith("#SBATCH")
        sbatch_value = directive and line.startswith("#SBATCH --") and _DIRECTIVE_ALPHABET.match(text)
        literal = not directive and _LITERAL_WORD.match(text)
        if not (sbatch_value or literal):
            states = states or quoting(script)
            if not all(state in literal_within for state in states[start : start + len(text)]):
                problems.append(f"{text[:60]!r} unquoted in line {line[:120]!r}")
        start = script.find(text, start + 1)
    return problems


@functools.cache
def lint(script: str) -> list[str]:
    """What bash -n and shellcheck say about a script (cached: most scripts differ only in their run id)."""
    problems = []
    with tempfile.NamedTemporaryFile("w", suffix=".sbatch") as handle:
        handle.write(script)
        handle.flush()
        parsed = subprocess.run(["bash", "-n", handle.name], capture_output=True, text=True, check=False)
        if parsed.returncode:
            problems.append(f"bash -n: {parsed.stderr.strip()}")
        checked = subprocess.run(
            ["shellcheck", "--severity=style", handle.name], capture_output=True, text=True, check=False
        )
        if checked.returncode:
            problems.append(f"shellcheck: {checked.stdout.strip()}")
    return problems


def script_problems(script: str, run_id: str, hostile: list[str], name: str | None, baseline: str) -> list[str]:
    normal = script.replace(run_id, "RUN_ID")
    problems = lint(normal)
    # Text that a harmless request's script also holds (a `;`, a `-h`) says nothing; the rest must not show.
    distinctive = [text for text in hostile if text.strip() and text not in baseline]
    for text in distinctive:
        problems += unsafe_occurrences(normal, text)
    if name and name.strip() and name not in baseline and name in normal:
        problems.append(f"the experiment's name {name[:60]!r} is in the script")
    return problems


# ---- the sweep -------------------------------------------------------------------------------------------------


@dataclass
class Sweep:
    client: TestClient
    root: Path
    settings: Settings
    canary: Path
    path_values: dict[str, str]
    baseline: str  # the seeded run's script, its id replaced by RUN_ID
    last: tuple[Any, ...] = ()  # the snapshot after the last request: nothing else changes rows or directories
    outcomes: dict[str, int] = field(default_factory=dict)  # cases per outcome, over the whole sweep
    seen: dict[tuple[str, str], str] = field(default_factory=dict)  # (target id, corpus name) -> outcome

    def snapshot(self) -> tuple[Any, ...]:
        """Every table's row count, the entries at the top of the runs directory and of the sweep's directory, and
        the jobs submitted (a job's other files appear when it ends, whenever that is)."""
        engine = self.client.app.state.engine  # type: ignore[attr-defined]
        with engine.connect() as connection:
            rows = tuple(
                connection.execute(select(func.count()).select_from(table)).scalar_one()
                for table in SQLModel.metadata.sorted_tables
            )
        runs_dir = self.settings.runs_dir
        jobs = runs_dir / ".local-jobs"
        return (
            rows,
            sorted(path.name for path in runs_dir.iterdir()),
            len(list(jobs.glob("*.pid"))),
            # Besides the database's own files, which SQLite makes and removes as it pleases.
            sorted(path.name for path in self.root.iterdir() if not path.name.startswith("scalelab.db")),
        )

    def wait_for_local_jobs(self, timeout: float = 60) -> None:
        jobs = self.settings.runs_dir / ".local-jobs"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pending = [pid for pid in jobs.glob("*.pid") if not pid.with_suffix(".exit").exists()]
            if not pending:
                break
            time.sleep(0.05)
        scheduler: LocalScheduler = self.client.app.state.scheduler  # type: ignore[attr-defined]
        scheduler.poll([Job(path.stem) for path in jobs.glob("*.pid")])  # reaps the finished children


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sweep]:
    """One server for the whole sweep; its local jobs run the rendered scripts with `true` as the worker's Python."""
    root = tmp_path_factory.mktemp("hostile")
    settings = Settings(
        database_url=f"sqlite:///{root / 'scalelab.db'}",
        runs_dir=root / "runs",
        scheduler="local",
        worker_python=TRUE,
        poll_interval_s=0.2,
    )
    scheduler = LocalScheduler(settings.runs_dir / ".local-jobs")
    with make_client(settings, scheduler, raise_server_exceptions=False) as client:
        created = client.post("/api/experiments", json=cheap_request())
        assert created.status_code == 201, created.text
        experiment = created.json()
        run = experiment["runs"][0]
        baseline = (Path(run["run_dir"]) / "job.sbatch").read_text().replace(run["id"], "RUN_ID")
        assert not lint(baseline)
        token = client.post("/api/tokens")
        assert token.status_code == 201, token.text
        plan = client.post("/api/plans", json=cheap_request())
        assert plan.status_code == 201, plan.text
        path_values = {
            "experiment_id": experiment["id"],
            "run_id": run["id"],
            "name": "local",
            "token_id": token.json()["id"],
            "plan_id": plan.json()["id"],
        }
        state = Sweep(client, root, settings, root / "canary", path_values, baseline)
        yield state
        state.wait_for_local_jobs()
    log.info("hostile sweep: %s", json.dumps(state.outcomes, sort_keys=True))
    assert not state.canary.exists(), "a hostile value ran a command"


def read_back(client: TestClient, response: Answer) -> list[str]:
    """Whatever an accepted request stored must read back through every route that shows it."""
    payload = response.json()
    if not isinstance(payload, dict) or "runs" not in payload or "id" not in payload:
        return []
    urls = [f"/api/experiments/{payload['id']}", f"/api/runs?experiment_id={payload['id']}"]
    urls += [f"/api/experiments/{payload['id']}/compare", f"/api/experiments/{payload['id']}/compare.csv"]
    for run in payload["runs"]:
        urls += [f"/api/runs/{run['id']}{suffix}" for suffix in ("", "/metrics", "/log", "/events")]
    return [f"GET {url}: {answer.status_code}" for url in urls if (answer := client.get(url)).status_code != 200]


def check_case(sweep: Sweep, case: Case) -> tuple[str, list[str]]:
    """Send one case; its outcome (refused, accepted, not_found, ..., or a known bug's name) and what went wrong."""
    outcome, problems = _check_case(sweep, case)
    sweep.seen[(case.target.id, case.name)] = outcome
    return outcome, problems


def _check_case(sweep: Sweep, case: Case) -> tuple[str, list[str]]:
    prepared = prepare(case, sweep.path_values)
    if prepared is None:
        return "not_applicable", []
    before = sweep.last or sweep.snapshot()
    response = send(sweep.client, prepared)
    status = response.status_code
    sweep.last = sweep.snapshot()
    changed = sweep.last != before
    problems: list[str] = []
    if status >= 500:
        return "error", [f"{status}: {response.text[:300]}" + ("; and it left rows or files behind" if changed else "")]
    if changed and (status >= 300 or prepared.method == "GET"):
        problems.append(f"{status}, but it left rows or files behind")
    location = case.target.location
    if status == 422:
        errors = response.json().get("detail", [])
        if not any(names_field(error, case.target) for error in errors):
            problems.append(
                f"422 names {[(error.get('loc'), error.get('msg')) for error in errors]}, not {case.target.loc}"
            )
        return "refused", problems
    if location == "path":
        if status != 404:
            problems.append(f"a hostile {case.target.field[0]} gave {status}, not 404: {response.text[:200]}")
        return "not_found", problems
    if status >= 300:
        problems.append(f"{status}: {response.text[:300]}")
        return "other", problems
    problems += check_accepted(sweep, prepared, response)
    return "accepted", problems


def check_accepted(sweep: Sweep, prepared: Prepared, response: Answer) -> list[str]:
    problems = read_back(sweep.client, response) if prepared.method == "POST" else []
    payload = response.json()
    name = prepared.body.get("name") if isinstance(prepared.body, dict) else None
    if isinstance(payload, dict) and "script" in payload:  # a preview
        problems += script_problems(payload["script"], "RUN_ID", prepared.strings, name, sweep.baseline)
    if prepared.method != "POST" or not isinstance(payload, dict):
        return problems
    name = payload.get("name", name)
    for run in payload.get("runs", []) if "id" in payload else []:
        # An imported log's or card's runs have no job and never run.
        imported = run["scheduler"] in ("import", "card")
        if not imported and (prepared.method, prepared.template) not in SUBMITTING:
            problems.append(f"{prepared.template} submits runs: add it to SUBMITTING, for the Slurm test to run them")
        run_dir = Path(run["run_dir"])
        if not run_dir.is_relative_to(sweep.settings.runs_dir):
            problems.append(f"run directory {run_dir} outside the runs directory")
        if imported:
            continue
        script = (run_dir / "job.sbatch").read_text()
        problems += script_problems(script, run["id"], prepared.strings, name, sweep.baseline)
    return problems


TARGETS = targets()


def test_every_operation_is_covered():
    bodies = {operation.body for operation in operations() if operation.body is not None}
    assert bodies <= set(VALID_BODIES), f"add a valid example for {sorted(bodies - set(VALID_BODIES))}"
    params = {name for operation in operations() for location, name in operation.params if location == "path"}
    assert params <= set(PATH_PARAMS), f"add a valid value for path parameters {sorted(params - set(PATH_PARAMS))}"
    covered = {target.operation for target in TARGETS}
    assert covered == set(operations()) - {op for op in operations() if not op.params and op.body is None}


@pytest.mark.parametrize("target", TARGETS, ids=[target.id for target in TARGETS])
def test_hostile_value_is_refused_or_inert(sweep, target):
    outcomes: dict[str, list[str]] = {}
    failures = []
    for item in HOSTILE:
        case = Case(target, item.name, item.with_canary(sweep.canary))
        outcome, problems = check_case(sweep, case)
        outcomes.setdefault(outcome, []).append(item.name)
        sweep.outcomes[outcome] = sweep.outcomes.get(outcome, 0) + 1
        failures += [f"{item.name}: {problem}" for problem in problems]
    sweep.wait_for_local_jobs()
    assert not sweep.canary.exists(), f"a hostile value ran a command: {outcomes}"
    assert not failures, "\n".join(failures)
    assert outcomes.keys() - {"not_applicable"}, "no value could be sent"


@pytest.mark.parametrize(
    "item", [item for item in HOSTILE if item.kind == "shell" and tries_to_run(item.value)], ids=lambda item: item.name
)
def test_each_command_would_run_if_pasted_into_a_script(item, tmp_path):
    """The corpus is hostile indeed: pasted unquoted or naively quoted into bash, each command value creates the
    canary (so its absence elsewhere means something)."""
    canary = tmp_path / "canary"
    value = item.with_canary(canary)
    for context in (f"echo {value}", f"echo '{value}'", f'echo "{value}"', f"false {value}"):
        subprocess.run(["bash", "-c", f"{context}\nwait"], cwd=tmp_path, capture_output=True, timeout=10, check=False)
        if canary.exists():
            return
    pytest.fail(f"{item.name} runs nothing in any naive context")


def test_the_checks_see_what_they_look_for(tmp_path):
    value = f"x'; touch {tmp_path / 'canary'}; '"
    assert unsafe_occurrences(f"echo {value}\n", value)
    assert unsafe_occurrences(f'echo "{value}"\n', value)
    assert unsafe_occurrences(f"#SBATCH --comment={value}\n", value)
    assert unsafe_occurrences(f"# a comment {value}\n", value)
    assert not unsafe_occurrences(f"echo {shlex.quote(value)}\n", value)
    # A glob is inert within double quotes and in a quoted here-document's body; a `$` within double quotes is not.
    assert not unsafe_occurrences("echo \"${x%%[!0-9]*}\"\ncat <<'END'\n* $(touch x) *\nEND\n", "*")
    assert unsafe_occurrences("cat <<'END'\nEND\necho *\n", "*")
    assert unsafe_occurrences('echo "$(touch x)"\n', "$(touch x)")
    assert not unsafe_occurrences("cat <<'END'\n$(touch x)\nEND\n", "$(touch x)")
    assert not unsafe_occurrences("echo 'run --help'\n#SBATCH --mem=--help\n", "--help")
    assert not unsafe_occurrences("exec train.py --lr /etc/passwd\n", "/etc/passwd")
    assert unsafe_occurrences("#SBATCH --comment=x\n#SBATCH --output=/x\n", "--output=/x")  # sbatch reads it
    assert unsafe_occurrences("exec train.py ~/x\n", "~/x")
    baseline = "#!/bin/bash\necho hello\n"
    assert script_problems("#!/bin/bash\n# my run\necho hello\n", "0", [], "my run", baseline)
    assert lint("#!/bin/bash\necho $1\n")  # shellcheck: unquoted
    target = Target(Operation("POST", "/x", (), "X"), "body", ("base", "tp_degree"))
    assert names_field({"loc": ["body", "base", "tp_degree"], "msg": ""}, target)
    assert names_field({"loc": ["body", "grid"], "msg": "tp_degree applies to tp"}, target)
    assert not names_field({"loc": ["body", "name"], "msg": "tp_degree"}, target)
    bound = Target(Operation("POST", "/x", (), "X"), "body", ("target", "at_least"))
    assert names_field({"loc": ["body", "target"], "msg": "give at_least or at_most"}, bound)
    assert not names_field({"loc": ["body", "target"], "msg": "give one bound"}, bound)
    first_word = Target(Operation("POST", "/x", (), "X"), "body", ("base", "program", "command", 0))
    assert names_field({"loc": ["body", "base", "program", "command"], "msg": ""}, first_word)
    assert not names_field({"loc": ["body", "base", "program"], "msg": ""}, first_word)
    assert not names_field({"loc": ["body", "grid"], "msg": ""}, Target(first_word.operation, "body", ("grid", "x")))


def test_corpus_tries_what_the_issue_lists(tmp_path):
    named = values(tmp_path / "canary")
    assert sum(tries_to_run(value) for value in named.values()) >= 20
    assert any("\n#SBATCH" in str(value) for value in named.values())
    assert any(str(tmp_path / "canary") in str(value) for value in named.values())
    assert max(len(value) for value in named.values() if isinstance(value, str)) >= 100_000


# ---- the canary proof on the real Slurm ---------------------------------------------------------------------


@dataclass
class Submission:
    operation: Operation
    body: dict[str, Any]
    targets: list[Target]
    name: str  # the corpus entry's
    value: str
    experiment: dict[str, Any] = field(default_factory=dict)

    @property
    def shapes_job(self) -> bool:
        """It sets resources, which sbatch reads: sbatch may refuse a value the profile let through."""
        return any(target.field[:1] == ("resources",) for target in self.targets)

    @property
    def names_no_program(self) -> bool:
        """It is the program's command: no executable has the hostile name, so the program cannot start and the run
        fails (inertly: what is checked is that nothing ran)."""
        return any(target.field == ("base", "program", "command", 0) for target in self.targets)


def outcome(sweep: Sweep, target: Target, item: Any) -> str:
    """The sweep's outcome for the case, sending it now if the sweep did not (a run of this test alone)."""
    if (target.id, item.name) not in sweep.seen:
        _, problems = check_case(sweep, Case(target, item.name, item.with_canary(sweep.canary)))
        assert not problems, problems
    return sweep.seen[(target.id, item.name)]


def submissions(sweep: Sweep) -> list[Submission]:
    """The accepted text values, grouped: each value in one request with every field of a family that accepted it
    set to it.

    The families: the fields that shape the job (resources, which sbatch reads), those of each body of another
    shape (a program's: its command, env and parameters reach the script as no other field does), and the rest.
    Each family takes each value once, in a request of its own, on one of the routes that accepted it there, the
    routes taking turns: both routes render through the same code, so a value's second route proved nothing the
    in-process sweep had not (and cost a Slurm job: 99 jobs were 3 minutes of CI's critical path).
    """
    routes = [operation for operation in operations() if (operation.method, operation.path) in SUBMITTING]
    planned: list[Submission] = []
    turns: dict[str, int] = {}
    for item in HOSTILE:
        if not isinstance(item.value, str) or not json_safe(item.value):
            continue  # a number, a list or null carries no command; the sweep checked what they render
        value = item.with_canary(sweep.canary)
        families: dict[str, list[tuple[Operation, list[Target]]]] = {}
        for operation in routes:
            fields = [target for target in TARGETS if target.operation == operation and target.location == "body"]
            for target in fields:
                if target.field and outcome(sweep, target, item) == "accepted":
                    family = target.variant or ("resources" if target.field[:1] == ("resources",) else "")
                    found = families.setdefault(family, [])
                    if not found or found[-1][0] != operation:
                        found.append((operation, []))
                    found[-1][1].append(target)
        for family, accepting in sorted(families.items()):
            operation, group = accepting[turns.get(family, 0) % len(accepting)]
            turns[family] = turns.get(family, 0) + 1
            planned.append(_submission(operation, group, item.name, value))
    return planned


def _submission(operation: Operation, targets: list[Target], name: str, value: str) -> Submission:
    body = valid_body(targets[0])  # the targets of one submission share their body
    for target in targets:
        body = with_value(body, target, value)
    return Submission(operation, body, targets, name, value)


def _submit(client: httpx.Client, submission: Submission, experiment_id: str) -> list[Submission]:
    route = submission.operation.path
    url = route.replace("{experiment_id}", experiment_id)
    response = send(client, Prepared("POST", url, route, submission.body, has_body=True))
    if response.status_code == 422 and len(submission.targets) > 1:
        # Each field took the value alone, but not all at once: one request per field.
        singles = [
            _submission(submission.operation, [target], submission.name, submission.value)
            for target in submission.targets
        ]
        return [done for single in singles for done in _submit(client, single, experiment_id)]
    assert response.status_code == 201, f"{submission.name} {[t.id for t in submission.targets]}: {response.text}"
    submission.experiment = response.json()
    return [submission]


@pytest.mark.slurm
@pytest.mark.torch
def test_accepted_hostile_requests_run_on_slurm_and_nothing_executes(sweep, slurm_server, tmp_path):
    """Every text value that a submitting route accepts, in the fields that accept it, sent to a real server on
    the real Slurm (see `submissions`): the rendered scripts run under sbatch and srun, the runs complete (or, for
    an sbatch option the profile let through, sbatch refuses it), and the canary never appears.

    About 60 one-step jobs (a few of which sbatch refuses): 2 minutes on the 8-slot local Slurm of a 2-core
    machine that other tests load too; run alone, the test first sends the sweep's cases it needs (half a minute)."""
    started = time.monotonic()
    planned = submissions(sweep)
    triaged = time.monotonic()
    assert planned, "no hostile text was accepted anywhere: the corpus or the routes changed"
    done: list[Submission] = []
    with httpx.Client(base_url=slurm_server, timeout=60) as client:
        baseline = client.post("/api/experiments", json=cheap_request("hostile baseline"))
        assert baseline.status_code == 201, baseline.text
        source = baseline.json()
        try:
            for submission in planned:
                done += _submit(client, submission, source["id"])
            runs = wait_until_all_end(client, deadline=time.monotonic() + 900)
        finally:
            for experiment in [source, *(submission.experiment for submission in done)]:
                client.post(f"/api/experiments/{experiment['id']}/cancel")  # only ours; 409 once all have ended
    states = {state: sum(run["state"] == state for run in runs) for state in {run["state"] for run in runs}}
    log.info(
        "hostile requests on Slurm: %d submissions, runs %s; %.0f s to find them, %.0f s to run them",
        len(done),
        states,
        triaged - started,
        time.monotonic() - triaged,
    )

    assert not sweep.canary.exists(), "a hostile value ran a command under Slurm"
    first = source["runs"][0]
    baseline_script = (Path(first["run_dir"]) / "job.sbatch").read_text().replace(first["id"], "RUN_ID")
    assert "srun" in baseline_script and not lint(baseline_script)
    state_of = {run["id"]: run for run in runs}
    problems = []
    for submission in done:
        name = submission.experiment["name"]
        for run in submission.experiment["runs"]:
            final = state_of[run["id"]]
            refused_by_sbatch = final["state"] == "submit_failed" and "sbatch refused" in (final["message"] or "")
            expected = refused_by_sbatch if submission.shapes_job else final["state"] == "failed"
            ended_as_it_must = submission.names_no_program and expected
            if (
                final["state"] != "completed"
                and not (submission.shapes_job and refused_by_sbatch)
                and not ended_as_it_must
            ):
                problems.append(f"{submission.name} {final['state']}: {final['message']} {final['exit_code']}")
            script = (Path(run["run_dir"]) / "job.sbatch").read_text()
            for problem in script_problems(script, run["id"], [submission.value], name, baseline_script):
                problems.append(f"{submission.name}: {problem}")
    assert not problems, "\n".join(problems)
    assert state_of[first["id"]]["state"] == "completed"


def wait_until_all_end(client: httpx.Client, deadline: float) -> list[dict[str, Any]]:
    while True:
        runs: list[dict[str, Any]] = client.get("/api/runs", params={"limit": 1000}).json()["data"]
        if all(run["state"] in FINAL for run in runs) or time.monotonic() > deadline:
            return runs
        time.sleep(1)


# ---- what the OpenAPI schema does not list: the pages, the sign-in form, tokens, cookies, user names ----------------

# The pages' query parameters and path segments (the pages stay out of the API schema, so `targets` cannot find them).
PAGE_URLS = (
    "/?{}",
    "/experiments/new?from={}",
    "/runs?experiment={}",
    "/runs?state={}",
    "/runs?model={}",
    "/runs?strategy={}",
    "/runs?owner={}",
    "/runs?skip={}",
    "/runs/{}",
    "/experiments/{}",
    "/compare?run={}",
    "/login?next={}",
)


def _texts(canary: Path) -> list[tuple[str, str]]:
    """(name, text) of each corpus value a URL, a form or a header can carry."""
    return [(name, text) for name, value in values(canary).items() if (text := as_text(value)) is not None]


def _reflected_raw(html: str, text: str) -> bool:
    """The page holds the value with its markup intact: a script a browser would run."""
    return "<" in text and text in html


def test_hostile_page_parameters_never_break_a_page(client, tmp_path):
    canary = tmp_path / "canary"
    failures = []
    for template in PAGE_URLS:
        for name, text in _texts(canary):
            # A lone surrogate goes as the bytes it stands for: not UTF-8, as a hand-made URL can be.
            url = template.format(quote(text, safe="", errors="surrogatepass"))
            if len(url) > MAX_URL:
                continue
            response = client.get(url, follow_redirects=False)
            if response.status_code >= 500 or _reflected_raw(response.text, text):
                failures.append(f"GET {template} with {name}: {response.status_code} {response.text[:200]}")
    assert not canary.exists(), "a hostile page parameter ran a command"
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("form_field", ["name", "password", "token", "next"])
def test_hostile_sign_in_fields_are_refused_or_inert(client, tmp_path, form_field):
    canary = tmp_path / "canary"
    failures = []
    for name, text in _texts(canary):
        form = {"name": "tester", "password": "not it", "next": "/runs", form_field: text}
        # (No cookie: the client's bearer token is not what signs in a browser.)
        body = urlencode(form, errors="surrogatepass")
        response = client.post("/login", content=body, headers={"Content-Type": "application/x-www-form-urlencoded"})
        location = response.headers.get("Location", "")
        if response.status_code == 303:
            # Only the `next` field may let a sign-in through (with the right password it would); it must stay local.
            if form_field != "next" or not location.startswith("/") or location.startswith("//"):
                failures.append(f"{name}: signed in, or sent off-site to {location!r}")
        # 429: the name's failure budget is spent after its first guesses (sign-in throttling), a refusal too.
        elif response.status_code not in (200, 401, 429) or _reflected_raw(response.text, text):
            failures.append(f"{name}: {response.status_code} {response.text[:200]}")
    assert not canary.exists(), "a hostile sign-in value ran a command"
    assert not failures, "\n".join(failures)


def test_hostile_tokens_and_session_cookies_are_refused(client, tmp_path):
    canary = tmp_path / "canary"
    failures = []
    for name, text in _texts(canary):
        if not text.isprintable() or not text.isascii() or len(text) > 8000:
            continue  # not a header value any HTTP client sends (httpx refuses it before it leaves)
        for what, headers in (("token", {"Authorization": f"Bearer {text}"}), ("cookie", {"Authorization": ""})):
            client.cookies.clear()
            if what == "cookie":
                client.cookies.set("scalelab_session", text)
            response = client.get("/api/runs", headers=headers)
            if response.status_code != 401:
                failures.append(f"{name} ({what}): {response.status_code}")
    client.cookies.clear()
    assert not canary.exists()
    assert not failures, "\n".join(failures)


def test_hostile_user_names_are_refused(session, tmp_path):
    canary = tmp_path / "canary"
    names = [text for _, text in _texts(canary)] + ["alice\n", "alice\nbob"]
    accepted = []
    for text in names:
        try:
            users.add_user(session, text)
        except users.UserError:
            session.rollback()
            continue
        accepted.append(text)
    # Only plain names pass (the corpus holds a few: "x", "_"-less words are not in it); each is exactly itself.
    assert all(re.fullmatch(r"[a-z_][a-z0-9_.-]{0,31}", text) for text in accepted), accepted
    assert not canary.exists()
