"""The scaling card: one experiment as a versioned JSON document that carries its own proof. The request, each run's
batch script and provenance, the raw records every figure comes from (as stored), the figures derived from them
(the compare and scaling answers), and a content hash. Torch-free and server-free: the client reads it too.

The hash is sha256 over the card's canonical JSON without its `content_hash` field: keys sorted, no whitespace,
UTF-8 (not ASCII escapes), numbers as Python's json writes them (floats in their shortest round-trip form). It is
close to RFC 8785 (JCS) but not it: JCS writes numbers as ECMAScript does (1e21, not 1e+21). A hash proves the file
was not changed by accident, not who made it: anyone may edit a card and hash it again, which is why the server
also recomputes every figure from the records (POST /api/cards/verify)."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

from contract.fabric import BandBasis
from contract.records import out_of_bounds

# 2: a pre-flight carries the band it was judged against (CardFabricMeasured.expected), so that verify draws its
# fabric_degraded verdict again from the card alone. A version-1 card is still read: it verifies where none of its
# runs was flagged fabric_degraded, and is refused naming the version where one was (the band is not on it).
CARD_VERSION = 2
CARD_VERSIONS = (1, 2)
HASH_PREFIX = "sha256:"
# A card is a stranger's input: bounded as an experiment is (its runs) and a run's output is (its records).
MAX_CARD_RUNS = 256
MAX_CARD_RECORDS = 1_000_000  # every run's together: the most one run may store (SCALELAB_MAX_RECORDS_PER_RUN)
MAX_SCRIPT_CHARS = 1024 * 1024
MAX_TEXT_CHARS = 4096
INT32_MAX, INT64_MAX = 2**31 - 1, 2**63 - 1  # what the columns these go to hold


def _unicode(text: str) -> str:
    # JSON may carry half of a UTF-16 pair ("\ud800"), which no UTF-8 text (the hash's, a database's) can hold.
    try:
        text.encode()
    except UnicodeEncodeError:
        raise ValueError("the text holds a lone surrogate: it is not Unicode text") from None
    return text


def _bounded(value: Any) -> Any:
    """A JSON value within the bounds a record's JSON must keep (depth, lengths, 64-bit integers, finite floats),
    and of Unicode text."""
    problem = out_of_bounds(value, keeps_non_finite=False)
    if problem is not None:
        raise ValueError(problem)
    try:
        json.dumps(value, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        raise ValueError("some text in it holds a lone surrogate: it is not Unicode text") from None
    return value


# A part of the card that is JSON the server's own models describe (a request, a record, the figures): bounded here,
# validated there.
Json = Annotated[dict[str, Any], AfterValidator(_bounded)]
Text = Annotated[str, Field(max_length=MAX_TEXT_CHARS), AfterValidator(_unicode)]


def _text_only(value: Any) -> Any:
    # A time is read as the card writes it (ISO 8601 text), never from a number: what the hash is over is what it says.
    if not isinstance(value, str):
        raise ValueError("a time is ISO 8601 text, e.g. 2026-01-01T00:00:00Z")
    return value


def _no_flag(value: Any) -> Any:
    # JSON's true is no number, though Python's True == 1.
    if isinstance(value, bool):
        raise ValueError("a number, not true or false")
    return value


Stamp = Annotated[datetime, BeforeValidator(_text_only)]


def _iso_time(text: str) -> str:
    # Kept as the card writes it (the hash is over that text), but a time all the same.
    try:
        datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{text[:40]!r} is no ISO 8601 time") from None
    return text


# Integers as JSON writes them: true is no count (lax validation would read it as 1, and the hash would differ).
Count = Annotated[int, Field(strict=True)]
# An id as scalelab gives them, of the exporting server: what a card's runs are recomputed under.
Id = Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")]


class _Part(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CardSource(_Part):
    """Where the card was exported from: what the exporting server knew of itself."""

    url: Text | None = Field(description="the URL the exporter reached the server by")
    instance: Text | None = Field(description="the server's name for itself (SCALELAB_INSTANCE_NAME), if set")
    scalelab_version: Text = Field(description="the exporting server's version")
    exported_at: Stamp
    exported_by: Text | None = Field(description="who exported it")


class CardExperiment(_Part):
    id: Id = Field(description="its id on the exporting server")
    name: Annotated[str, Field(min_length=1, max_length=200), AfterValidator(_unicode)]
    owner: Text | None
    created_at: Stamp
    request: Json = Field(description="the request as submitted")


Finite = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Tier = Literal["intra_node", "inter_node"]  # contract.fabric.Tier's values
# A run's fabric entries, at most: its tiers (two), each probed and pre-flown, and room for what comes next.
MAX_FABRIC_ENTRIES = 16


class CardFabricBand(_Part):
    """What a pre-flight's largest all-reduce was expected to reach on the exporting cluster (bus bandwidth, bytes/s),
    and where that came from: its profile's fabric_reference for the tier and backend, or the spread of its earlier
    probes of the shape (the low end less a margin). Declared or measured there: taken as the card says."""

    basis: BandBasis
    low_bytes_per_s: Finite
    high_bytes_per_s: Finite
    source: Text = Field(description="where the band comes from, as the flag's sentence names it")


class CardFabricMeasured(_Part):
    """One tier the run measured itself (its pre-flight, or a probe run's probe), fitted as the fabric store fits
    it from the run's records: a verifier fits it again from them. `degraded` is drawn from the records and
    `expected` by the server's flag rule: a verifier draws it again."""

    tier: Tier
    preflight: bool
    nodes: Count = Field(ge=1, le=INT32_MAX)
    processes_per_node: Count = Field(ge=1, le=INT32_MAX)
    backend: Text
    ranks: Count = Field(ge=1, le=INT32_MAX)
    alpha_s: Finite
    beta_bytes_per_s: Finite
    degraded: Text | None = Field(description="the fabric_degraded sentence, as judged when it was stored")
    expected: CardFabricBand | None = Field(
        default=None,
        description="the band a pre-flight was judged against; none: a probe, nothing was expected, or a card of "
        "version 1 (which carried none)",
    )


class CardFabricFit(_Part):
    """A tier's fit of another run's probe that the run's prediction read (the exporting server's fabric store,
    chosen for the run's shape): taken as the card says, and what a verifier predicts the run from."""

    tier: Tier
    run_id: Id = Field(description="the probe run it was measured by, on the exporting server")
    nodes: Count = Field(ge=1, le=INT32_MAX)
    processes_per_node: Count = Field(ge=1, le=INT32_MAX)
    backend: Text
    alpha_s: Finite
    beta_bytes_per_s: Finite
    measured_at: Annotated[Text, AfterValidator(_iso_time)] = Field(
        description="when, UTC, ISO 8601: the newest of equals is chosen"
    )


class CardFabric(_Part):
    partition: Text | None = Field(description="the partition its fits are of (none: it named none)")
    measured: list[CardFabricMeasured] = Field(max_length=MAX_FABRIC_ENTRIES)
    fits: list[CardFabricFit] = Field(max_length=MAX_FABRIC_ENTRIES)


class Provenance(_Part):
    """What a run ran: each field is required (null where the run did not tell it), so that a card missing one is
    refused naming it. The image, versions and revision are what the run's latest start record says."""

    image: Text | None = Field(description="the container image, as named")
    image_digest: Text | None = Field(description="that image's digest, sha256:...")
    worker_version: Text | None
    torch_version: Text | None
    source_revision: Text | None
    scheduler: Text = Field(description="slurm, local, import (a log) or card")
    profile: Text | None = Field(description="the cluster profile its script was rendered for")
    job_id: Text | None
    nodes: Text | None = Field(description="the nodes it ran on, as Slurm writes them")
    hardware: list[Json] | None = Field(
        max_length=1024, description="its latest start record's nodes_hardware: one entry per host"
    )
    code: Json | None = Field(description="its code record: the script's and top-level files' sha256, git's revision")
    fabric: CardFabric | None = Field(
        default=None,
        description="what it measured of the fabric itself (a pre-flight, a probe) and the stored fits its prediction "
        "read; none: neither",
    )


class CardRecord(_Part):
    offset: Count = Field(ge=0, le=INT64_MAX, description="where its line is in the run's output, in bytes")
    record: Json = Field(description="the record as stored")


class CardRun(_Part):
    id: Id
    position: Count = Field(ge=0, le=INT32_MAX)
    state: Text
    spec: Json
    created_at: Stamp
    started_at: Stamp | None
    ended_at: Stamp | None
    exit_code: Text | None
    failure_kind: Text | None
    failure_detail: Text | None
    message: Text | None
    ingest_stopped: Text | None
    parse_errors: Count = Field(ge=0, le=INT32_MAX)
    records_read: Count = Field(
        ge=0, le=INT64_MAX, description="the records stored of its output: the card holds every one"
    )
    batch_script: Annotated[str, AfterValidator(_unicode)] | None = Field(
        max_length=MAX_SCRIPT_CHARS, description="its batch script, as submitted"
    )
    provenance: Provenance
    accounting: Json | None = Field(description="Slurm's accounting of its job, as stored")
    records: list[CardRecord] = Field(max_length=MAX_CARD_RECORDS, description="every record it stored, in order")


class CardFigures(_Part):
    """The figures the server derived from the records: the answers of GET /api/experiments/{id}/compare (with each
    run's epochs) and /scaling."""

    compare: Json
    scaling: Json


class ScalingCard(_Part):
    card_version: Annotated[Literal[1, 2], BeforeValidator(_no_flag)] = Field(
        description="the card's format: a reader refuses a version it does not know"
    )
    content_hash: str = Field(
        pattern=r"^sha256:[0-9a-f]{64}$", description="sha256 over the card's canonical JSON without this field"
    )
    source: CardSource
    experiment: CardExperiment
    runs: list[CardRun] = Field(min_length=1, max_length=MAX_CARD_RUNS)
    figures: CardFigures


def canonical(card: dict[str, Any]) -> bytes:
    """The card's canonical serialisation, without its hash: what the hash is taken over."""
    body = {key: value for key, value in card.items() if key != "content_hash"}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def content_hash(card: dict[str, Any]) -> str:
    """`sha256:HEX` of the card's canonical serialisation (a card as JSON, with or without its hash)."""
    return HASH_PREFIX + hashlib.sha256(canonical(card)).hexdigest()


def hashed(card: dict[str, Any]) -> dict[str, Any]:
    """The card (as JSON) with its content hash set."""
    return {**card, "content_hash": content_hash(card)}


def hash_problem(card: ScalingCard) -> str | None:
    """Why the card's hash is not its content's (it was changed after it was hashed); None when it is."""
    # As the file holds it: an optional field it leaves out (a card made before the field existed) is not hashed.
    found = content_hash(card.model_dump(mode="json", exclude_unset=True))
    if found == card.content_hash:
        return None
    return f"the card was changed after it was hashed: its content hashes to {found}, not {card.content_hash}"
