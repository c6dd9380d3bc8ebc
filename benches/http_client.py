"""A lean HTTP/1.1 client for the load benchmarks: each simulated client keeps one connection of its own.

httpx's AsyncClient, shared by the 250 clients of benches.load, cost their one process 10 ms of CPU per request
(32.7 s for 3,266 requests), as much as the server spent answering, on the same two cores: the benchmark measured
its own clients as much as the server. This client writes a request's bytes and reads the status line, headers
and body (by Content-Length, or chunked), and nothing more. It asks for gzip, as a browser does, so that the
server does a browser's work; a body is decompressed only when it is read.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json as jsonlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit


class TransportError(Exception):
    """No answer: the connection failed, closed mid-answer, or the answer was not HTTP/1.1."""


@dataclass(frozen=True)
class Answer:
    status_code: int
    headers: Mapping[str, str]  # names in lower case
    raw: bytes  # the body as sent

    @property
    def content(self) -> bytes:
        return gzip.decompress(self.raw) if self.headers.get("content-encoding") == "gzip" else self.raw

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return jsonlib.loads(self.content)


class Connection:
    """One client's keep-alive connection to the server at `base_url` (http://host:port), opened on first use and
    again after the server closes it. Not to be shared by tasks: one request at a time."""

    def __init__(self, base_url: str, timeout_s: float, headers: Mapping[str, str] | None = None) -> None:
        parts = urlsplit(base_url)
        if parts.scheme != "http" or parts.hostname is None:
            raise ValueError(f"not an http:// address: {base_url!r}")
        self.host, self.port = parts.hostname, parts.port or 80
        self.timeout_s = timeout_s
        fixed = {"Host": f"{self.host}:{self.port}", "Accept-Encoding": "gzip", **(headers or {})}
        self._fixed = "".join(f"{name}: {value}\r\n" for name, value in fixed.items())
        self._streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def __aenter__(self) -> Connection:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._streams is not None:
            _, writer = self._streams
            self._streams = None
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    async def get(self, path: str, params: Mapping[str, Any] | None = None, **kw: Any) -> Answer:
        return await self.request("GET", path, params=params, **kw)

    async def request(
        self,
        method: str,
        path: str,
        *,
        headers: Mapping[str, str] | None = None,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
    ) -> Answer:
        if params:
            path = f"{path}{'&' if '?' in path else '?'}{urlencode(params)}"
        body = b"" if json is None else jsonlib.dumps(json).encode()
        head = f"{method} {path} HTTP/1.1\r\n{self._fixed}"
        head += "".join(f"{name}: {value}\r\n" for name, value in (headers or {}).items())
        if json is not None:
            head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        request = head.encode("latin-1") + b"\r\n" + body
        try:
            async with asyncio.timeout(self.timeout_s):
                return await self._exchange(request, method)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ValueError) as exc:
            await self.close()
            raise TransportError(f"{method} {path}: {type(exc).__name__}: {exc}") from exc

    async def _exchange(self, request: bytes, method: str) -> Answer:
        if self._streams is None:
            self._streams = await asyncio.open_connection(self.host, self.port, limit=2**20)
        reader, writer = self._streams
        writer.write(request)
        await writer.drain()
        lines = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        version, status, *_ = lines[0].split(" ", 2)
        if not version.startswith("HTTP/1."):
            raise ValueError(f"not an HTTP/1.x answer: {lines[0]!r}")
        headers = {}
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        code = int(status)
        if method == "HEAD" or code in (204, 304) or 100 <= code < 200:
            raw = b""
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            raw = await _chunked(reader)
        elif "content-length" in headers:
            raw = await reader.readexactly(int(headers["content-length"]))
        else:
            raw = await reader.read()  # the server closes the connection to end the body
            headers["connection"] = "close"
        if headers.get("connection", "").lower() == "close":
            await self.close()
        return Answer(code, headers, raw)


async def _chunked(reader: asyncio.StreamReader) -> bytes:
    pieces: list[bytes] = []
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
        if size == 0:
            await reader.readuntil(b"\r\n")  # the empty trailer section
            return b"".join(pieces)
        pieces.append(await reader.readexactly(size))
        await reader.readexactly(2)
