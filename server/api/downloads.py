"""Answers that are files to save, shared by the routers that offer them."""

from __future__ import annotations

from fastapi import Response


def csv_download(text: str, filename: str) -> Response:
    """Served as a download; the file name holds only server-made ids, safe in a header."""
    return Response(text, media_type="text/csv", headers={"Content-Disposition": f'attachment; filename="{filename}"'})
