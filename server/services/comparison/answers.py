"""A selection compared: its runs measured, formed into series and points, checked against one another, and the
whole answer kept for a selection of finished runs."""

from __future__ import annotations

from collections.abc import Collection

from sqlmodel import Session

from server.models import ComparePublic, CompareRow, EpochPoint, FlagCode, User
from server.services import flags
from server.services.comparison import measures, predicted
from server.services.comparison.selection import Selection, checked_selection, selection_of
from server.services.comparison.series import form_series
from server.services.read_cache import Answer, Memo, as_json


def compare_rows(
    session: Session, *, experiment_ids: Collection[str] = (), run_ids: Collection[str] = ()
) -> list[CompareRow]:
    """The runs of these experiments and these runs, with scaling figures and flags computed within the selection."""
    return _compared(session, selection_of(session, experiment_ids, run_ids))[0]


def selected_rows(
    session: Session, experiment_ids: Collection[str], run_ids: Collection[str], viewer: User
) -> list[CompareRow]:
    """The comparison rows of a selection that names only existing runs and experiments the viewer may see (one
    the viewer may not see is named as one that does not exist), at most MAX_COMPARED_RUNS of them."""
    return _compared(session, checked_selection(session, experiment_ids, run_ids, viewer))[0]


# Whole answers for selections of finished runs only, by what every figure in them is made from: the runs' keys
# in order, their accounting as stored, and the question. A dashboard of ended runs is then one lookup.
_answers: Memo[Answer] = Memo(2_000, weigh=len, budget=64 * 2**20)


def compare_answer(
    session: Session, experiment_ids: Collection[str], run_ids: Collection[str], viewer: User, history: bool
) -> Answer:
    """ComparePublic's JSON for the selection (as selected_rows checks it), with each run's epochs if asked."""
    selection = checked_selection(session, experiment_ids, run_ids, viewer)
    only = next(iter(experiment_ids)) if len(experiment_ids) == 1 and not run_ids else None

    def make() -> Answer:
        rows, histories = _compared(session, selection)
        answer = ComparePublic(experiment_id=only, data=rows, count=len(rows), histories=histories if history else None)
        return Answer(as_json(answer))

    if any(head.key is None for head in selection.heads):
        return make()
    heads = tuple((head.key, head.accounting) for head in selection.heads)
    return _answers.get((heads, only, history, predicted.fabric_state(session)), make)


def recomputed_answer(session: Session, experiment_id: str) -> ComparePublic:
    """The experiment's ComparePublic with each run's epochs, made from the database alone: no figure is taken from
    those kept of earlier comparisons. A scaling card's figures are made so, on export and again from its records in
    a database of their own, where the runs bear the ids of runs this server may hold and have kept figures of."""
    selection = selection_of(session, [experiment_id], ())
    unkept = Selection([head._replace(key=None) for head in selection.heads], selection.modes)
    rows, histories = _compared(session, unkept)
    return ComparePublic(experiment_id=experiment_id, data=rows, count=len(rows), histories=histories)


def _compared(session: Session, selection: Selection) -> tuple[list[CompareRow], dict[str, list[EpochPoint]]]:
    """The selection's rows, and each run's epochs that count."""
    items, histories = measures.measured(session, selection)
    form_series(items)
    mismatches = flags.check_loss_mismatches(item.first_loss for item in items)
    unequal = flags.check_unequal_work(_work(item, histories.get(item.row.run_id, [])) for item in items)
    shared = flags.check_shared_workdir(item.workdir for item in items if item.workdir is not None)
    for item in items:
        across = [flag for flag in (mismatches.get(item.row.run_id), unequal.get(item.row.run_id)) if flag]
        across += shared.get(item.row.run_id, [])
        item.row.flags = flags.worst_first([*item.run_flags, *across, *item.row.flags])
    predicted.annotate(session, items)
    return [item.row for item in items], histories


def _work(item: measures.Measured, epochs: list[EpochPoint]) -> flags.Work:
    """What a run trained, as the check of equal work within its series reads it."""
    samples = [epoch.metrics.get(flags.SAMPLES_METRIC) for epoch in epochs]
    # A run that stopped at its target did fewer epochs by design: its siblings' work is not measured against it.
    explained = item.row.stopped_at_target or any(flag.code == FlagCode.incomplete for flag in item.run_flags)
    return flags.Work(
        run_id=item.row.run_id,
        series=item.series_key,
        epochs=item.row.epochs_done,
        samples=sum(count for count in samples if count is not None) if epochs and None not in samples else None,
        judged=item.row.state.is_final and item.row.ingest_done and not explained,
    )
