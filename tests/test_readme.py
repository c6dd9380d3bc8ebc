"""The README's example is the file the end-to-end test submits."""

from __future__ import annotations

import json
import re

from tests.factories import EXAMPLE_REQUEST, ROOT

PROGRAM_REQUEST = ROOT / "examples" / "programs" / "experiment.json"


def json_blocks(readme: str) -> list[object]:
    return [json.loads(block) for block in re.findall(r"```json\n(.*?)```", readme, flags=re.S)]


def test_readme_shows_the_example_request():
    readme = (ROOT / "README.md").read_text()
    assert json.loads(EXAMPLE_REQUEST.read_text()) in json_blocks(readme)
    assert "-d @examples/experiment.json" in readme


def test_readme_shows_the_example_program_request():
    """The section "Your own program" walks through the file that tests/e2e/test_program_e2e.py submits."""
    readme = (ROOT / "README.md").read_text()
    assert json.loads(PROGRAM_REQUEST.read_text()) in json_blocks(readme)
    assert "examples/programs/experiment.json" in readme


def test_every_module_the_readme_names_exists():
    """The README's layout and its request-to-page table name files; a move that forgets them fails here."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## How it works") : readme.index("## Benchmarks")]
    named = set(re.findall(r"`((?:contract|server|worker|client|frontend)/[\w/.-]+)`", section))
    assert len(named) > 15
    missing = sorted(path for path in named if not (ROOT / path).exists())
    assert missing == []
