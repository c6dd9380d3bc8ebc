"""An experiment's report: one HTML file to save, hand in or attach, that needs no server and no network."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response

from server.api.deps import CurrentUser, SessionDep
from server.api.errors import not_found
from server.services.report import experiment_report
from server.services.visibility import visible_experiment

router = APIRouter(prefix="/api/experiments", tags=["experiments"])


@router.get(
    "/{experiment_id}/report.html",
    response_class=Response,
    summary="The experiment's report: request, flags, charts, fits, table, resources, provenance, batch script",
    responses={
        200: {
            "content": {"text/html": {}},
            "description": "one self-contained HTML file: charts as inline SVG, no script, nothing fetched",
        },
        **not_found("experiment"),
        422: {"description": "`against` names no experiment the viewer may see"},
    },
)
def experiment_report_html(
    experiment_id: str,
    session: SessionDep,
    user: CurrentUser,
    against: Annotated[
        str | None,
        Query(
            max_length=16,
            description="compare with this experiment (an overlay with the regression test); default: the reference "
            "pinned for the experiment's spec, where one is",
        ),
    ] = None,
) -> Response:
    """The figures as they stand: runs that have not ended show what they have so far, and the report says so.
    Against a reference, each point's ratio of times, its interval and its verdict, and the two drawn together."""
    visible_experiment(session, user, experiment_id)
    html = experiment_report(session, experiment_id, user, against)
    # Inline: a browser shows it, and saving it keeps this name; the id is server-made, safe in a header.
    disposition = f'inline; filename="scalelab-{experiment_id}-report.html"'
    return Response(html, media_type="text/html", headers={"Content-Disposition": disposition})
