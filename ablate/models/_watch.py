"""The clock on a reply while it arrives: a stall and the trial's wall deadline, checked on every
chunk the HTTP client reads.

The SDKs drop keep-alives (Anthropic's ``ping`` events, SSE comment lines) before a caller sees an
event, so a stream of pings alone never reaches the provider's code. The check therefore sits
under the SDK: a response hook of the SDK's HTTP client wraps the body of each 2xx reply read while
an attempt is watched (``watching``), and every chunk read passes through ``Watch.feed``. A server
that sends nothing at all is caught by the client's own read timeout (timeout_s), so a watched
request never waits past its deadline by more than timeout_s.

    client = anthropic.Anthropic(..., http_client=anthropic.DefaultHttpxClient(event_hooks=HOOKS))
    with watching(timeout_s) as watch:
        ... the SDK call, and reading its stream ...
        watch.done   # an OpenAI stream's closing "data: [DONE]" was read
"""
from __future__ import annotations

import contextlib
import contextvars
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx2

from ablate.models._retry import CallCut, StreamStalled, current_deadline

_WATCH: contextvars.ContextVar["Watch | None"] = contextvars.ContextVar("ablate_model_watch", default=None)


class Watch:
    """One request's clock: content must arrive at least every ``stall_s`` seconds, and the reply
    must be whole by ``deadline`` (time.monotonic() seconds; None: no limit)."""

    def __init__(self, stall_s: float, deadline: float | None):
        self.stall_s, self.deadline = stall_s, deadline
        self.last_content = time.monotonic()
        self.sse = False  # the body is an event stream: only its data lines are content
        self.done = False
        self._line = b""
        self._event = b""

    def feed(self, chunk: bytes) -> None:
        now = time.monotonic()
        if self._content(chunk):
            self.last_content = now
        quiet = now - self.last_content
        if quiet > self.stall_s:
            raise StreamStalled(f"the reply stalled: no content for {quiet:.1f}s, only keep-alives "
                                f"(model.timeout_s={self.stall_s:g})")
        if self.deadline is not None and now > self.deadline:
            raise CallCut(f"the trial's wall budget ran out while the reply was arriving "
                          f"({now - self.deadline:.1f}s ago): the reply was cut")

    def _content(self, chunk: bytes) -> bool:
        if not self.sse:
            return bool(chunk)
        *lines, self._line = (self._line + chunk).split(b"\n")
        content = False
        for line in lines:
            line = line.rstrip(b"\r")
            if not line:
                self._event = b""
            elif line.startswith(b"event:"):
                self._event = line[6:].strip()
            elif line.startswith(b"data:"):
                data = line[5:].strip()
                if data.startswith(b"[DONE]"):
                    self.done = True
                elif self._event != b"ping" and not _is_ping(data):
                    content = True
        return content


def _is_ping(data: bytes) -> bool:
    if len(data) > 64:
        return False
    try:
        return json.loads(data).get("type") == "ping"
    except (ValueError, AttributeError):
        return False


class _WatchedStream(httpx2.SyncByteStream):
    def __init__(self, stream: httpx2.SyncByteStream, watch: Watch):
        self._stream, self._watch = stream, watch

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._stream:
            self._watch.feed(chunk)
            yield chunk

    def close(self) -> None:
        self._stream.close()

    @property
    def elapsed(self) -> Any:
        return getattr(self._stream, "elapsed", None)


def _on_response(response: httpx2.Response) -> None:
    watch = _WATCH.get()
    if watch is None or not 200 <= response.status_code < 300:
        return
    watch.sse = response.headers.get("content-type", "").split(";")[0].strip() == "text/event-stream"
    response.stream = _WatchedStream(response.stream, watch)


HOOKS = {"response": [_on_response]}


@contextlib.contextmanager
def watching(stall_s: float) -> Iterator[Watch]:
    """Watch the replies read inside (the deadline: the loop's, ablate.models._retry.deadline)."""
    watch = Watch(stall_s, current_deadline())
    token = _WATCH.set(watch)
    try:
        yield watch
    finally:
        _WATCH.reset(token)
