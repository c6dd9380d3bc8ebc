"""Which code a program's run started, and whether its script is the same now: the sentences, and what the server
reads to tell (only under the profile's program roots, a regular file, never waited on)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from contract.program import ProgramSpec
from contract.records import CodeRecord, FileSeen
from server.models import CodeChange, Run
from server.profiles import BUILTIN_DIR, ClusterProfile, load_profile
from server.services import code


def program_run(workdir: Path, command: list[str] | None = None) -> Run:
    program = {"command": command or ["python", "train.py"], "workdir": str(workdir)}
    return Run(id="r1", experiment_id="e1", position=0, scheduler="slurm", run_dir="/runs/r1",
               spec={"kind": "program", "gpus": 1, "program": program})  # fmt: skip


def noted(text: bytes) -> CodeRecord:
    return CodeRecord(script=FileSeen(name="train.py", bytes=len(text), sha256=hashlib.sha256(text).hexdigest()))


def profile_with(*roots: Path | str) -> ClusterProfile:
    """The local profile with these program roots."""
    return load_profile(BUILTIN_DIR / "local.toml").model_copy(update={"program_roots": [str(r) for r in roots]})


def test_the_script_is_the_same_changed_or_cannot_be_told(tmp_path):
    (tmp_path / "train.py").write_bytes(b"v1")
    run = program_run(tmp_path)
    profile = profile_with(tmp_path)
    same = code.run_code(run, noted(b"v1"), profile)
    assert same.now == CodeChange.same and same.noted
    (tmp_path / "train.py").write_bytes(b"v2")
    changed = code.run_code(run, noted(b"v1"), profile)
    assert changed.now == CodeChange.changed and "its script changed since it ran" in changed.note
    unnoted = code.run_code(run, None, profile)
    assert unnoted.now == CodeChange.unknown and not unnoted.noted and unnoted.summary == code.UNKNOWN


def test_the_server_reads_only_under_a_program_root_and_never_waits_on_a_fifo(tmp_path):
    inside, outside = tmp_path / "roots", tmp_path / "elsewhere"
    inside.mkdir()
    outside.mkdir()
    (outside / "train.py").write_bytes(b"v1")
    (inside / "train.py").symlink_to(outside / "train.py")  # a link out of the roots: not read
    program = ProgramSpec.model_validate({"command": ["python", "train.py"], "workdir": str(inside)})
    digest, why = code.current_sha256(program, [inside])
    assert digest is None and "is not under a program root" in why
    os.mkfifo(inside / "pipe.py")
    fifo = ProgramSpec.model_validate({"command": ["python", "pipe.py"], "workdir": str(inside)})
    digest, why = code.current_sha256(fifo, [inside])
    assert digest is None and "not a regular file" in why
    # A home root is the job's user's: the server does not read there, and says it cannot tell.
    (inside / "own.py").write_bytes(b"x")
    run = program_run(inside, ["python", "own.py"])
    assert code.run_code(run, noted(b"x"), profile_with("~")).now == CodeChange.unknown


def test_the_summary_names_the_script_the_files_and_git():
    script = FileSeen(name="train.py", bytes=3, sha256="ab" * 32)
    record = CodeRecord(script=script, files=[script], files_more=2, git="no git on the node")
    assert code.summary(record) == (
        "train.py sha256 abababababab; 1 of the workdir's top-level files hashed (2 more not hashed); "
        "git: no git on the node"
    )
