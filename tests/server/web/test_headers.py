"""Security headers on every answer (pages, the API, errors, static files), a nonce of its own per request on the
pages' module mounts, and /docs from the server itself."""

from __future__ import annotations

import re


def _policy(answer) -> dict[str, str]:
    return dict(part.strip().split(" ", 1) for part in answer.headers["content-security-policy"].split(";"))


def test_every_answer_carries_the_headers(client):
    for path in (
        "/",
        "/runs",
        "/api/experiments",
        "/api/runs/0a1b2c3d4e",
        "/healthz",
        "/docs",
        "/static/css/scalelab.css",
    ):
        answer = client.get(path)
        policy = _policy(answer)
        assert policy["frame-ancestors"] == "'none'", path
        assert policy["object-src"] == "'none'" and "unsafe" not in policy["script-src"], path
        assert answer.headers["x-content-type-options"] == "nosniff", path
        assert answer.headers["referrer-policy"] == "same-origin", path


def test_the_mount_scripts_carry_this_requests_nonce(client):
    nonces = []
    for _ in range(2):
        answer = client.get("/runs")
        found = re.search(r"'nonce-([^']+)'", answer.headers["content-security-policy"])
        assert found is not None
        nonce = found.group(1)
        assert f'<script type="module" nonce="{nonce}">' in answer.text
        assert "<script>" not in answer.text  # no inline script without it
        nonces.append(nonce)
    assert nonces[0] != nonces[1]


def test_docs_come_from_the_server_itself(client):
    page = client.get("/docs").text
    assert "cdn" not in page.lower() and "https://" not in page
    for asset in re.findall(r'(?:src|href)="(/docs/assets/[^"]+)"', page):
        assert client.get(asset).status_code == 200, asset
    assert client.get("/docs/assets/../../etc/passwd").status_code == 404
    assert client.get("/redoc").status_code == 404
