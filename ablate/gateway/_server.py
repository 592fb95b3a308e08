"""The gateway's HTTP server: on a Unix socket (bound into the agent's sandbox) or on a loopback
port (an unconfined agent), one thread a connection. Every request the agent sends is input from
untrusted code: anything malformed, oversized, of an unknown path or of a format the trial's model
does not speak gets an error reply in the API's own error shape, and nothing the agent sends can
stop the server, choose the model, see the key or move the budget.

    gw = Gateway(policy, meter, on_call=writer.model_call)
    path = gw.serve_unix("/tmp/x/gateway.sock")     # or: port = gw.serve_tcp()
    ...
    gw.close()
"""
from __future__ import annotations

import json
import logging
import os
import socket
import socketserver
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any, Callable

from ablate.gateway import _wire
from ablate.gateway._meter import Meter
from ablate.models import Usage

log = logging.getLogger("ablate.models")

MAX_BODY = 32 << 20  # bytes a request may carry
MAX_CONNECTIONS = 32  # open at once; more get 503
READ_TIMEOUT_S = 120.0  # a request that does not arrive whole in this long is dropped
DRAIN = 8 << 20  # bytes of an oversized body read and dropped after its 413, so the reply gets through
ROUTES = {f.path: f.name for f in _wire.FORMATS.values()}
COUNT_TOKENS = "/v1/messages/count_tokens"


@dataclass
class Outcome:
    """How one model call went. ``usage`` None: no reply from the model (an upstream failure)."""

    status: int
    body: dict[str, Any]
    usage: Usage | None
    failure: str | None = None  # None, "outage" (the provider's fault) or "rejected" (it refused the request)
    overridden: dict[str, Any] = field(default_factory=dict)  # what the gateway changed in the agent's request


def error_body(fmt: str | None, status: int, message: str) -> dict[str, Any]:
    kind = {400: "invalid_request_error", 404: "not_found_error", 413: "request_too_large",
            503: "overloaded_error"}.get(status, "api_error")
    if fmt == "anthropic" or fmt is None:
        return {"type": "error", "error": {"type": kind, "message": message}}
    return {"error": {"message": message, "type": kind, "code": kind}}


class Out:
    """What a policy writes its reply through: a whole JSON body, or a stream of chunks."""

    def __init__(self, handler: BaseHTTPRequestHandler, defer: bool = False):
        self.h, self.started, self.streaming, self.gone = handler, False, False, False
        self.defer, self._held = defer, None  # defer: a whole reply waits for finish()

    def json(self, status: int, body: dict[str, Any]) -> None:
        if self.defer:
            self.started, self._held = True, (status, body)
            return
        data = json.dumps(body).encode()
        if status >= 400:
            self.h.close_connection = True  # after an error, the agent starts afresh
        self._headers(status, "application/json", len(data))
        self._send(data)

    def start(self, status: int, content_type: str = "text/event-stream") -> None:
        self._headers(status, content_type, None)
        self.streaming = True

    def write(self, data: bytes) -> None:
        if data and self.streaming:
            self._send(f"{len(data):x}\r\n".encode() + data + b"\r\n")

    def end(self) -> None:
        """The reply's last bytes: a held JSON reply, or a stream's end. The call is recorded first,
        so that the agent's next request never comes before its record."""
        if self._held is not None:
            (status, body), self._held, self.defer, self.started = self._held, None, False, False
            self.json(status, body)
        if self.streaming:
            self._send(b"0\r\n\r\n")
            self.streaming = False

    def _headers(self, status: int, ctype: str, length: int | None) -> None:
        if self.started:
            return
        self.started = True
        self.h.replied = True
        try:
            self.h.send_response(status)
            self.h.send_header("content-type", ctype)
            if self.h.close_connection:
                self.h.send_header("connection", "close")
            if length is None:
                self.h.send_header("transfer-encoding", "chunked")
                self.h.send_header("cache-control", "no-cache")
            else:
                self.h.send_header("content-length", str(length))
            self.h.end_headers()
        except OSError:
            self.gone = True

    def _send(self, data: bytes) -> None:
        if self.gone:
            return
        try:
            self.h.wfile.write(data)
            self.h.wfile.flush()
        except OSError:
            self.gone = True  # the agent hung up: the call is still counted


def _drain(h: BaseHTTPRequestHandler, n: int) -> None:
    try:
        h.connection.settimeout(2.0)
        while n > 0 and (chunk := h.rfile.read1(min(n, 1 << 16))):
            n -= len(chunk)
    except OSError:
        pass


