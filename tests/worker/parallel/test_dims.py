"""The parallel layout is checked against the processes launched before any mesh exists."""

from __future__ import annotations

import pytest

from contract.spec import RunSpec
from worker.parallel.dims import DegreeError, ParallelDims


@pytest.mark.parametrize(
    ("fields", "world", "words"),
    [
        (
            {"strategy": "ddp", "gpus": 4},
            2,
            "asks for 4 processes (data 4 x tensor 1 x pipeline 1) but 2 were launched",
        ),
        ({"model": "gpt", "strategy": "fsdp_tp", "gpus": 4, "tp_degree": 2}, 8, "data 2 x tensor 2 x pipeline 1"),
    ],
)
def test_layout_is_checked_against_the_launch(fields, world, words):
    spec = RunSpec.model_validate({"global_batch_size": 64, **fields})
    with pytest.raises(DegreeError, match=words.replace("(", r"\(").replace(")", r"\)")):
        ParallelDims.from_spec(spec, world, 1).validate()


def test_layout_that_fits_passes():
    spec = RunSpec(model="gpt", strategy="fsdp_tp", gpus=8, tp_degree=4, global_batch_size=64)
    ParallelDims.from_spec(spec, 8, 2).validate()
