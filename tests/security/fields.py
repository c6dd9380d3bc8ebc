"""Every field a user controls in the API, read from its OpenAPI schema, and requests with a value put in one.

Body fields recursively (a dict's keys and its values, a list's items), query and path parameters: a field added
to a model or a route is found without a test changing. Each request schema needs one valid example here.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import pwd
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

import httpx
from fastapi.testclient import TestClient

from contract.card import ScalingCard, hashed
from server.config import Settings
from server.main import create_app
from server.scheduler.local import LocalScheduler
from server.services.cards.loading import recompute
from tests.hostile import as_text

Field = tuple[str | int, ...]
# HTTP clients refuse longer URLs (httpx: 64 KiB), and servers longer request lines (uvicorn's h11: 16 KiB).
MAX_URL = 16 * 1024


# ---- the API's fields, read from its OpenAPI schema ---------------------------------------------------------------


@dataclass(frozen=True)
class Operation:
    method: str
    path: str
    params: tuple[tuple[str, str], ...]  # (location, name)
    body: str | None  # the request body's schema name


@dataclass(frozen=True)
class Target:
    """One place a value can go: a body field (or a dict's keys), a query parameter or a path parameter."""

    operation: Operation
    location: str  # body, query or path
    field: Field
    key: bool = False  # the value becomes a key of the dict at `field`
    variant: str = ""  # the valid body it goes into: VALID_BODIES's, or the named one of VARIANTS

    @property
    def id(self) -> str:
        where = ".".join(str(part) for part in (self.location, *self.field)) + ("[key]" if self.key else "")
        return f"{self.operation.method} {self.operation.path} {where}"

    @property
    def loc(self) -> Field:
        return (self.location, *self.field)


@functools.cache
def openapi() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(database_url=f"sqlite:///{tmp}/schema.db", runs_dir=Path(tmp) / "runs", scheduler="local")
        app = create_app(settings, LocalScheduler(Path(tmp) / "jobs"), start_monitor=False)
        schema = app.openapi()
        app.state.engine.dispose()
    return schema


def operations() -> list[Operation]:
    found = []
    for path, item in openapi()["paths"].items():
        for method, operation in item.items():
            params = tuple((param["in"], param["name"]) for param in operation.get("parameters", []))
            ref = operation.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {})
            body = ref["$ref"].rsplit("/", 1)[-1] if "$ref" in ref else None
            found.append(Operation(method.upper(), path, params, body))
    return found


