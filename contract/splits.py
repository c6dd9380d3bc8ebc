"""How layers are split among pipeline stages: the worker splits them, the server's memory estimate alike."""

from __future__ import annotations


def even_groups(count: int, groups: int) -> list[range]:
    """Consecutive ranges covering `count` items, sizes differing by at most one, the larger ones first."""
    size, extra = divmod(count, groups)
    bounds = [0]
    for group in range(groups):
        bounds.append(bounds[-1] + size + (1 if group < extra else 0))
    return [range(bounds[i], bounds[i + 1]) for i in range(groups)]
