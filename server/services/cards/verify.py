"""A card checked: its hash is its content's, every record reads as ingestion reads a line, every run's provenance is
what its records tell, and every figure is what this server's comparison computes from the records; each problem
names the field."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from contract.card import ScalingCard, hash_problem
from server.models import CardProblem, CardVerdict
from server.services.cards.loading import MAX_PROBLEMS, TOLD_BY_RECORDS, CardRefused, Loc, recompute

# Two figures are the same if they agree to this relative precision: the same code on the same records gives the
# same bits, but a card read back through another database's JSON may differ in a float's last digit.
REL_TOLERANCE = 1e-9


def path(loc: Loc) -> str:
    """A field's place in the card as a reader writes it: runs[0].provenance.image_digest."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


def check(card: ScalingCard) -> list[tuple[Loc, str]]:
    """Every problem of the card, each with where it is (none: verified)."""
    problems: list[tuple[Loc, str]] = []
    if (wrong := hash_problem(card)) is not None:
        problems.append((("content_hash",), wrong))
    try:
        found = recompute(card)
    except CardRefused as exc:
        return problems + exc.found
    for index, run in enumerate(card.runs):
        told = found.provenance[run.id]
        given = run.provenance.model_dump(mode="json")
        for name in TOLD_BY_RECORDS:
            if given.get(name) != (value := told[name]):
                problems.append(
                    (
                        ("runs", index, "provenance", name),
                        f"the card says {_shown(given.get(name))}; its records tell {_shown(value)}",
                    )
                )
    problems += differences(card.figures.model_dump(mode="json"), found.figures(), ("figures",))
    return problems[:MAX_PROBLEMS]


def verdict(card: ScalingCard) -> CardVerdict:
    problems = check(card)
    return CardVerdict(
        verified=not problems,
        content_hash=card.content_hash,
        runs=len(card.runs),
        records=sum(len(run.records) for run in card.runs),
        problems=[CardProblem(field=path(loc), message=message) for loc, message in problems],
    )


def differences(given: Any, computed: Any, where: Loc) -> Iterator[tuple[Loc, str]]:
    """Where the card's figures are not those computed, and how."""
    if isinstance(computed, dict) and isinstance(given, dict):
        for key in computed:
            if key not in given:
                yield (*where, key), f"missing; its records give {_shown(computed[key])}"
            else:
                yield from differences(given[key], computed[key], (*where, key))
        for key in given:
            if key not in computed:
                yield (*where, key), "not a figure this server computes from its records"
    elif isinstance(computed, list) and isinstance(given, list):
        if len(given) != len(computed):
            yield where, f"{len(given)} items; its records give {len(computed)}"
        for index, (mine, theirs) in enumerate(zip(given, computed, strict=False)):
            yield from differences(mine, theirs, (*where, index))
    elif not _same(given, computed):
        yield where, f"the card says {_shown(given)}; its records give {_shown(computed)}"


def _same(given: Any, computed: Any) -> bool:
    if isinstance(given, bool) or isinstance(computed, bool):
        return given is computed
    if isinstance(given, int | float) and isinstance(computed, int | float):
        return math.isclose(given, computed, rel_tol=REL_TOLERANCE, abs_tol=1e-12)
    return bool(given == computed)


def _shown(value: Any) -> str:
    text = "null" if value is None else repr(value)
    return text if len(text) <= 120 else text[:117] + "..."
