"""An inference request's prompts: how many fit, how long each may be, and the file the worker reads."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from server.models import MAX_PROMPT_CHARS, MAX_PROMPTS, InferenceInput


def test_the_prompts_file_holds_one_prompt_per_line_without_blank_ones():
    assert InferenceInput(prompts="first\n\n   \nsecond").prompt_lines() == "first\nsecond\n"
    assert InferenceInput().prompt_lines() == ""


def test_blank_lines_do_not_count_against_the_limit():
    prompts = "p\n\n" * MAX_PROMPTS
    assert InferenceInput(prompts=prompts).prompt_lines() == "p\n" * MAX_PROMPTS


@pytest.mark.parametrize(
    ("prompts", "message"),
    [
        ("p\n" * (MAX_PROMPTS + 1), f"holds {MAX_PROMPTS + 1} prompts; at most {MAX_PROMPTS}"),
        ("short\n" + "x" * (MAX_PROMPT_CHARS + 1), f"prompt 2 is longer than {MAX_PROMPT_CHARS} characters"),
        ("\n\nfirst\nsec\x00ond", "prompt 2 holds a NUL character"),
    ],
)
def test_prompts_that_do_not_fit_are_refused_by_number(prompts, message):
    with pytest.raises(ValidationError, match=message):
        InferenceInput(prompts=prompts)


def test_a_prompt_of_the_longest_length_fits():
    assert InferenceInput(prompts="x" * MAX_PROMPT_CHARS).prompt_lines() == "x" * MAX_PROMPT_CHARS + "\n"
