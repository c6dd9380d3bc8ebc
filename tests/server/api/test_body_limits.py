"""Request bodies are bounded, and none is read for a sender who is not signed in (server/api/limits.py)."""

from __future__ import annotations

import json
import re
import select
import socket
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

from fastapi.testclient import TestClient
from sqlmodel import Session

from benches.server_process import running_server
from contract.limits import MAX_IMPORT_CHARS
from server.config import Settings
from server.db import init_db, make_engine
from server.models import MAX_RUNS_PER_EXPERIMENT, ExperimentCreate
from server.services import users
from tests.conftest import local_client

MiB = 2**20
DEFAULT_LIMIT = Settings.model_fields["max_body_bytes"].default
IMPORT_LIMIT = Settings.model_fields["max_import_body_bytes"].default


def largest_experiment_request() -> dict[str, object]:
    """A program's request at every bound of its fields (in ASCII), swept over a 256-run grid."""
    axes = {f"params.p{axis}": [f"{value}" * 256 for value in "ab"] for axis in range(8)}  # 2**8 runs
    return {
        "name": "n" * 200,
        "base": {
            "kind": "program",
            "program": {
                "command": ["python", *["w" * 4096] * 255],
                "workdir": "/" + "d" * 1023,
                "env": {f"V{index:02d}" + "E" * 61: "v" * 4096 for index in range(64)},
                "params": {f"p{index}" + "q" * 37: "x" * 256 for index in range(64)},
                "image": "i" * 512,
            },
        },
        "grid": axes,
        "resources": {"sbatch_options": {f"o{index:02d}" + "o" * 37: "v" * 64 for index in range(32)}},
    }


def test_the_largest_valid_experiment_request_fits_the_default_limit():
    request = largest_experiment_request()
    ExperimentCreate.model_validate(request)  # valid as a request: every field within its bounds
    combinations = 1
    for values in request["grid"].values():  # type: ignore[attr-defined]
        combinations *= len(values)
    assert combinations == MAX_RUNS_PER_EXPERIMENT
    size = len(json.dumps(request).encode())
    assert 1 * MiB < size < DEFAULT_LIMIT, size
    # An import's 64 MiB of logs, a newline every 40 characters written as two (\n), fit its own.
    assert MAX_IMPORT_CHARS * 41 // 40 < IMPORT_LIMIT


def test_an_oversized_body_is_a_413_naming_its_limit_before_anything_is_read(client):
    def body(size: int) -> Iterator[bytes]:  # sent chunked: no Content-Length
        yield b"x" * size

    response = client.post("/api/experiments", content=b"x" * (DEFAULT_LIMIT + 1))
    assert response.status_code == 413
    assert response.json() == {
        "detail": f"the request's body is larger than this server accepts here: at most {DEFAULT_LIMIT} bytes "
        "(2 MiB; SCALELAB_MAX_BODY_BYTES). Nothing of it was read or kept.",
        "limit_bytes": DEFAULT_LIMIT,
    }
    assert response.headers["connection"] == "close"
    # Without a length (chunked), the body is counted as it comes, and cut off at the limit.
    response = client.post("/api/experiments", content=body(DEFAULT_LIMIT + 1))
    assert response.status_code == 413 and response.json()["limit_bytes"] == DEFAULT_LIMIT
    # The sign-in form is bounded too, and an import by its own limit.
    assert client.post("/login", content=body(DEFAULT_LIMIT + 1)).status_code == 413
    response = client.post("/api/imports", content=b"x" * (DEFAULT_LIMIT + 1))
    assert response.status_code == 422  # read (and refused as no JSON): within the import's limit
    response = client.post("/api/imports", content=body(IMPORT_LIMIT + 1))
    assert response.status_code == 413 and "SCALELAB_MAX_IMPORT_BODY_BYTES" in response.json()["detail"]


def test_no_body_is_read_for_a_sender_who_is_not_signed_in(client):
    pulled: list[str] = []

    def body() -> Iterator[bytes]:
        pulled.append("read")
        yield b"{}"

    anonymous = TestClient(client.app)
    for path in ("/api/experiments", "/api/imports", "/api/experiments/preview"):
        response = anonymous.post(path, content=body())
        assert pulled == [], path
        assert response.status_code == 401, response.text
        assert "sign in first" in response.json()["detail"]
        assert response.headers["connection"] == "close"  # the rest of the body is not read either
        response = anonymous.post(path, content=body(), headers={"Authorization": "Bearer sl_unknown"})
        assert pulled == [], path
        assert response.status_code == 401 and "unknown or revoked" in response.json()["detail"]
    # Signed in, the same body is read (and refused: an experiment needs a name).
    assert client.post("/api/experiments/preview", content=body()).status_code == 422
    assert pulled == ["read"]


