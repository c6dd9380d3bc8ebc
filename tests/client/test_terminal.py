"""Tables that fit a width, progress bars, and blocks of lines that update."""

from __future__ import annotations

import io

from client.terminal import Board, bar, table

HEADERS = ["ID", "STATE", "NAME", "GPUS"]
ROWS: list[list[object]] = [["a1", "running", "a rather long experiment name", 4], ["b2", None, "short", 0.123456]]


def test_a_table_that_fits_is_left_whole():
    lines = table(HEADERS, ROWS, 100)
    assert lines[0].split() == HEADERS
    assert lines[1].split()[-1] == "4"
    assert lines[2].split() == ["b2", "-", "short", "0.1235"]
    assert lines[0].index("GPUS") == lines[1].rindex("4") == lines[2].index("0.1235")  # aligned


def test_the_flexible_column_gives_way_first():
    lines = table(HEADERS, ROWS, 40, flexible=2)
    assert all(len(line) <= 40 for line in lines)
    assert lines[0].split() == HEADERS  # every column kept
    assert "…" in lines[1]


def test_then_columns_are_left_out_from_the_right():
    lines = table(HEADERS, ROWS, 14, flexible=2)
    assert [line.split() for line in lines] == [["ID", "STATE"], ["a1", "running"], ["b2", "-"]]


def test_bars():
    assert bar(1, 2, width=10) == "[#####.....]"
    assert bar(3, 2, width=4) == "[####]"
    assert bar(0, 0, width=4) == "[....]"


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_board_reprints_only_changed_lines_where_it_cannot_redraw():
    out = io.StringIO()
    board = Board(out)
    board.show(["a 0/2", "b 0/2"])
    board.show(["a 1/2", "b 0/2"])
    assert out.getvalue() == "a 0/2\nb 0/2\na 1/2\n"


def test_a_board_redraws_in_place_on_a_terminal():
    out = FakeTerminal()
    board = Board(out)
    board.show(["a 0/2", "b 0/2"])
    board.show(["a 1/2", "b 0/2"])
    assert out.getvalue() == "\x1b[2Ka 0/2\n\x1b[2Kb 0/2\n\x1b[2F\x1b[2Ka 1/2\n\x1b[2Kb 0/2\n"
