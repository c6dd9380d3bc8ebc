"""The experiment request: its spec sections typed like the run spec, its limits, and a clone's changes."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from server.models import MAX_RUNS_PER_EXPERIMENT, ExperimentChanges, ExperimentCreate, Resources, SpecBase, SpecGrid

TRAINING = {
    "name": "scaling",
    "base": {"epochs": 3, "seed": 7},
    "grid": {"gpus": [1, 2]},
    "resources": {"max_concurrent": 1},
    "on_invalid": "skip",
}
INFERENCE = {**TRAINING, "inference": {"checkpoint_run": "0123abcd", "prompts": "once upon a time"}}


@pytest.mark.parametrize(
    ("axes", "loc"),
    [
        ({"gpus": [0]}, ("gpus", 0)),
        ({"gpus": []}, ("gpus",)),
        ({"strategy": ["ddp", "zero3"]}, ("strategy", 1)),
        ({"colour": ["red"]}, ("colour",)),
        ({"gpus": 4}, ("gpus",)),
    ],
)
def test_grid_values_are_typed_like_the_spec(axes, loc):
    with pytest.raises(ValidationError) as caught:
        SpecGrid.model_validate(axes)
    assert caught.value.errors()[0]["loc"] == loc


def test_base_takes_no_nodes():
    with pytest.raises(ValidationError) as caught:
        SpecBase.model_validate({"nodes": 2})
    assert caught.value.errors()[0]["loc"] == ("nodes",)


def test_no_more_runs_at_once_than_an_experiment_may_have():
    assert Resources(max_concurrent=MAX_RUNS_PER_EXPERIMENT).max_concurrent == MAX_RUNS_PER_EXPERIMENT
    with pytest.raises(ValidationError):
        Resources(max_concurrent=MAX_RUNS_PER_EXPERIMENT + 1)


@pytest.mark.parametrize("name", ["tab\there", "right\u202eto left", "nul\x00", "isolate\u2066"])
def test_names_that_would_hide_or_disguise_themselves_are_refused(name):
    with pytest.raises(ValidationError, match="control characters or bidirectional overrides"):
        ExperimentCreate(name=name)
    with pytest.raises(ValidationError, match="control characters or bidirectional overrides"):
        ExperimentChanges(name=name)


def test_changes_lay_over_the_request_and_null_resets_a_field():
    changes = ExperimentChanges(
        base={"epochs": 1, "seed": None}, grid={"strategy": ["ddp"]}, resources={"max_concurrent": None}
    )
    assert changes.apply(TRAINING) == {
        "name": "scaling",
        "base": {"epochs": 1},
        "grid": {"gpus": [1, 2], "strategy": ["ddp"]},
        "resources": {},
        "on_invalid": "skip",
    }
    assert TRAINING["base"] == {"epochs": 3, "seed": 7}, "the original request is left as it was"


def test_no_changes_give_the_request_back():
    assert ExperimentChanges().apply(TRAINING) == TRAINING
    assert ExperimentChanges().apply(INFERENCE) == INFERENCE


def test_a_new_name_and_on_invalid_replace_the_old():
    merged = ExperimentChanges(name="again", on_invalid="refuse").apply(TRAINING)
    assert (merged["name"], merged["on_invalid"]) == ("again", "refuse")


def test_a_training_request_gains_no_inference_section():
    assert "inference" not in ExperimentChanges(base={"epochs": 1}).apply(TRAINING)


def test_inference_settings_change_one_by_one_and_go_when_all_are_reset():
    changed = ExperimentChanges(inference={"prompts": "a new prompt"}).apply(INFERENCE)
    assert changed["inference"] == {"checkpoint_run": "0123abcd", "prompts": "a new prompt"}
    reset = ExperimentChanges(inference={"checkpoint_run": None, "prompts": None}).apply(INFERENCE)
    assert "inference" not in reset


def test_the_changed_request_is_a_request_again():
    changes = ExperimentChanges(base={"epochs": 1}, grid={"gpus": None})
    request = ExperimentCreate.model_validate(changes.apply(TRAINING))
    assert request.base.model_dump(exclude_none=True) == {"epochs": 1, "seed": 7}
    assert request.grid.model_dump(exclude_none=True) == {}
