"""A selection compared: runs checked against one another across series."""

from __future__ import annotations

from typing import Any

from contract.records import WorkerRecord
from server.models import FlagCode, Run
from server.services.comparison import compare_rows
from tests.factories import epoch, experiment_row, printed_run, start
from tests.server.services.comparison.timed import codes


def test_strategies_that_should_agree_on_the_loss_and_do_not_are_flagged(session, tmp_path):
    """The first epoch's loss is compared: rounding drifts later epochs apart even where the layouts agree."""
    experiment = experiment_row(session)

    def losses_run(name: str, first: float, last: float, **fields: Any) -> Run:
        records: list[WorkerRecord] = [start(), *(epoch(n, 2.0, first) for n in (1, 2, 3)), epoch(4, 2.0, last)]
        return printed_run(session, experiment, tmp_path / name, records, gpus=2, epochs=4, **fields)

    ddp = losses_run("d", 0.5, 0.05)
    drifted = losses_run("f", 0.5 * (1 + 1e-7), 0.0503, strategy="fsdp")
    off = losses_run("t", 0.6, 0.05, strategy="tp")
    other_seed = losses_run("s", 0.9, 0.05, strategy="pp", seed=7)
    rows = {row.run_id: row for row in compare_rows(session, experiment_ids=[experiment.id])}
    assert FlagCode.loss_mismatch in codes(rows[off.id])
    flagged = {run_id for run_id, row in rows.items() if FlagCode.loss_mismatch in codes(row)}
    assert not {ddp.id, drifted.id, other_seed.id} & flagged
