"""The API's documentation page (/docs): Swagger UI served by the server itself, as plotly.js is, since login
nodes are often offline and a CDN's script would run with the rights of whoever is signed in. Its files come from
the fastapi-offline package (which bundles Swagger UI); its one inline script carries the request's nonce (see
headers.py). ReDoc is not served: it styles itself with inline <style> elements injected at run time, and one
documentation page is enough."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from fastapi import APIRouter, HTTPException, Request, status
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse

from server.web.headers import csp_nonce
from server.web.templating import root_of

router = APIRouter(include_in_schema=False)

# The files /docs needs, by the name it asks them under: nothing else of the package's folder is served.
ASSETS = {
    "swagger-ui-bundle.js": "text/javascript",
    "swagger-ui.css": "text/css",
    "favicon.png": "image/png",
}
_CACHE = {"Cache-Control": "public, max-age=86400"}


def _assets_dir() -> Path | None:
    spec = importlib.util.find_spec("fastapi_offline")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "static"


@router.get("/docs", response_class=HTMLResponse)
def swagger_ui(request: Request) -> HTMLResponse:
    root = root_of(request)
    page = get_swagger_ui_html(
        openapi_url=f"{root}{request.app.openapi_url}",
        title=f"{request.app.title} - API",
        swagger_js_url=f"{root}/docs/assets/swagger-ui-bundle.js",
        swagger_css_url=f"{root}/docs/assets/swagger-ui.css",
        swagger_favicon_url=f"{root}/docs/assets/favicon.png",
    )
    body = bytes(page.body).decode().replace("<script>", f'<script nonce="{csp_nonce(request)}">')
    return HTMLResponse(body)


@router.get("/docs/assets/{name}")
def swagger_asset(name: str) -> FileResponse:
    folder = _assets_dir()
    if name not in ASSETS or folder is None or not (folder / name).is_file():
        raise HTTPException(
            status.HTTP_404_NOT_FOUND, f"no {name} beside the server: pip install fastapi-offline for /docs"
        )
    return FileResponse(folder / name, media_type=ASSETS[name], headers=_CACHE)
