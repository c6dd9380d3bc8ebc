"""Local receivers for the notification tests: a tiny SMTP server (the few commands smtplib sends; aiosmtpd is not
a dependency) and an HTTP receiver of webhooks whose answers a test scripts, or holds until released."""

from __future__ import annotations

import http.server
import json
import socketserver
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email import message_from_bytes
from email.message import Message
from typing import Any


class _SMTPHandler(socketserver.StreamRequestHandler):
    server: _SMTPServer

    def _say(self, line: str) -> None:
        self.wfile.write(f"{line}\r\n".encode())

    def handle(self) -> None:
        self._say("220 test ESMTP")
        recipients: list[str] = []
        while line := self.rfile.readline():
            command = line.decode().strip()
            verb = command.split(" ", 1)[0].upper()
            if verb in ("EHLO", "HELO"):
                self._say("250 test")
            elif verb in ("MAIL", "RSET", "NOOP"):
                self._say("250 OK")
            elif verb == "RCPT":
                recipients.append(command.partition(":")[2].strip().strip("<>"))
                self._say("250 OK")
            elif verb == "DATA":
                self._say("354 go on")
                data = b""
                while (chunk := self.rfile.readline()) not in (b".\r\n", b""):
                    data += chunk[1:] if chunk.startswith(b"..") else chunk
                self.server.received.append((recipients, message_from_bytes(data)))
                self._say("250 queued")
            elif verb == "QUIT":
                self._say("221 bye")
                return
            else:
                self._say("502 not implemented")


class _SMTPServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _SMTPHandler)
        self.received: list[tuple[list[str], Message]] = []


@contextmanager
def smtp_server() -> Iterator[_SMTPServer]:
    server = _SMTPServer()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@dataclass
class Receiver:
    """What a webhook receiver was sent, and how it answers: each status of `answers` in turn, then 200."""

    port: int = 0
    answers: list[int] = field(default_factory=list)
    headers: dict[str, str] = field(default_factory=dict)
    bodies: list[dict[str, Any]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    hold: threading.Event | None = None  # set: answer; unset: keep the sender waiting
    entered: threading.Event = field(default_factory=threading.Event)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"


@contextmanager
def webhook_receiver(answers: list[int] | None = None, hold: threading.Event | None = None) -> Iterator[Receiver]:
    receiver = Receiver(answers=list(answers or []), hold=hold)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            receiver.paths.append(self.path)
            receiver.bodies.append(json.loads(body))
            receiver.entered.set()
            if receiver.hold is not None:
                receiver.hold.wait(300)
            status = receiver.answers.pop(0) if receiver.answers else 200
            self.send_response(status)
            for name, value in receiver.headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *_args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    receiver.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        if receiver.hold is not None:
            receiver.hold.set()
        server.shutdown()
        server.server_close()
