"""How a clone's changes lay over the request of the experiment it copies.

Written once for both sides: the server clones with it, and `scalelab clone --dry-run` previews the combined
request with it, so a preview shows what the clone would submit.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# The sections of a request that a change edits field by field.
SECTIONS = ("base", "grid", "resources", "inference")
# Whole-request settings: a change replaces the value; leaving one out keeps it.
SETTINGS = ("on_invalid", "isolation", "repeats", "scaling", "target", "on_failure", "on_hang")


def apply_changes(request: Mapping[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    """`request` with `changes` (the body of POST /api/experiments/{id}/clone) laid over it, to be validated as a
    new request. In a section, a null value takes the field out: it gets its default, or stops being swept."""
    merged = dict(request)
    if changes.get("name") is not None:
        merged["name"] = changes["name"]
    for section in SECTIONS:
        edits: Mapping[str, Any] = changes.get(section) or {}
        combined = {**(request.get(section) or {}), **edits}
        merged[section] = {key: value for key, value in combined.items() if key not in edits or value is not None}
    if not merged["inference"]:
        del merged["inference"]  # a training experiment's, or one whose inference settings were all reset
    for field in SETTINGS:
        if changes.get(field) is not None:
            merged[field] = changes[field]
    return merged
