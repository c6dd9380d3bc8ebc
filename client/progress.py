"""An experiment's progress as one look at the server: its runs, the epochs each has done and plans, and whether
all have ended. `scalelab watch` and the Python API's Experiment.wait both follow an experiment through it."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from client.api import Client
from client.schemas import RunView, spec_settings
from contract.states import RunState


def planned_epochs(spec: dict[str, Any]) -> int | None:
    """The epochs a run plans: the worker's `epochs`; a program's `epochs` parameter, where it passes one as a whole
    number (how many a program runs is otherwise its own, and there is no total to show)."""
    epochs = spec_settings(spec).get("epochs")
    program = spec.get("program")
    if epochs is None and isinstance(program, dict):
        declared = (program.get("params") or {}).get("epochs")
        epochs = declared if type(declared) is int and declared > 0 else None
    return epochs if isinstance(epochs, int) else None


@dataclass(frozen=True)
class Progress:
    """One look at an experiment: its runs in grid order, and the epochs each run has done, by run id."""

    runs: list[RunView]
    done: dict[str, int]

    @property
    def ended(self) -> int:
        """Runs ended with every metric read (RunView.settled)."""
        return sum(run.settled for run in self.runs)

    @property
    def settled(self) -> bool:
        """Every run has ended and been read: the figures are final."""
        return self.ended == len(self.runs)

    @property
    def epochs(self) -> tuple[int, int] | None:
        """Epochs done (a run's counted up to its plan) and planned in all; None where a run plans no number."""
        planned = [planned_epochs(run.spec) for run in self.runs]
        if not self.runs or not all(planned):
            return None
        pairs = zip(self.runs, planned, strict=True)
        finished = sum(min(self.done.get(run.id, 0), epochs or 0) for run, epochs in pairs)
        return finished, sum(epochs or 0 for epochs in planned)

    def states(self) -> Counter[str]:
        return Counter(str(run.state) for run in self.runs)

    @property
    def completed(self) -> bool:
        """Every run completed (none failed, timed out or was cancelled)."""
        return all(run.state is RunState.completed for run in self.runs)

    def totals(self) -> str:
        """The experiment's progress in words: runs ended, and epochs done of those planned where every run plans
        some."""
        line = f"{self.ended} of {len(self.runs)} runs ended"
        epochs = self.epochs
        if epochs is not None:
            line += f", {epochs[0]} of {epochs[1]} epochs"
        return line


def look(client: Client, experiment_id: str) -> Progress:
    """The experiment's runs and the epochs each has done, as the server has them now."""
    runs = sorted(client.runs(experiment_id=experiment_id).data, key=lambda run: run.position)
    done = {row.run_id: row.epochs_done for row in client.compare(experiment_id).data}
    return Progress(runs, done)
