"""What a shared experiment's records hold reaches the reader's terminal as text: a job's escape sequences (a
screen clear, a title change, a hyperlink, a C1 CSI) are stripped from everything the commands print."""

from __future__ import annotations

from client import cli
from client.terminal import printable
from tests.client.helpers import answering, scalelab
from tests.factories import experiment_row
from tests.server.services.comparison.timed import timed_run

# A hyperlink (OSC 8), a screen clear, a window title (OSC 0), a bell, a backspace and a C1 CSI.
HOSTILE = "\x1b]8;;http://evil.example/\x07cuda\x1b]8;;\x07\x1b[2J\x1b]0;pwned\x07\x08\x9b31m"
CONTROLS = [chr(code) for code in (*range(0x00, 0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0))]


def test_printable_text_keeps_lines_tabs_and_every_printable_character():
    text = "é ü ∑ 日本 🙂\tcolumns\nnext line"
    assert printable(text) == text
    assert printable("".join(CONTROLS)) == ""


def test_show_and_export_print_no_control_character_a_job_wrote(client, capsys, session, tmp_path):
    experiment = experiment_row(session)
    run = timed_run(
        session,
        experiment,
        tmp_path / "run",
        1,
        [5.0, 3.0],
        epoch_fields={"peak_memory_bytes": 2**20, "memory_kind": HOSTILE, "note_loss": 1.0},
    )
    for argv in (["show", run.id], ["export", experiment.id, "--csv"], ["export", experiment.id, "--json"]):
        code, out, err = scalelab(client, capsys, *argv)
        assert code == cli.EXIT_OK, err
        assert "evil.example" in out or "--json" in argv  # the text is still there, as text
        assert not set(out + err) & set(CONTROLS), argv


def test_an_error_the_server_words_is_printed_as_text(capsys):
    code, out, err = scalelab(answering(422, {"detail": HOSTILE}), capsys, "show", "0a1b2c3d4e")
    assert code == cli.EXIT_USAGE
    assert "evil.example" in err
    assert not set(out + err) & set(CONTROLS)
