"""server/runfiles.py on real files: what is refused (links, FIFOs, sockets, devices, directories, another user's
file, a linked directory on the way), what is read (a regular file, bounded), and that a file missing reads as none."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from server import runfiles
from server.runfiles import Unreadable


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    made = tmp_path / "runs" / "r1"
    made.mkdir(parents=True)
    return made


def refusal(run_dir: Path, name: str = "output.log", owner: int | None = None) -> str:
    with pytest.raises(Unreadable) as refused, runfiles.open_file(run_dir, name, owner):
        pass
    return str(refused.value)


def test_a_regular_file_is_read_bounded_from_its_offset(run_dir):
    (run_dir / "output.log").write_bytes(b"0123456789")
    with runfiles.open_file(run_dir, "output.log", os.geteuid()) as found:
        assert found is not None and found.size == 10
        assert (found.read(2, 3), found.read(8, 100), found.read(20, 5)) == (b"234", b"89", b"")
        assert found.identity == runfiles.identity_of((run_dir / "output.log").stat())
        with pytest.raises(ValueError, match="at most"):
            found.read(0, runfiles.MAX_READ_BYTES + 1)


def test_missing_files_and_directories_read_as_none(run_dir):
    assert runfiles.read_file(run_dir, "output.log", 10) is None
    assert runfiles.read_file(run_dir.parent / "not-yet", "output.log", 10) is None
    assert runfiles.directories_in(run_dir, "checkpoints") == []


def test_links_fifos_sockets_devices_and_directories_are_refused(run_dir, tmp_path):
    (run_dir / "to-zero").symlink_to("/dev/zero")
    os.mkfifo(run_dir / "fifo")
    (run_dir / "dir").mkdir()
    with socket.socket(socket.AF_UNIX) as listening:
        listening.bind(str(run_dir / "sock"))
        assert refusal(run_dir, "sock").endswith("it is a socket")
    assert refusal(run_dir, "to-zero").endswith("it is a link")
    assert refusal(run_dir, "fifo").endswith("it is a FIFO")
    assert refusal(run_dir, "dir").endswith("it is a directory")


def test_a_device_node_is_refused(run_dir):
    if os.geteuid() != 0:
        pytest.skip("only root makes device nodes")
    os.mknod(run_dir / "null", 0o600 | 0o020000, os.makedev(1, 3))  # a character device: /dev/null's numbers
    assert refusal(run_dir, "null").endswith("it is a device")


def test_a_linked_run_directory_or_subdirectory_is_refused(run_dir, tmp_path):
    other = tmp_path / "elsewhere"
    (other / "checkpoints" / "epoch-1").mkdir(parents=True)
    (other / "output.log").write_text("theirs\n")
    linked = run_dir.parent / "r2"
    linked.symlink_to(other)
    assert refusal(linked) == "the run's directory is a link, not a directory of its own"
    (run_dir / "checkpoints").symlink_to(other / "checkpoints")
    with pytest.raises(Unreadable, match=r"checkpoints \(a directory\) is a link"):
        runfiles.directories_in(run_dir, "checkpoints")


def test_a_file_of_another_owner_is_refused_where_the_owner_is_known(run_dir):
    (run_dir / "output.log").write_text("x\n")
    mine = os.geteuid()
    assert runfiles.read_file(run_dir, "output.log", 10, mine) == b"x\n"
    # The run's directory is checked first: it is not the other user's either.
    assert "not to the run's owner (uid 4242)" in refusal(run_dir, owner=4242)
    assert "who has no account on this host" in refusal(run_dir, owner=runfiles.NOBODY)


def test_only_directories_are_listed(run_dir):
    (run_dir / "checkpoints" / "epoch-2").mkdir(parents=True)
    (run_dir / "checkpoints" / "epoch-3").symlink_to(run_dir / "checkpoints" / "epoch-2")
    (run_dir / "checkpoints" / "notes").write_text("")
    assert runfiles.directories_in(run_dir, "checkpoints") == ["epoch-2"]
