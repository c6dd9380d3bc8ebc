"""With authentication off, a page elsewhere cannot drive the API through the browser of whoever runs the server:
not by DNS rebinding (its Host names another host), nor by a cross-site post (its Origin is another site)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from server.main import create_app


@pytest.fixture
def open_app(settings, local_scheduler):
    """The app with authentication off, as `scripts/up` serves it for one person on their machine."""
    return create_app(settings.model_copy(update={"auth": False}), local_scheduler, start_monitor=False)


@pytest.mark.parametrize("host", ["evil.example:8000", "evil.example", "127.0.0.1.evil.example:8000", "10.0.0.7:8000"])
def test_a_host_that_is_not_loopback_is_refused(open_app, host):
    with TestClient(open_app, base_url="http://127.0.0.1:8000") as client:
        for path in ("/api/experiments", "/", "/experiments/new"):
            answer = client.get(path, headers={"Host": host})
            assert answer.status_code == 421, path
            assert "loopback" in answer.json()["detail"]
        refused = client.post("/api/experiments", headers={"Host": host}, json={})
        assert refused.status_code == 421


@pytest.mark.parametrize(
    "base", ["http://127.0.0.1:8000", "http://localhost:8000", "http://[::1]:8000", "http://localhost:9000"]
)
def test_loopback_names_are_served_on_any_port(open_app, base):
    with TestClient(open_app, base_url=base) as client:
        assert client.get("/api/experiments").json()["count"] == 0
        assert client.get("/").status_code == 200


def test_a_change_from_another_site_is_refused_and_from_the_own_pages_taken(open_app):
    with TestClient(open_app, base_url="http://127.0.0.1:8000") as client:
        for origin in ("http://evil.example", "http://127.0.0.1:9000", "null"):
            refused = client.post("/api/experiments", headers={"Origin": origin}, json={})
            assert refused.status_code == 403, origin
            assert client.delete("/api/experiments/0a1b2c3d4e", headers={"Origin": origin}).status_code == 403
        # Its own page's post, and one from curl (no Origin), reach the API (which finds the body invalid).
        assert client.post("/api/experiments", headers={"Origin": "http://127.0.0.1:8000"}, json={}).status_code == 422
        assert client.post("/api/experiments", json={}).status_code == 422
        # Reading is no change: a cross-site GET cannot read the answer anyway (no CORS).
        assert client.get("/api/experiments", headers={"Origin": "http://evil.example"}).status_code == 200


def test_with_authentication_on_the_host_is_not_checked(client):
    """A signed-in server may sit behind any name (a proxy, the login node's own): its sign-in guards it."""
    assert client.get("/api/experiments", headers={"Host": "login01.cluster.example"}).status_code == 200
