"""Answers whose JSON the services made already (from kept pieces): sent as they are, with the headers FastAPI's
own JSON answers carry, while the route's `response_model` still documents them."""

from __future__ import annotations

from fastapi import Request, Response
from pydantic import BaseModel

from server.services.read_cache import Answer

# Answers smaller than this are sent uncompressed (GZipMiddleware's minimum_size): compressing them saves little.
GZIP_MINIMUM_SIZE = 4096


class PreparedJSON(Response):
    """JSON bytes as the answer: FastAPI neither validates nor serialises a Response the route returns."""

    media_type = "application/json"


def kept_answer(answer: Answer, request: Request) -> Response:
    """A kept answer, gzipped once and sent so to every client that accepts it (the middleware passes an answer
    that says its encoding as it is): compressing 280 kB of a 200-run comparison again took as long as the rest."""
    if len(answer.body) < GZIP_MINIMUM_SIZE or "gzip" not in request.headers.get("accept-encoding", ""):
        return PreparedJSON(answer.body)
    return PreparedJSON(answer.gzipped(), headers={"Content-Encoding": "gzip", "Vary": "Accept-Encoding"})


def serialized_here(model: BaseModel) -> PreparedJSON:
    """A model as the answer, serialised in the route's own thread: a model a sync route returns is validated again by
    FastAPI in another hop to the thread pool, which on a loaded server waits its turn for a thread once more."""
    return PreparedJSON(model.model_dump_json())
