"""The front end's API types (frontend/static/js/types/api.d.ts) are the OpenAPI document's: a change to a model the
pages read fails here until the file is written again (python -m tests.frontend.api_types), so tsc then checks the
modules against the new fields."""

from __future__ import annotations

from tests.frontend.api_types import TYPES_FILE, current, declarations, type_of


def test_the_checked_in_types_are_the_openapi_documents() -> None:
    assert TYPES_FILE.read_text() == current(), "out of date: run python -m tests.frontend.api_types"


def test_json_schemas_become_typescript_types() -> None:
    assert type_of({"$ref": "#/components/schemas/Flag"}) == "Flag"
    assert type_of({"anyOf": [{"type": "integer"}, {"type": "null"}]}) == "number | null"
    assert type_of({"type": "string", "enum": ["strong", "weak"]}) == '"strong" | "weak"'
    assert type_of({"type": "array", "items": {"anyOf": [{"type": "string"}, {"type": "null"}]}}) == "(string | null)[]"
    assert type_of({"type": "object", "additionalProperties": {"type": "number"}}) == "Record<string, number>"
    by_pattern = {"type": "object", "patternProperties": {"^a$": {"$ref": "#/x/Partition"}}}
    assert type_of(by_pattern) == "Record<string, Partition>"
    assert type_of({"type": "object"}) == "Record<string, unknown>"
    assert type_of({}) == "unknown"


def test_an_answer_is_declared_with_every_field_and_what_it_refers_to() -> None:
    document = {
        "components": {
            "schemas": {
                "Unused": {"type": "string"},
                "Row": {
                    "description": "A row.",
                    "properties": {
                        "flags": {"type": "array", "items": {"$ref": "#/components/schemas/Flag"}, "default": []},
                        "note": {"anyOf": [{"type": "string"}, {"type": "null"}], "description": "why */ not"},
                    },
                    "required": [],
                },
                "Flag": {"type": "string", "enum": ["noisy"]},
            }
        }
    }
    text = declarations(document, ["Row"])
    assert "Unused" not in text
    assert 'export type Flag = "noisy";' in text
    # Fields with defaults are written by the server all the same: none is optional.
    assert "  flags: Flag[];" in text and "  note: string | null;" in text
    assert "/** why *\\/ not */" in text and "/** A row. */\nexport interface Row {" in text