class _Unix(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    block_on_close = False


class _TCP(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True


class Gateway:
    """policy: ablate.gateway's forward, scripted or replay policy (``formats``, ``model``,
    ``prepare(fmt, body)`` -> (body to send, its max tokens, what was changed), ``respond(fmt,
    body, stream, out, headers)`` -> Outcome). on_call(call): each model call as the record keeps
    it. on_request(fmt, body): before each call is admitted (the trial's snapshots)."""

    def __init__(self, policy: Any, meter: Meter, on_call: Callable[[dict[str, Any]], None] | None = None,
                 on_request: Callable[[str, dict[str, Any]], None] | None = None, max_body: int = MAX_BODY):
        self.policy, self.meter, self.max_body = policy, meter, max_body
        self.on_call, self.on_request = on_call, on_request
        self.calls = 0
        self.last_failure: str | None = None  # the last call's upstream failure, if it had one
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._servers: list[socketserver.BaseServer] = []
        self._lock = threading.Lock()

    # -- serving ----------------------------------------------------------------------------------
    def serve_unix(self, path: str) -> str:
        srv = _Unix(path, self._handler())
        os.chmod(path, 0o777)  # the sandbox's own uid connects to it
        self._start(srv)
        return path

    def serve_tcp(self, host: str = "127.0.0.1") -> int:
        srv = _TCP((host, 0), self._handler())
        self._start(srv)
        return srv.server_address[1]

    def _start(self, srv: socketserver.BaseServer) -> None:
        self._servers.append(srv)
        threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.1}, name="ablate-gateway",
                         daemon=True).start()

    def close(self) -> None:
        for srv in self._servers:
            srv.shutdown()
            srv.server_close()
        self._servers.clear()

    def _handler(self) -> type:
        gateway = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = READ_TIMEOUT_S

            def log_message(self, *args: Any) -> None:  # no stderr chatter; the record says what happened
                pass

            def address_string(self) -> str:
                return "agent"

            def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
                # what http.server refuses itself (a request line or headers it cannot parse): in JSON,
                # with a status line even when the request had none
                self.request_version = "HTTP/1.1"
                Out(self).json(code, error_body(None, code, message or "bad request"))

            def handle(self) -> None:
                if not gateway._slots.acquire(blocking=False):
                    try:
                        self.rfile.readline(1024)
                        self.close_connection = True
                        self.request_version = "HTTP/1.1"
                        Out(self).json(503, error_body(None, 503, "too many connections to the gateway"))
                    except OSError:
                        pass
                    return
                try:
                    super().handle()
                except (OSError, socket.timeout):
                    pass
                finally:
                    gateway._slots.release()

            def do_GET(self) -> None:
                gateway._get(self)

            def do_POST(self) -> None:
                gateway._post(self)

            def do_HEAD(self) -> None:
                Out(self).json(200, {})

            do_PUT = do_DELETE = do_PATCH = do_OPTIONS = lambda self: Out(self).json(  # noqa: E731
                405, error_body(None, 405, f"{self.command} is not served here"))

        return Handler

    # -- requests --------------------------------------------------------------------------------
    def _get(self, h: BaseHTTPRequestHandler) -> None:
        path = h.path.split("?", 1)[0].rstrip("/")
        if path in ("/v1/models", "/models"):
            m = self.policy.model
            Out(h).json(200, {"object": "list", "data": [{"id": m, "object": "model", "type": "model",
                                                          "display_name": m, "created": 0, "owned_by": "ablate"}],
                              "has_more": False, "first_id": m, "last_id": m})
        elif path in ("", "/v1"):
            Out(h).json(200, {"gateway": "ablate"})
        else:
            Out(h).json(404, error_body(None, 404, f"GET {path}: not found"))

    def _body(self, h: BaseHTTPRequestHandler, fmt: str | None) -> dict[str, Any] | None:
        """The request's JSON object, or None after an error reply."""
        out = Out(h)
        if h.headers.get("transfer-encoding", "").lower() not in ("", "identity"):
            h.close_connection = True
            out.json(411, error_body(fmt, 411, "send the body with a content-length"))
            return None
        if h.headers.get("content-encoding", "identity").lower() != "identity":
            h.close_connection = True
            out.json(415, error_body(fmt, 415, "compressed request bodies are not accepted"))
            return None
        try:
            n = int(h.headers.get("content-length") or 0)
        except ValueError:
            n = -1
        if n < 0 or n > self.max_body:
            out.json(413, error_body(fmt, 413, f"a request body must be 0 to {self.max_body} bytes"))
            _drain(h, min(max(n, 0), DRAIN))  # so that the reply is read, not lost to a reset connection
            return None
        raw = h.rfile.read(n)
        try:
            body = json.loads(raw.decode("utf-8"))
        except (ValueError, RecursionError, UnicodeDecodeError) as e:
            self.meter.note({"event": "bad_request", "detail": f"not JSON: {type(e).__name__}"})
            out.json(400, error_body(fmt, 400, f"the request body is not JSON ({type(e).__name__})"))
            return None
        if not isinstance(body, dict):
            out.json(400, error_body(fmt, 400, f"the request body must be a JSON object, not {type(body).__name__}"))
            return None
        stream = body.get("stream")
        if stream is not None and not isinstance(stream, bool):
            out.json(400, error_body(fmt, 400, "stream must be true or false"))
            return None
        return body

    def _post(self, h: BaseHTTPRequestHandler) -> None:
        path = h.path.split("?", 1)[0].rstrip("/")
        fmt = ROUTES.get(path)
        if path == COUNT_TOKENS:
            body = self._body(h, "anthropic")
            if body is not None:
                Out(h).json(200, {"input_tokens": len(json.dumps(body)) // 4})
            return
        if fmt is None:
            h.close_connection = True
            Out(h).json(404, error_body(None, 404, f"POST {path}: not served here; the gateway serves "
                                                   f"{', '.join(sorted(ROUTES))}"))
            return
        body = self._body(h, fmt)
        if body is None:
            return
        try:
            self._call(h, fmt, path, body)
        except Exception as e:  # noqa: BLE001 - one request's failure must never stop the gateway
            log.exception("gateway: %s %s failed", fmt, path)
            h.close_connection = True
            if not getattr(h, "replied", False):
                Out(h).json(500, error_body(fmt, 500, f"the gateway failed on this request ({type(e).__name__})"))

    def _call(self, h: BaseHTTPRequestHandler, fmt: str, path: str, body: dict[str, Any]) -> None:
        out = Out(h)
        if fmt not in self.policy.formats:
            spoken = " or ".join(_wire.FORMATS[f].label for f in self.policy.formats)
            self.meter.note({"event": "bad_request", "detail": f"{fmt} request to a {spoken} model"})
            out.json(400, error_body(fmt, 400, f"this trial's model speaks {spoken}, not {_wire.FORMATS[fmt].label}"))
            return
        stream = body.get("stream") is True
        try:
            sent, max_tokens, overridden = self.policy.prepare(fmt, body)
        except ValueError as e:
            self.meter.note({"event": "bad_request", "detail": str(e)[:200]})
            out.json(400, error_body(fmt, 400, str(e)))
            return
        if self.on_request:
            self.on_request(fmt, sent)
        tokens, cost = self.meter.estimate(len(json.dumps(sent)), max_tokens)
        limit = self.meter.admit(tokens, cost)
        if limit:
            h.close_connection = True
            out.json(400, error_body(fmt, 400, f"ablate: the trial's {limit} budget is spent; the agent is ended"))
            return
        t0 = time.monotonic()
        out, outcome = Out(h, defer=True), None
        try:
            outcome = self.policy.respond(fmt, sent, stream, out, {k.lower(): v for k, v in h.headers.items()})
        finally:
            if outcome is None:  # the policy raised: the call counts as failed, the agent gets an error
                outcome = Outcome(500, error_body(fmt, 500, "the gateway's model failed"), None, "outage")
                if not out.started:
                    out.json(500, outcome.body)
            if outcome.usage is not None:
                outcome.usage.cost_usd = self.meter.cost(outcome.usage)
            text, calls, stop = _wire.reply_view(fmt, outcome.body) if outcome.usage is not None else ("", [], "error")
            self.meter.settle(tokens, cost, outcome.usage, len(calls))
            self.last_failure = outcome.failure
            try:
                self._record(fmt, path, sent, outcome, text, calls, stop, time.monotonic() - t0, overridden)
            finally:
                out.end()

    def _record(self, fmt, path, sent, outcome: Outcome, text, calls, stop, seconds, overridden) -> None:
        system, messages, tools = _wire.request_view(fmt, sent)
        call = {"request": {"wire": fmt, "path": path, "system": system, "messages": [m.to_dict() for m in messages],
                            "tools": tools, "body": sent, "overridden": overridden,
                            "forwarded": bool(getattr(self.policy, "forwards", False))},
                "response": {"wire": fmt, "status": outcome.status, "text": text,
                             "tool_calls": [c.__dict__ for c in calls], "stop_reason": stop,
                             "usage": (outcome.usage or Usage()).to_dict(), "body": outcome.body,
                             "failure": outcome.failure, "seconds": round(seconds, 3)}}
        with self._lock:
            self.calls += 1
            if self.on_call:
                self.on_call(call)
