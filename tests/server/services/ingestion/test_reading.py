"""Reading a run's output from its offset: complete lines only, a bounded chunk at a time, overlong lines skipped
and counted, a finished run's cut last line. The first tests read files alone, no database; the last ones follow a
run's offset through ingestion."""

from __future__ import annotations

from pathlib import Path

import pytest

from contract.rundir import OUTPUT_FILE
from server import runfiles
from server.services.ingestion import reading
from server.services.ingestion.reading import CutLine, NewLines, output_size, read_cut_line, read_new_lines
from tests.server.services.ingestion.output import START, append, cycle, epoch_line, stored


def identity_of(run_dir: Path) -> str:
    return runfiles.identity_of((run_dir / OUTPUT_FILE).stat())


def write(run_dir: Path, data: bytes) -> None:
    with (run_dir / OUTPUT_FILE).open("ab") as handle:
        handle.write(data)


def test_no_output_yet_reads_nothing(tmp_path):
    assert read_new_lines(str(tmp_path), 0, None, None) is None
    assert read_cut_line(str(tmp_path), 0, None, None) is None
    assert output_size(str(tmp_path)) == 0


def test_the_complete_lines_are_read_with_their_offsets_and_a_partial_one_waits(tmp_path):
    metric = b'[METRIC] {"v":1}\n'
    write(tmp_path, b"progress\n" + metric + b"[METRIC] half")
    new = read_new_lines(str(tmp_path), 0, None, None)
    # The progress line is read, not given.
    assert new == NewLines([(9, metric)], 9 + len(metric), 2, 0, identity_of(tmp_path))
    assert read_new_lines(str(tmp_path), new.end, None, None) is None  # only the partial line is left
    assert output_size(str(tmp_path)) == new.end + len(b"[METRIC] half")


def test_a_metric_line_too_long_for_a_record_is_counted_not_given(tmp_path, monkeypatch):
    monkeypatch.setattr(reading, "MAX_LINE_BYTES", 100)
    long_metric, long_progress, short = b"[METRIC] " + b"x" * 200 + b"\n", b"y" * 200 + b"\n", b"[METRIC] {}\n"
    write(tmp_path, long_metric + long_progress + short)
    new = read_new_lines(str(tmp_path), 0, None, None)
    at = len(long_metric) + len(long_progress)
    # A long progress line is no error.
    assert new == NewLines([(at, short)], at + len(short), 3, 1, identity_of(tmp_path))


def test_a_line_longer_than_a_chunk_is_skipped_over_several_reads_and_counted_once(tmp_path, monkeypatch):
    monkeypatch.setattr(reading, "CHUNK_BYTES", 64)
    after = b"[METRIC] {}\n"
    write(tmp_path, b"z" * 150 + b"\n" + after)
    reads = []
    offset = 0
    while (new := read_new_lines(str(tmp_path), offset, None, None)) is not None and new.lines_read:
        reads.append(new)
        offset = new.end
    assert [(new.metric_lines, new.overlong) for new in reads] == [([], 1), ([], 0), ([], 0), ([(151, after)], 0)]
    assert offset == 151 + len(after)


def test_a_cut_last_line_is_read_to_the_end_of_the_file(tmp_path, monkeypatch):
    write(tmp_path, b"done\n[METRIC] {")
    assert read_cut_line(str(tmp_path), 5, None, None) == CutLine(5, b"[METRIC] {", 15, identity_of(tmp_path))
    assert read_cut_line(str(tmp_path), 15, None, None) is None
    monkeypatch.setattr(reading, "MAX_LINE_BYTES", 4)
    # Longer than a record: a parse error.
    assert read_cut_line(str(tmp_path), 5, None, None) == CutLine(5, None, 15, identity_of(tmp_path))


# ---- through ingestion: the run's offset and parse errors ------------------------------------------------------


def test_missing_output_file_is_not_an_error(session, run):
    assert cycle(session, run) == 0
    assert run.log_offset == 0


def test_partial_last_line_waits_for_its_end(session, run):
    line = epoch_line(1)
    append(run, START + "\n" + line[:20])
    cycle(session, run)
    assert [m.kind for m in stored(session, run)] == ["start"]
    offset = run.log_offset
    assert offset == len(START) + 1
    append(run, line[20:] + "\n")
    cycle(session, run)
    assert [m.kind for m in stored(session, run)] == ["start", "epoch"]
    assert stored(session, run)[1].offset == offset


def test_overlong_lines_are_counted_not_stored(session, run, monkeypatch):
    monkeypatch.setattr(reading, "MAX_LINE_BYTES", 1000)
    append(run, "[METRIC] " + "x" * 5000 + "\n" + epoch_line(1) + "\n")
    cycle(session, run)
    assert run.parse_errors == 1
    assert [m.epoch for m in stored(session, run)] == [1]


def test_a_line_longer_than_a_chunk_does_not_stall_ingestion(session, run, monkeypatch):
    monkeypatch.setattr(reading, "CHUNK_BYTES", 4096)
    append(run, "[METRIC] " + "y" * 10_000 + "\n" + epoch_line(1) + "\n")
    while cycle(session, run):
        pass
    assert [m.epoch for m in stored(session, run)] == [1]
    assert run.parse_errors == 1


@pytest.mark.parametrize("text", ["", "no metric here\n"])
def test_a_run_with_nothing_to_store_moves_its_offset_only(session, run, text):
    append(run, text)
    cycle(session, run)
    assert (run.log_offset, run.parse_errors, stored(session, run)) == (len(text), 0, [])
