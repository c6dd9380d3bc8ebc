"""The TypeScript types of the API answers the front end reads, written from the OpenAPI document's schemas into
frontend/static/js/types/api.d.ts, so that the modules' JSDoc types name the server's fields as the server defines
them (tsc then finds a field read by a wrong name). test_api_types.py fails when the file is out of date:
`python -m tests.frontend.api_types` writes it again."""

from __future__ import annotations

import json
import re
import sys
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from tests.factories import ROOT

TYPES_FILE = ROOT / "frontend" / "static" / "js" / "types" / "api.d.ts"

# The answers the pages read; every schema they refer to comes along.
ROOTS = (
    "ComparePublic",
    "ScalingPublic",
    "PredictionPublic",
    "RunPublic",
    "RunsPublic",
    "RunEventsPublic",
    "RunLog",
    "RunStacks",
    "InferencePublic",
    "GenerationsPublic",
    "ProfilesPublic",
    "ExperimentPreview",
    "ExperimentCreated",
    "PlanPublic",
    "RegressionPublic",
    "ReferenceHistory",
    "FabricPublic",
    "ExperimentFabricPublic",
    "NotificationSettingsPublic",
    "NotificationDeliveriesPublic",
)

Schema = Mapping[str, Any]
NAME = re.compile(r"^[A-Za-z_$][A-Za-z0-9_$]*$")


def _ref_name(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


def _literal(value: Any) -> str:
    return json.dumps(value)


def type_of(schema: Schema) -> str:
    """The TypeScript type of one JSON schema, as pydantic writes them (refs, anyOf, enums, arrays, maps)."""
    if "$ref" in schema:
        return _ref_name(schema["$ref"])
    if "const" in schema:
        return _literal(schema["const"])
    if "enum" in schema:
        return " | ".join(_literal(value) for value in schema["enum"])
    for union in ("anyOf", "oneOf"):
        if union in schema:
            return " | ".join(dict.fromkeys(_member(part) for part in schema[union]))
    if "allOf" in schema and len(schema["allOf"]) == 1:
        return type_of(schema["allOf"][0])
    kind = schema.get("type")
    if isinstance(kind, list):
        return " | ".join(type_of({**schema, "type": one}) for one in kind)
    if kind == "array":
        if "prefixItems" in schema:
            return f"[{', '.join(type_of(item) for item in schema['prefixItems'])}]"
        return f"{_member(schema.get('items', {}))}[]"
    if kind == "object" or "properties" in schema or "additionalProperties" in schema:
        if schema.get("properties"):
            return _object(schema)
        values = schema.get("additionalProperties")
        if not isinstance(values, Mapping) and schema.get("patternProperties"):
            values = {"anyOf": list(schema["patternProperties"].values())}  # keys of a pattern: any key to the type
        return f"Record<string, {type_of(values) if isinstance(values, Mapping) else 'unknown'}>"
    return {"string": "string", "integer": "number", "number": "number", "boolean": "boolean", "null": "null"}.get(
        kind or "", "unknown"
    )


def _member(schema: Schema) -> str:
    """A type inside a union or an array: parenthesised where it is a union itself."""
    text = type_of(schema)
    return f"({text})" if " | " in text and not text.startswith("{") else text


def _object(schema: Schema, indent: str = "") -> str:
    """The server writes every field of an answer, defaults and nulls included (it never excludes unset fields), so
    each property is there, though OpenAPI's `required` leaves out those with defaults: none is marked optional."""
    lines = ["{"]
    for name, prop in schema.get("properties", {}).items():
        key = name if NAME.match(name) else _literal(name)
        if prop.get("description"):
            lines.append(f"{indent}  /** {_comment(prop['description'])} */")
        lines.append(f"{indent}  {key}: {type_of(prop)};")
    lines.append(f"{indent}}}")
    return "\n".join(lines)


def _comment(text: str) -> str:
    return " ".join(text.split()).replace("*/", "*\\/")


def _needed(schemas: Mapping[str, Schema], roots: Iterable[str]) -> list[str]:
    """The roots and every schema they refer to, in the document's order."""
    seen: set[str] = set()
    pending = list(roots)
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        text = json.dumps(schemas[name])
        pending.extend(_ref_name(ref) for ref in re.findall(r'"\$ref": "([^"]+)"', text))
    return [name for name in schemas if name in seen]


def declarations(document: Schema, roots: Iterable[str] = ROOTS) -> str:
    """The .d.ts text: one exported type per schema the roots need."""
    schemas: Mapping[str, Schema] = document["components"]["schemas"]
    parts = [
        "// The API's answers as the OpenAPI document describes them (the server's pydantic models). Written by",
        "// tests/frontend/api_types.py (python -m tests.frontend.api_types); do not edit:",
        "// tests/frontend/test_api_types.py fails when this file and the document differ.",
        "",
    ]
    for name in _needed(schemas, roots):
        schema = schemas[name]
        if schema.get("description"):
            parts.append(f"/** {_comment(schema['description'])} */")
        if schema.get("properties"):
            parts.append(f"export interface {name} {_object(schema)}")
        else:
            parts.append(f"export type {name} = {type_of(schema)};")
        parts.append("")
    return "\n".join(parts)


def current() -> str:
    """The declarations of the server's OpenAPI document now, from an app on a database of its own (making the app
    migrates its database: never the one the settings of this machine name)."""
    from server.config import Settings
    from server.main import create_app

    with tempfile.TemporaryDirectory() as scratch:
        settings = Settings(
            database_url=f"sqlite:///{scratch}/openapi.db",
            runs_dir=Path(scratch) / "runs",
            scheduler="local",
            worker_python=Path(sys.executable),
        )
        return declarations(create_app(settings, start_monitor=False).openapi())


def main(argv: list[str]) -> int:
    target = Path(argv[0]) if argv else TYPES_FILE
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(current())
    sys.stdout.write(f"wrote {target}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
