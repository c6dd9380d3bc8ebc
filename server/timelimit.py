"""Slurm wall-time limits, [D-]HH:MM:SS."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator

# [0-9], not \d: \d also takes other scripts' digits, which must not reach an #SBATCH line.
_TIME_LIMIT = re.compile(r"^(?:([0-9]{1,3})-)?([0-9]{1,3}):([0-5][0-9]):([0-5][0-9])$")


def seconds(time_limit: str) -> int:
    """Seconds in a limit; ValueError with an example when it is not in Slurm's form or under a minute."""
    match = _TIME_LIMIT.match(time_limit)
    if not match:
        raise ValueError("a time limit looks like HH:MM:SS or D-HH:MM:SS, for example 00:10:00")
    days, hours, minutes, secs = (int(part or 0) for part in match.groups())
    total = days * 86400 + hours * 3600 + minutes * 60 + secs
    if total < 60:
        raise ValueError("a time limit is at least one minute, Slurm's smallest")
    return total


def _valid(value: str) -> str:
    seconds(value)
    return value


TimeLimit = Annotated[str, AfterValidator(_valid)]
