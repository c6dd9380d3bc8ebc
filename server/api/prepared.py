"""Answers whose JSON the services made already (from kept pieces): sent as they are, with the headers FastAPI's
own JSON answers carry, while the route's `response_model` still documents them."""

from __future__ import annotations

from fastapi import Response


class PreparedJSON(Response):
    """JSON bytes as the answer: FastAPI neither validates nor serialises a Response the route returns."""

    media_type = "application/json"
