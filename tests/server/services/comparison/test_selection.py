"""Which runs a comparison holds: in the experiments' order, only those the viewer may see, and whether each one's
figures may be kept."""

from __future__ import annotations

import pytest

from contract.states import RunState
from server.errors import Invalid
from server.models import User
from server.services.comparison import selection
from server.services.comparison.selection import checked_selection, selection_of
from tests.factories import experiment_row, run_row
from tests.server.services.comparison.timed import timed_run


def test_a_finished_runs_figures_are_keyed_and_a_live_ones_are_not(session, tmp_path):
    experiment = experiment_row(session, request={"name": "weak", "scaling": "weak"})
    done = timed_run(session, experiment, tmp_path / "done", 1, [3.0, 2.0])
    live = run_row(session, experiment, tmp_path / "live", state=RunState.running, position=1)
    chosen = selection_of(session, [experiment.id], [])
    assert [head.run_id for head in chosen.heads] == [done.id, live.id]
    assert chosen.modes == {experiment.id: "weak"}
    first, second = chosen.heads
    assert first.key is not None and first.key[1:] == (RunState.completed, "weak")
    assert second.key is None
    assert set(first.accounting) == {None}  # no accounting yet


def test_a_viewer_sees_only_the_experiments_shared_with_them(session, tmp_path):
    ann = User(name="ann")
    session.add_all([ann, User(name="bob")])
    session.commit()
    mine = experiment_row(session, "mine", owner="ann")
    theirs = experiment_row(session, "theirs", owner="bob")
    run_row(session, mine, tmp_path / "a")
    hidden = run_row(session, theirs, tmp_path / "b")
    assert [head.experiment_id for head in selection_of(session, [mine.id, theirs.id], [], ann).heads] == [mine.id]
    with pytest.raises(Invalid, match="no run"):
        checked_selection(session, [], [hidden.id], ann)
    with pytest.raises(Invalid, match="no experiment"):
        checked_selection(session, [theirs.id], [], ann)


def test_a_selection_of_more_runs_than_may_be_compared_is_refused(session, tmp_path, monkeypatch):
    experiment = experiment_row(session)
    for position in range(3):
        run_row(session, experiment, tmp_path / str(position), position=position)
    monkeypatch.setattr(selection, "MAX_COMPARED_RUNS", 2)
    with pytest.raises(Invalid, match="holds 3 runs; compare at most 2"):
        checked_selection(session, [experiment.id], [], User(name="x", is_admin=True))
