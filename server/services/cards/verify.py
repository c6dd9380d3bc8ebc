"""A card checked: its hash is its content's, every record reads as ingestion reads a line, every run's provenance is
what its records tell, and every figure is what this server's comparison computes from the records; each problem
names the field."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from contract.card import CARD_VERSION, ScalingCard, hash_problem
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
    if unjudged := _without_bands(card):
        return problems + unjudged
    try:
        found = recompute(card)
    except CardRefused as exc:
        return problems + exc.found
    for index, run in enumerate(card.runs):
        told = found.provenance[run.id]
        given = run.provenance.model_dump(mode="json")
        for name in TOLD_BY_RECORDS:
            where: Loc = ("runs", index, "provenance", name)
            if name == "fabric" and isinstance(given.get(name), dict) and isinstance(told[name], dict):
                problems += _fabric_differences(given[name], told[name], where)
            elif given.get(name) != (value := told[name]):
                problems.append((where, f"the card says {_shown(given.get(name))}; its records tell {_shown(value)}"))
        problems += _own_probe_fits(card, index, found.provenance)
    problems += differences(card.figures.model_dump(mode="json"), found.figures(), ("figures",))
    return problems[:MAX_PROBLEMS]


def _without_bands(card: ScalingCard) -> list[tuple[Loc, str]]:
    """A card of version 1 carries no band its pre-flights were judged against: where one was flagged
    fabric_degraded, that verdict cannot be drawn again from the card, and it is refused saying so."""
    if card.card_version != 1:
        return []
    return [
        (
            ("card_version",),
            f"card_version 1 carries no band a pre-flight was judged against, and run {run.id}'s was flagged "
            f"fabric_degraded (runs[{index}].provenance.fabric.measured[{at}].degraded): the verdict cannot be drawn "
            f"again from the card. Export the experiment again for a card of version {CARD_VERSION}, which carries it",
        )
        for index, run in enumerate(card.runs)
        for at, item in enumerate(run.provenance.fabric.measured if run.provenance.fabric else [])
        if item.degraded is not None
    ]


def _fabric_differences(given: dict[str, Any], told: dict[str, Any], where: Loc) -> list[tuple[Loc, str]]:
    """Where a run's fabric is not what its records give, naming the field; a verdict that is not what the records
    give against the band the card carries says so."""
    found = []
    for loc, message in differences(given, told, where):
        if loc[-1] == "degraded":
            band = path((*loc[:-1], "expected"))
            message += f", judged by the fabric_degraded rule against the band the card carries ({band})"
        found.append((loc, message))
    return found


def _own_probe_fits(card: ScalingCard, index: int, told: dict[str, dict[str, Any]]) -> list[tuple[Loc, str]]:
    """A fit the run's prediction read from a probe run the card itself holds must be that run's own measurement,
    as its records give it (a fit of another instance's probe is taken as the card says)."""
    fabric = card.runs[index].provenance.fabric
    problems: list[tuple[Loc, str]] = []
    for at, fit in enumerate(fabric.fits if fabric else []):
        if fit.run_id not in told:
            continue
        probe = told[fit.run_id].get("fabric") or {}
        own = [m for m in probe.get("measured", []) if m["tier"] == fit.tier and not m["preflight"]]
        drawn = {name: own[0][name] for name in _FIT_FIELDS} if own else None
        if drawn is None or any(not _same(getattr(fit, name), drawn[name]) for name in _FIT_FIELDS):
            problems.append(
                (
                    ("runs", index, "provenance", "fabric", "fits", at),
                    f"the card says {_shown({name: getattr(fit, name) for name in _FIT_FIELDS})}; the records of "
                    f"probe run {fit.run_id} give {_shown(drawn)}",
                )
            )
    return problems


# What a fit of the card's own probe run must share with that run's measurement of its tier.
_FIT_FIELDS = ("nodes", "processes_per_node", "backend", "alpha_s", "beta_bytes_per_s")


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
