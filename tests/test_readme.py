"""The README's example is the file the end-to-end test submits."""

from __future__ import annotations

import json
import re

from tests.factories import EXAMPLE_REQUEST, ROOT


def test_readme_shows_the_example_request():
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```json\n(.*?)```", readme, flags=re.S)
    assert json.loads(EXAMPLE_REQUEST.read_text()) in [json.loads(block) for block in blocks]
    assert "-d @examples/experiment.json" in readme
