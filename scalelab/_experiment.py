"""An experiment on a scalelab server, from Python: wait for it, read its runs, comparison and scaling as pandas
DataFrames, save its report, cancel it."""

from __future__ import annotations

import os
import time
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from client.api import Client
from client.output import counts
from client.progress import Progress, look
from client.reports import default_file, save_report
from client.schemas import ExperimentView, SkippedView
from scalelab import frames
from scalelab.progress import display

if TYPE_CHECKING:
    import pandas as pd

DEFAULT_INTERVAL_S = 2.0


class Experiment:
    """One experiment: what the server had of it when last read (`refresh()` reads it again), and what to ask of it.

    Attributes: `id`, `name`, `created_at`, `request` (what was submitted), `run_count`, `states` (runs by state, as
    last read) and `skipped` (the grid combinations a submission with on_invalid "skip" left out, and why).
    """

    def __init__(self, client: Client, view: ExperimentView, skipped: list[SkippedView] | None = None) -> None:
        self._client = client
        self.skipped: list[str] = [str(item) for item in skipped or []]
        self._read(view)

    def _read(self, view: ExperimentView) -> None:
        self.id: str = view.id
        self.name: str = view.name
        self.created_at: datetime = view.created_at
        self.request: dict[str, Any] = view.request
        self.run_count: int = view.run_count
        self.states: dict[str, int] = dict(view.states)

    def __repr__(self) -> str:
        return f"<Experiment {self.id} {self.name!r}: {self.run_count} runs ({counts(self.states)})>"

    def refresh(self) -> Experiment:
        """Read the experiment again (its runs' states); returns itself."""
        self._read(self._client.experiment(self.id))
        return self

    # ---- following it --------------------------------------------------------------------------------------------

    def wait(
        self, progress: bool = True, *, interval_s: float = DEFAULT_INTERVAL_S, timeout_s: float | None = None
    ) -> Experiment:
        """Wait until every run has ended and its output has been read, so that the tables are final; returns
        itself, so that `experiment.wait().scaling()` reads. `progress` shows a bar (in place in Jupyter and in a
        terminal, a line per change elsewhere). Runs that fail end the wait as well: `states` and `runs()` say how
        each ended. After `timeout_s` seconds, TimeoutError; interrupted (Jupyter's stop button, Ctrl-C),
        KeyboardInterrupt: either way the experiment goes on, and `wait()` again picks it up."""
        shown = display() if progress else None
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        try:
            while True:
                now = look(self._client, self.id)
                if shown is not None:
                    shown.show(now)
                if now.settled:
                    break
                if deadline is not None and time.monotonic() >= deadline:
                    raise TimeoutError(f"experiment {self.id}: {now.totals()} after {timeout_s:g} s; it goes on")
                time.sleep(interval_s)
        finally:
            if shown is not None:
                shown.close()
        return self.refresh()

    def progress(self) -> Progress:
        """The runs and their epochs done, as the server has them now (what wait's bar shows)."""
        return look(self._client, self.id)

    def cancel(self) -> Experiment:
        """Cancel every run that has not ended (through the scheduler: a job shows as cancelled once it has stopped
        it); returns itself, read again."""
        self._client.cancel_experiment(self.id)
        return self.refresh()

    # ---- its results ---------------------------------------------------------------------------------------------

    def runs(self) -> pd.DataFrame:
        """One row per run, in grid order: id, position, state (a category), strategy, GPUs, nodes, seed, Slurm's
        job id, state and exit code, the message of a run that failed, and its times (UTC)."""
        return frames.runs_table(self._client.runs(experiment_id=self.id).data)

    def compare(self) -> pd.DataFrame:
        """One row per run, as `scalelab export` and the dashboard's table: epoch time, speed-up and efficiency
        against its series' fewest GPUs, losses, accuracy, throughput, peak memory, its point's mean and 95 %
        interval, time to target, and `flags`: the codes of what may make a figure wrong (their meaning: the
        report, or the dashboard)."""
        return frames.compare_table(self._client.compare(self.id).data)

    def scaling(self) -> pd.DataFrame:
        """One row per point, a series at one GPU count: mean time (`measure` says which) with its 95 % interval and
        number of repeats, speed-up, efficiency, flags. `frame.attrs["recommendations"]` holds each series'
        recommendation in words, and `advice` says whether it was given, hedged or withheld."""
        return frames.scaling_table(self._client.scaling(self.id))

    def report(self, path: str | os.PathLike[str] | None = None) -> Path:
        """Save the experiment's report, one HTML file that opens offline, to `path` (default:
        scalelab-ID-report.html here); returns where it is."""
        target = Path(path if path is not None else default_file(self.id))
        save_report(self._client, self.id, target)
        return target
