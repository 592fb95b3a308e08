"""A local HTTP server that plays a provider API: queued replies out, received requests kept.

The SDKs talk to it over real HTTP (their own client, their own parsing), so tests check the
request bodies the providers really send and the replies in the providers' own JSON shapes.
A reply can also be a stream written piece by piece (``steps``: text sent at once, numbers are
seconds of waiting), its end the connection's close: a stream cut short is one that stops early,
as a dropped connection looks to the client.
"""
from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


@dataclass
class Reply:
    status: int = 200
    body: Any = None  # JSON-serialisable; or a list of (event, data) pairs when sse
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0  # sleep before answering (to make the client time out)
    sse: bool = False
    steps: list[str | float] | None = None  # a streamed body: text written as it comes, numbers = waits (s)
    text: str | None = None  # a body sent as is (with content_type)
    content_type: str | None = None


def sse_event(event: str, data: Any) -> str:
    """One server-sent event as the Messages API writes it."""
    return f"event: {event}\ndata: {json.dumps(data)}\n\n"


def sse_data(data: Any) -> str:
    """One server-sent event as chat completions write it ("[DONE]" as is)."""
    return f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n"


class FakeServer:
    def __init__(self) -> None:
        self.queue: deque[Reply] = deque()
        self.routes: dict[tuple[str, str], Reply] = {}  # (method, path) -> standing reply
        self.requests: list[dict[str, Any]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def _handle(self) -> None:
                n = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(n) if n else b""
                owner.requests.append({"method": self.command, "path": self.path,
                                       "headers": {k.lower(): v for k, v in self.headers.items()},
                                       "json": json.loads(raw) if raw else None})
                reply = owner.routes.get((self.command, self.path.split("?")[0]))
                if reply is None:
                    reply = owner.queue.popleft() if owner.queue else Reply(
                        500, {"type": "error", "error": {"type": "api_error", "message": "no reply queued"}})
                time.sleep(reply.delay_s)
                try:
                    self._send(reply)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True  # the client gave up (a timeout, a stall)

            def _send(self, reply: Reply) -> None:
                if reply.steps is not None:
                    self._stream(reply)
                    return
                if reply.text is not None:
                    payload = reply.text.encode()
                    ctype = reply.content_type or "text/html; charset=utf-8"
                elif reply.sse:
                    payload = "".join(f"event: {ev}\ndata: {json.dumps(data)}\n\n" for ev, data in reply.body).encode()
                    ctype = "text/event-stream"
                else:
                    payload = json.dumps(reply.body).encode()
                    ctype = "application/json"
                self.send_response(reply.status)
                self.send_header("content-type", ctype)
                self.send_header("content-length", str(len(payload)))
                for k, v in reply.headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(payload)

            def _stream(self, reply: Reply) -> None:
                self.send_response(reply.status)
                self.send_header("content-type", reply.content_type or "text/event-stream")
                self.send_header("connection", "close")  # the body ends where the connection does
                for k, v in reply.headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.close_connection = True
                for step in reply.steps:
                    if isinstance(step, (int, float)):
                        time.sleep(step)
                    else:
                        self.wfile.write(step.encode())
                        self.wfile.flush()

            do_GET = do_POST = _handle

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.httpd.block_on_close = False
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def reply(self, status: int = 200, body: Any = None, **kw: Any) -> None:
        self.queue.append(Reply(status, body, **kw))

    def posts(self) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["method"] == "POST"]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    s = FakeServer()
    yield s
    s.close()


def closed_port_url() -> str:
    """A URL on which nothing listens: bind a port, then release it."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@pytest.fixture
def closed_url() -> str:
    return closed_port_url()
