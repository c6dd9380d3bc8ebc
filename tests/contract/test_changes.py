"""How a clone's changes lay over the original request: the rule the server's clone and the client's preview of it
share."""

from __future__ import annotations

from contract.changes import apply_changes

ORIGINAL = {
    "name": "sweep",
    "base": {"model": "mlp", "epochs": 2, "lr": 0.05},
    "grid": {"strategy": ["ddp", "fsdp"], "gpus": [1, 2]},
    "resources": {"time_limit": "00:10:00", "partition": "debug"},
    "on_invalid": "refuse",
}


def test_no_changes_give_the_request_back():
    assert apply_changes(ORIGINAL, {}) == ORIGINAL


def test_a_value_sets_a_field_and_null_takes_it_out():
    changes = {
        "base": {"epochs": 3, "lr": None, "precision": "bf16"},
        "grid": {"strategy": None, "gpus": [2, 4]},
        "resources": {"partition": None},
    }
    merged = apply_changes(ORIGINAL, changes)
    # A changed field keeps its place, a new one comes last: what the preview's columns follow.
    assert list(merged["base"].items()) == [("model", "mlp"), ("epochs", 3), ("precision", "bf16")]
    assert merged["grid"] == {"gpus": [2, 4]}
    assert merged["resources"] == {"time_limit": "00:10:00"}
    assert ORIGINAL["base"] == {"model": "mlp", "epochs": 2, "lr": 0.05}  # the original is left alone


def test_name_and_on_invalid_change_only_when_given():
    assert apply_changes(ORIGINAL, {"name": None, "on_invalid": None})["name"] == "sweep"
    merged = apply_changes(ORIGINAL, {"name": "sweep, longer", "on_invalid": "skip"})
    assert (merged["name"], merged["on_invalid"]) == ("sweep, longer", "skip")


def test_missing_sections_come_back_empty_and_inference_only_when_it_holds_something():
    merged = apply_changes({"name": "bare"}, {"grid": {"gpus": [1]}})
    assert merged == {"name": "bare", "base": {}, "grid": {"gpus": [1]}, "resources": {}}
    inference = {**ORIGINAL, "inference": {"checkpoint_run": "abc", "prompts": "hi"}}
    assert apply_changes(inference, {"inference": {"prompts": "hello"}})["inference"] == {
        "checkpoint_run": "abc",
        "prompts": "hello",
    }
    assert "inference" not in apply_changes(inference, {"inference": {"checkpoint_run": None, "prompts": None}})