def _branches(schema: dict[str, Any]) -> list[dict[str, Any]]:
    """The object, array or scalar schemas a schema allows, with references followed and null left out."""
    if "$ref" in schema:
        return _branches(openapi()["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]])
    alternatives = schema.get("anyOf") or schema.get("oneOf")
    if alternatives:
        return [branch for sub in alternatives for branch in _branches(sub)]
    return [] if schema.get("type") == "null" else [schema]


def _body_fields(schema: dict[str, Any], example: Any, at: Field) -> Iterator[tuple[Field, bool]]:
    if not schema and isinstance(example, dict | list):
        # Anything goes here (`Any`): the valid example's structure shows what the server will make of it.
        schema = {"type": "object", "additionalProperties": {}} if isinstance(example, dict) else {"type": "array"}
    for branch in _branches(schema):
        for name, sub in branch.get("properties", {}).items():
            yield (*at, name), False
            yield from _body_fields(sub, example.get(name) if isinstance(example, dict) else None, (*at, name))
        extra = branch.get("additionalProperties")
        if extra is True or (extra is None and branch.get("type") == "object" and "properties" not in branch):
            extra = {}  # a dict of anything (`dict[str, Any]`)
        if isinstance(extra, dict):
            yield at, True
            # The values of a free-form dict: under the keys a valid request uses, or one made up.
            for key in list(example) if isinstance(example, dict) and example else ["x"]:
                yield (*at, key), False
                yield from _body_fields(extra, example.get(key) if isinstance(example, dict) else None, (*at, key))
        if branch.get("type") == "array":
            yield (*at, 0), False
            yield from _body_fields(
                branch.get("items", {}), example[0] if isinstance(example, list) and example else None, (*at, 0)
            )


def _within(at: Field, prefixes: tuple[Field, ...]) -> bool:
    return any(at[: len(prefix)] == prefix for prefix in prefixes)


def targets() -> list[Target]:
    found: list[Target] = []
    for operation in operations():
        for location, name in operation.params:
            found.append(Target(operation, location, (name,)))
        if operation.body is not None:
            schema = {"$ref": f"#/components/schemas/{operation.body}"}
            swept = operation.path in SWEPT_ON.get(operation.body, (operation.path,))
            variants = VARIANTS.get(operation.body, ()) if swept else ()
            theirs = tuple(prefix for variant in variants for prefix in variant.fields)
            # A dict whose valid keys only a variant's body has (the grid's params.NAME): its values are tried under
            # that key there, not under a made-up one here, which would be refused for the key.
            theirs += tuple((*prefix[:-1], "x") for prefix in theirs)
            fields = dict.fromkeys([((), False), *_body_fields(schema, VALID_BODIES[operation.body](), ())])
            opaque = OPAQUE.get(operation.body, ())
            fields = {field: None for field in fields if not _within(field[0], opaque) or field[0] in opaque}
            if not swept:
                fields = {((), False): None}
            found += [Target(operation, "body", at, key) for at, key in fields if not _within(at, theirs)]
            for variant in variants:
                own = dict.fromkeys(_body_fields(schema, variant.make(), ()))
                found += [
                    Target(operation, "body", at, key, variant.name) for at, key in own if _within(at, variant.fields)
                ]
    return found


# ---- valid requests, for the values to go into -------------------------------------------------------------------


def cheap_request(name: str = "hostile corpus") -> dict[str, Any]:
    """The cheapest run that trains: one process, one step; the profile's sbatch options set to harmless values."""
    return {
        "name": name,
        "base": {
            "model": "mlp",
            "dataset": "synthetic",
            "strategy": "single",
            "gpus": 1,
            "epochs": 1,
            "steps_per_epoch": 1,
            "global_batch_size": 8,
        },
        "grid": {},
        "resources": {"nodes": 1, "time_limit": "00:05:00", "sbatch_options": {"mem": "1G", "nice": 0}},
        "on_invalid": "refuse",
    }


def program_home() -> str:
    """The home of the account the jobs run as (the service's): the local profile's program root "~"."""
    return pwd.getpwuid(os.getuid()).pw_dir


def program_request(name: str = "hostile program") -> dict[str, Any]:
    """A user's program that completes at once, in the home of the account its jobs run as, with one of each part
    (an env variable, a parameter fixed, one swept, a batch) for values to go into; no image, which the local profile's
    runtime does not take."""
    request = cheap_request(name)
    request["base"] = {
        "kind": "program",
        "strategy": "ddp",
        "gpus": 1,
        "program": {
            "command": ["python", "-c", "pass"],
            "workdir": program_home(),
            "launcher": "srun",
            "env": {"OMP_NUM_THREADS": "1"},
            "params": {"lr": 0.1},
            # Declared by the swept parameter: a value put into batch's size or param meets a batch already whole.
            "batch": {"per": "process", "param": "batch"},
        },
    }
    # Another parameter than the base's: a swept value replaces the base's, which would then never reach a script.
    request["grid"] = {"params.batch": [8]}
    return request


def clone_changes() -> dict[str, Any]:
    return {
        "name": "hostile clone",
        "base": {"seed": 1},
        "grid": {"seed": [2]},
        "resources": {"time_limit": "00:04:00", "sbatch_options": {"nice": 1}},
        "on_invalid": "refuse",
    }


def import_request() -> dict[str, Any]:
    return {"name": "hostile import", "files": [{"name": "run.out", "content": "[METRIC] epoch=1 loss=1.0 time=0.5\n"}]}


@functools.cache
def _card() -> str:
    """A scaling card of one completed run of two records, its figures as this server computes them: one that
    verifies, so that a value put into it is what a refusal is about."""
    record = {"offset": 0, "record": {"v": 1, "kind": "epoch", "epoch": 1, "train_loss": 1.0, "epoch_time_s": 0.5}}
    card: dict[str, Any] = {
        "card_version": 1,
        "content_hash": "sha256:" + "0" * 64,
        "source": {
            "url": "https://elsewhere.example/",
            "instance": "elsewhere",
            "scalelab_version": "0.1.0",
            "exported_at": "2026-01-01T00:00:00Z",
            "exported_by": "someone",
        },
        "experiment": {
            "id": "c0ffee0000",
            "name": "hostile card",
            "owner": "someone",
            "created_at": "2026-01-01T00:00:00Z",
            "request": {"name": "hostile card", "base": {"epochs": 1}},
        },
        "runs": [
            {
                "id": "c0ffee0001", "position": 0, "state": "completed", "spec": {"epochs": 1, "gpus": 1},
                "created_at": "2026-01-01T00:00:00Z", "started_at": None, "ended_at": None, "exit_code": "0:0",
                "failure_kind": None, "failure_detail": None, "message": None, "ingest_stopped": None,
                "parse_errors": 0, "records_read": 1, "batch_script": "#!/bin/bash\ntrue\n",
                "provenance": {
                    "image": None, "image_digest": None, "worker_version": None, "torch_version": None,
                    "source_revision": None, "scheduler": "slurm", "profile": "local", "job_id": "1", "nodes": "n1",
                    "hardware": None, "code": None,
                },
                "accounting": {"job_id": "1", "elapsed_s": 1, "alloc_cpus": 1},
                "records": [record],
            }
        ],
        "figures": {"compare": {}, "scaling": {}},
    }  # fmt: skip
    card["figures"] = recompute(ScalingCard.model_validate(card)).figures()
    return json.dumps(hashed(card))


def card_body() -> dict[str, Any]:
    return dict(json.loads(_card()))


def rehashed(body: Any) -> Any:
    """A card with a value put in it, hashed again (as anyone editing one can): so that it is refused, if it is, for
    the value, not for a hash that no longer matches. One that cannot be hashed is left as it is."""
    try:
        return hashed(body) if isinstance(body, dict) else body
    except (TypeError, ValueError):  # a lone surrogate, a value JSON cannot hold
        return body


# What is done to a body once a value is in it, by its schema.
FINISH: dict[str, Callable[[Any], Any]] = {"ScalingCard": rehashed}


# A valid body for each request schema; a new one needs an entry (test_every_operation_is_covered says which).
VALID_BODIES: dict[str, Callable[[], dict[str, Any]]] = {
    "ScalingCard": card_body,
    "ExperimentCreate": cheap_request,
    "ExperimentChanges": clone_changes,
    "ImportCreate": import_request,
    "SharingChange": lambda: {"with": "everyone"},
    "NotificationSettingsUpdate": lambda: {"events": ["experiment_ended"], "email": None, "webhook_url": None},
}


# A body schema two routes take, swept field by field on one of them; the other gets the whole-body values only. A
# scaling card: POST /api/cards/verify and POST /api/cards parse it with the same model and recompute it with the
# same code; the import also writes, so it is the one where a hostile value could leave something behind. Each of
# the card's targets costs a recomputation per corpus value: the two routes in full were 9 minutes of CI here.
SWEPT_ON: dict[str, tuple[str, ...]] = {
    "ScalingCard": ("/api/cards",),
    # A plan's body is an experiment request checked by the same code (planning.plan_request): its fields are swept
    # where experiments are submitted and previewed, not a third time (each accepted case there submits a plan).
    "ExperimentCreate": ("/api/experiments", "/api/experiments/preview"),
}


# Parts of a body that are data as a whole, which the sweep replaces whole but does not enter: a scaling card's
# records, figures and the JSON it carries as stored, each bounded as a whole (contract.card), read back by ingestion
# and the comparison, and never written into a script (an imported card's runs never run). Entering them was some
# 400 fields of a card, each a recomputation per corpus value: half an hour of CI.
OPAQUE: dict[str, tuple[Field, ...]] = {
    "ScalingCard": (
        ("experiment", "request"),
        ("runs", 0, "spec"),
        ("runs", 0, "records"),
        ("runs", 0, "accounting"),
        ("runs", 0, "provenance", "hardware"),
        ("runs", 0, "provenance", "code"),
        ("runs", 0, "provenance", "fabric"),
        ("figures", "compare"),
        ("figures", "scaling"),
    )
}


@dataclass(frozen=True)
class Variant:
    """Another valid body of a schema, for the fields only a request of its shape reads: a value put there in the
    first body would be refused for the shape, not for itself."""

    name: str
    make: Callable[[], dict[str, Any]]
    fields: tuple[Field, ...]  # these fields, and those inside them, go into this body


def aiming(make_body: Callable[[], dict[str, Any]], bound: str) -> Callable[[], dict[str, Any]]:
    """A body aiming at a loss (any finite bound is one), with the target's one bound `bound`: a value put into the
    other bound would be refused for the pair, not for itself."""

    def make() -> dict[str, Any]:
        return {**make_body(), "target": {"metric": "train_loss", bound: 1.0}}

    return make


def target_variants(make_body: Callable[[], dict[str, Any]]) -> tuple[Variant, ...]:
    return (
        Variant("target", aiming(make_body, "at_least"), (("target", "metric"), ("target", "at_least"))),
        Variant("target_at_most", aiming(make_body, "at_most"), (("target", "at_most"),)),
    )


VARIANTS: dict[str, tuple[Variant, ...]] = {
    "ExperimentCreate": (
        Variant("program", program_request, (("base", "program"), ("grid", "params.batch"))),
        *target_variants(cheap_request),
    ),
    "ExperimentChanges": target_variants(clone_changes),
}


def valid_body(target: Target) -> dict[str, Any]:
    """The valid request the target's value goes into."""
    schema = target.operation.body or ""
    for variant in VARIANTS.get(schema, ()):
        if variant.name == target.variant:
            return variant.make()
    return VALID_BODIES[schema]()


# ---- putting a value into a request ------------------------------------------------------------------------------


def _set(node: Any, at: Field, value: Any) -> Any:
    if not at:
        return value
    head, rest = at[0], at[1:]
    if isinstance(head, int):
        items = list(node) if isinstance(node, list) and node else [None]
        items[head] = _set(items[head], rest, value)
        return items
    mapping = dict(node) if isinstance(node, dict) else {}
    mapping[head] = _set(mapping.get(head), rest, value)
    return mapping


def _get(node: Any, at: Field) -> Any:
    for part in at:
        if isinstance(part, int):
            node = node[part] if isinstance(node, list) and len(node) > part else None
        else:
            node = node.get(part) if isinstance(node, dict) else None
    return node


def with_value(body: Any, target: Target, value: Any) -> Any:
    if not target.key:
        return _set(copy.deepcopy(body), target.field, value)
    existing = _get(body, target.field)
    existing = existing if isinstance(existing, dict) else {}
    sample = next(iter(existing.values()), 1)
    return _set(copy.deepcopy(body), target.field, {**existing, value: sample})


@dataclass(frozen=True)
class Case:
    target: Target
    name: str  # the corpus entry's
    value: Any


@dataclass
class Prepared:
    method: str
    url: str
    template: str  # the route's path, with its parameters' names
    body: Any = None
    has_body: bool = False
    strings: list[str] = field(default_factory=list)  # the hostile text the request carries


def strings_in(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [text for item in value for text in strings_in(item)]
    if isinstance(value, dict):
        return [text for key, item in value.items() for text in [*strings_in(key), *strings_in(item)]]
    return []


def prepare(case: Case, path_values: dict[str, str]) -> Prepared | None:
    """The request with the case's value in its place; None where the value cannot go (a list in a URL)."""
    target, operation = case.target, case.target.operation
    text = as_text(case.value)
    # An empty path segment makes another URL (`/api/runs/` is the list), not a hostile id.
    if target.location != "body" and not text:
        return None
    # Nor is a path segment `.` or `..`: every client resolves it away first (RFC 3986), making another URL.
    if target.location == "path" and text in (".", ".."):
        return None
    if target.key and not isinstance(case.value, str):
        return None
    path = operation.path
    for location, name in operation.params:
        if location == "path":
            given = text if target.loc == ("path", name) else path_values[name]
            path = path.replace(f"{{{name}}}", quote(str(given), safe="", errors="surrogatepass"))
    query = [(target.field[0], str(text))] if target.location == "query" else []
    # Query parameters that name what the sweep made (ids) get their real values, so that a request is refused
    # for its hostile value, not for missing the others (the compare endpoint needs one id or another).
    query += [
        (name, path_values[name])
        for location, name in operation.params
        if location == "query" and name in path_values and target.loc != ("query", name)
    ]
    if query:
        path += "?" + "&".join(f"{key}={quote(value, safe='', errors='surrogatepass')}" for key, value in query)
    if len(path) > MAX_URL:
        return None
    prepared = Prepared(operation.method, path, operation.path, strings=strings_in(case.value))
    if operation.body is not None:
        valid = valid_body(target)
        prepared.body = with_value(valid, target, case.value) if target.location == "body" else valid
        finish = FINISH.get(operation.body)
        if finish is not None and target.loc != ("body", "content_hash"):
            prepared.body = finish(prepared.body)
        prepared.has_body = True
    return prepared


class Answer(Protocol):
    """A response, from httpx or from the test client (which may use httpx2)."""

    @property
    def status_code(self) -> int: ...

    @property
    def text(self) -> str: ...

    def json(self) -> Any: ...


def send(client: TestClient | httpx.Client, prepared: Prepared) -> Answer:
    # json.dumps escapes lone surrogates and writes NaN as clients that allow it do; httpx's own encoding would not.
    content = json.dumps(prepared.body).encode() if prepared.has_body else None
    headers = {"content-type": "application/json"} if prepared.has_body else {}
    return client.request(prepared.method, prepared.url, content=content, headers=headers)
