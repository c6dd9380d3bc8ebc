"""Experiment.wait's progress bar: one display updated in place in Jupyter, one line redrawn in a terminal, and
elsewhere (a log, a pipe, CI) a plain line each time the progress changes.

No tqdm: the bar is client.terminal's, and Jupyter's display is IPython's, used where IPython is importable and a
kernel runs the code.
"""

from __future__ import annotations

import html
import importlib
import sys
from typing import Any, Protocol, TextIO

from client.output import counts
from client.progress import Progress
from client.terminal import bar, columns, printable, shorten, unfiltered

WIDTH = 30  # the bar's characters in a terminal; Jupyter's bar is as wide as its cell


def fraction(progress: Progress) -> tuple[int, int]:
    """What the bar fills: epochs done of those planned where every run plans a number, else runs ended."""
    return progress.epochs or (progress.ended, len(progress.runs))


def summary(progress: Progress) -> str:
    """The progress in words, with the runs' states: `1 of 2 runs ended, 5 of 8 epochs (1 completed, 1 running)`."""
    return f"{progress.totals()} ({counts(progress.states())})"


class Display(Protocol):
    def show(self, progress: Progress) -> None: ...

    def close(self) -> None: ...


class Lines:
    """A line each time the progress changes: for logs and pipes, where a redrawn line would be noise."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.last = ""

    def show(self, progress: Progress) -> None:
        line = summary(progress)
        if line != self.last:
            self.out.write(printable(line) + "\n")
            self.out.flush()
            self.last = line

    def close(self) -> None:
        pass


class TerminalBar:
    """One line redrawn in place: the bar and the words."""

    def __init__(self, out: TextIO) -> None:
        self.out = unfiltered(out)

    def show(self, progress: Progress) -> None:
        done, total = fraction(progress)
        line = printable(f"{bar(done, total, WIDTH)} {summary(progress)}")
        # Narrower than the terminal: a wrapped line would not be redrawn by a carriage return.
        self.out.write(f"\r\x1b[2K{shorten(line, columns() - 1)}")
        self.out.flush()

    def close(self) -> None:
        self.out.write("\n")
        self.out.flush()


class _Shown:
    """What a Jupyter display shows: HTML in the notebook, text where only text is read (a saved notebook's
    text/plain output, a console)."""

    def __init__(self, progress: Progress) -> None:
        self.done, self.total = fraction(progress)
        self.text = summary(progress)

    def _repr_html_(self) -> str:
        return (
            f'<div><progress value="{self.done}" max="{max(self.total, 1)}" style="width: 60%"></progress> '
            f"<span>{html.escape(self.text)}</span></div>"
        )

    def __repr__(self) -> str:
        return f"{bar(self.done, self.total, WIDTH)} {self.text}"


class NotebookBar:
    """One output of the cell, updated in place (IPython.display's display id)."""

    def __init__(self, display: Any) -> None:
        self.display = display
        self.handle: Any = None

    def show(self, progress: Progress) -> None:
        if self.handle is None:
            self.handle = self.display(_Shown(progress), display_id=True)
        else:
            self.handle.update(_Shown(progress))

    def close(self) -> None:
        pass


def _notebook_display() -> Any:
    """IPython.display.display where a Jupyter kernel runs this code; None elsewhere (IPython in a terminal too)."""
    try:
        ipython = importlib.import_module("IPython")
    except ImportError:
        return None
    shell = ipython.get_ipython()
    if shell is None or not hasattr(shell, "kernel"):
        return None
    return importlib.import_module("IPython.display").display


def display(out: TextIO | None = None) -> Display:
    """The display that suits where the code runs: a notebook's, a terminal's, or plain lines."""
    shown = _notebook_display()
    if shown is not None:
        return NotebookBar(shown)
    stream = out or sys.stdout
    return TerminalBar(stream) if stream.isatty() else Lines(stream)
