"""The batch script's probe (contract/workdir_probe.py) on real files: links never followed, its bounds, odd file names,
what it says a run wrote, and its records read back as the server reads any job's output."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from contract import metrics, workdir_probe
from contract.records import CodeRecord, WorkdirRecord, parse_metric_line
from contract.workdir_probe import listing, newest, written

PROBE = Path(workdir_probe.__file__)


def run_probe(*words: str) -> list[CodeRecord | WorkdirRecord]:
    """The probe as the batch script runs it (a Python of its own, only the standard library), its lines parsed."""
    done = subprocess.run(
        [sys.executable, "-I", str(PROBE), *words], capture_output=True, text=True, check=True, timeout=60
    )
    records = [parse_metric_line(line) for line in done.stdout.splitlines()]
    assert all(isinstance(record, CodeRecord | WorkdirRecord) for record in records), done.stdout
    return [record for record in records if isinstance(record, CodeRecord | WorkdirRecord)]


def test_its_prefix_and_bounds_are_the_servers():
    assert workdir_probe.PREFIX == metrics.PREFIX
    assert WorkdirRecord.model_fields["files"].metadata[0].max_length == workdir_probe.MAX_SHOWN
    assert CodeRecord.model_fields["files"].metadata[0].max_length == workdir_probe.MAX_TOP_FILES


def test_links_are_never_followed(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("not the program's")
    workdir = tmp_path / "work"
    workdir.mkdir()
    (workdir / "train.py").write_text("print(1)")
    (workdir / "data").symlink_to(outside)  # a link to a directory: not entered
    (workdir / "alias.py").symlink_to(outside / "secret.txt")  # a link to a file: not listed, not hashed
    (workdir / "loop").symlink_to(workdir)  # a loop: not entered either
    files, complete = listing(str(workdir), time.monotonic() + 10)
    assert set(files) == {"train.py"} and complete
    (code,) = [record for record in run_probe("start", str(workdir)) if isinstance(record, CodeRecord)]
    assert [file.name for file in code.files] == ["train.py"]


def test_the_listing_stops_at_its_bounds_and_says_so(tmp_path, monkeypatch):
    deep = tmp_path / "a" / "b" / "c" / "d" / "e"
    deep.mkdir(parents=True)
    (deep / "too-deep.bin").write_bytes(b"x")
    (tmp_path / "a" / "b" / "shallow.bin").write_bytes(b"x")
    files, complete = listing(str(tmp_path), time.monotonic() + 10)
    assert "a/b/shallow.bin" in files and not any(name.endswith("too-deep.bin") for name in files)
    assert not complete  # the depth bound was reached
    for at in range(50):
        (tmp_path / f"f{at}").write_bytes(b"x")
    monkeypatch.setattr(workdir_probe, "MAX_ENTRIES", 20)
    files, complete = listing(str(tmp_path), time.monotonic() + 10)
    assert len(files) <= 20 and not complete
    # Past its deadline it stops at once.
    assert listing(str(tmp_path), time.monotonic() - 1) == ({}, False)


def test_a_record_names_at_most_its_bound_newest_first(tmp_path):
    for at in range(workdir_probe.MAX_SHOWN + 10):
        path = tmp_path / f"f{at:03d}"
        path.write_bytes(b"x")
        os.utime(path, ns=(at * 10**9, at * 10**9))
    files, _ = listing(str(tmp_path), time.monotonic() + 10)
    shown = newest(files)
    assert len(shown) == workdir_probe.MAX_SHOWN and shown[0]["name"] == f"f{workdir_probe.MAX_SHOWN + 9:03d}"


def test_odd_file_names_reach_the_server_as_plain_bounded_text(tmp_path):
    workdir = tmp_path.as_posix().encode()
    names = [b"new\nline.txt", b"not-utf8-\xff.bin", b"x" * 250 + b".pt", b"$(reboot)`id`;'\".txt"]
    for name in names:
        with open(os.path.join(workdir, name), "wb") as file:
            file.write(b"data")
    records = run_probe("start", str(tmp_path), "--state", str(tmp_path / "state.json"))
    (found,) = [record for record in records if isinstance(record, WorkdirRecord)]
    shown = {file.name for file in found.files}
    assert "new?line.txt" in shown and "not-utf8-\N{REPLACEMENT CHARACTER}.bin" in shown
    assert "$(reboot)`id`;'\".txt" in shown  # as text: it never reaches a shell
    assert len(shown) == len(names)
    # A name beyond the bound is cut, not refused; one with control characters from elsewhere is refused.
    assert workdir_probe.shown_name("y" * 600).endswith("...") and len(workdir_probe.shown_name("y" * 600)) == 512
    line = '[METRIC] {"v":1,"kind":"workdir","phase":"end","complete":true,"files":[{"name":"a\\nb","bytes":1}]}'
    with pytest.raises(ValueError, match="control characters"):
        parse_metric_line(line)


def test_the_run_wrote_what_it_created_or_changed_and_nothing_else(tmp_path):
    (tmp_path / "train.py").write_text("print(1)")
    (tmp_path / "old.pt").write_bytes(b"1")
    state = str(tmp_path.parent / "state.json")
    run_probe("start", str(tmp_path), "--state", state)
    (tmp_path / "snapshot.pt").write_bytes(b"new")
    (tmp_path / "old.pt").write_bytes(b"22")
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "train.cpython-312.pyc").write_bytes(b"bytecode")  # any import writes these
    (end,) = run_probe("end", str(tmp_path), "--state", state)
    assert isinstance(end, WorkdirRecord) and end.phase == "end" and end.complete
    assert {(file.name, file.created) for file in end.files} == {("snapshot.pt", True), ("old.pt", False)}


def test_beyond_a_bounded_first_listing_only_newer_files_count_as_written():
    before = {"a": [10, 1]}
    after = {"a": [10, 1], "unseen-old": [5, 1], "new": [20, 1]}
    assert [file["name"] for file in written(before, after, complete=False)] == ["new"]
    assert {file["name"] for file in written(before, after, complete=True)} == {"new", "unseen-old"}


def test_the_code_record_hashes_the_script_and_tells_git(tmp_path):
    (tmp_path / "train.py").write_text("print('hello')\n")
    os.mkfifo(tmp_path / "pipe")  # not a regular file: never opened for reading, never waited on
    (code,) = run_probe("start", str(tmp_path), "--script", "train.py")
    assert isinstance(code, CodeRecord) and code.script is not None
    assert code.script.sha256 == hashlib.sha256(b"print('hello')\n").hexdigest()
    assert [file.name for file in code.files] == ["train.py"]
    assert code.git_revision is None and code.git  # not a repository: why, in words
    (missing,) = run_probe("start", str(tmp_path), "--script", "pipe")
    assert isinstance(missing, CodeRecord) and missing.script_error and missing.script
    assert missing.script.sha256 is None
    if shutil.which("git") is None:
        return
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@example.org"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "train.py"], check=True)
    subprocess.run([*git, "commit", "-qm", "first"], check=True)
    revision = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout
    (clean,) = run_probe("start", str(tmp_path), "--script", "train.py")
    assert isinstance(clean, CodeRecord) and clean.git_revision == revision.strip() and clean.git_dirty is False
    (tmp_path / "train.py").write_text("print('edited')\n")
    (dirty,) = run_probe("start", str(tmp_path), "--script", "train.py")
    assert isinstance(dirty, CodeRecord) and dirty.git_dirty is True


def test_without_the_listing_of_the_start_the_end_says_nothing(tmp_path):
    assert run_probe("end", str(tmp_path), "--state", str(tmp_path / "missing.json")) == []
    (tmp_path / "broken.json").write_text(json.dumps({"files": "not a listing"}))
    assert run_probe("end", str(tmp_path), "--state", str(tmp_path / "broken.json")) == []