def rss_kib(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"^VmRSS:\s+(\d+) kB$", status, re.MULTILINE).group(1))  # type: ignore[union-attr]


def exchange(url: str, head: str, body: Iterator[bytes]) -> tuple[int, dict[str, object] | None, int]:
    """Send a request whose body comes from `body`, for as long as the server has not answered and reads on, as a
    sender who does not stop would; the status and JSON body of the answer, and the body's bytes sent."""
    parts = urlsplit(url)
    sent = 0
    with socket.create_connection((parts.hostname, parts.port), timeout=120) as sock:
        sock.sendall(head.encode())
        answer = b""
        sending = True
        while True:
            readable, writable, _ = select.select([sock], [sock] if sending else [], [], 120)
            assert readable or writable, "the server neither answered nor read on for 120 s"
            if readable:
                chunk = sock.recv(65536)
                answer += chunk
                if not chunk or _complete(answer):
                    break
                continue
            piece = next(body, None)
            if piece is None:
                sending = False
                continue
            try:
                sock.sendall(piece)
            except (BrokenPipeError, ConnectionResetError):
                sending = False
                continue
            sent += len(piece)
    head_end = answer.index(b"\r\n\r\n")
    status = int(answer.split(b" ", 2)[1])
    content = answer[head_end + 4 :]
    return status, (json.loads(content) if content else None), sent


def _complete(answer: bytes) -> bool:
    if b"\r\n\r\n" not in answer:
        return False
    head, _, content = answer.partition(b"\r\n\r\n")
    found = re.search(rb"(?im)^content-length:\s*(\d+)\s*$", head)
    return found is not None and len(content) >= int(found.group(1))


def plain(total: int) -> Iterator[bytes]:
    for _ in range(total // MiB):
        yield b"x" * MiB


def chunked(total: int) -> Iterator[bytes]:
    for _ in range(total // MiB):
        yield b"%x\r\n" % MiB + b"x" * MiB + b"\r\n"
    yield b"0\r\n\r\n"


def post(path: str, *, length: int | None = None, token: str | None = None) -> str:
    framing = f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked"
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    return f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n{auth}{framing}\r\n\r\n"


def test_oversized_bodies_without_a_token_leave_a_real_server_small(tmp_path):
    """What an anonymous sender of 200 MB bodies costs a real server: nothing beyond a few buffers (it was 550 MB
    each). With a Content-Length and chunked; signed in, a chunked import is cut off at its limit."""
    engine = make_engine(f"sqlite:///{tmp_path / 'scalelab.db'}")
    init_db(engine)
    with Session(engine) as session:
        token = users.add_user(session, "alice")
    engine.dispose()
    offered = 200 * MiB
    env = {"SCALELAB_AUTH": "true", "SCALELAB_MAX_IMPORT_BODY_BYTES": str(8 * MiB)}
    with running_server(tmp_path, "local", env) as url:
        pid = int(re.findall(r"Started server process \[(\d+)\]", (tmp_path / "server.log").read_text())[-1])
        before = rss_kib(pid)
        for path in ("/api/experiments", "/api/imports"):
            status, answer, sent = exchange(url, post(path, length=offered), plain(offered))
            assert status == 413, answer
            assert answer is not None and answer["limit_bytes"] in (DEFAULT_LIMIT, 8 * MiB)
            assert sent < offered
            status, answer, sent = exchange(url, post(path), chunked(offered))
            assert status == 401, answer
            assert sent < offered
        status, answer, sent = exchange(url, post("/api/imports", token=token), chunked(offered))
        assert status == 413 and answer is not None and answer["limit_bytes"] == 8 * MiB, answer
        assert 8 * MiB <= sent < offered
        grown_mib = (rss_kib(pid) - before) / 1024
    assert grown_mib < 64, f"the server grew by {grown_mib:.0f} MiB"


def test_the_limit_is_the_servers_setting(settings):
    small = settings.model_copy(update={"max_body_bytes": 64 * 1024})
    with local_client(small) as client:
        response = client.post("/api/experiments", content=b"x" * (64 * 1024 + 1))
        assert response.status_code == 413 and response.json()["limit_bytes"] == 64 * 1024
        assert client.post("/api/experiments/preview", content=b"x" * (64 * 1024)).status_code == 422
