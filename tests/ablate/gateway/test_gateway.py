"""The model gateway on its Unix socket: replies in each wire format, streamed or not; every hostile
request answered with an error and the gateway still serving; budgets refused past; replay."""
import http.client
import json
import shutil
import socket
import tempfile
from pathlib import Path

import pytest

from ablate.gateway import Gateway, Meter, _wire
from ablate.gateway._replay import ReplayAgent
from ablate.harnesses.scripted import ScriptedAgent
from ablate.models import Usage
from ablate.harnesses import Budget

FREE = {"input": 0.0, "output": 0.0, "cache_read": 0.0, "cache_write": 0.0}
PROMPT = ('Operator: rmsnorm\n\nNormalise rows.\nTarget: a machine without a GPU.\n'
          'Shapes (the evaluation uses exactly these): [{"M": 4, "N": 64, "dtype": "float32"}]\nBudget: 40 turns.')
CLAUDE_TOOLS = [{"name": n, "description": n, "input_schema": {"type": "object"}} for n in ("Bash", "Edit", "Read", "Write")]
CODEX_TOOLS = [{"type": "function", "name": "exec_command", "parameters": {"type": "object"}},
               {"type": "custom", "name": "apply_patch", "format": {"type": "grammar"}}]
CHAT_TOOLS = [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}} for n in ("bash", "write_file")]


class Unix(http.client.HTTPConnection):
    def __init__(self, path, timeout=30):
        super().__init__("gateway", timeout=timeout)
        self.unix = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.unix)


def post(sock, path, body, headers=None):
    """(status, parsed JSON, or the stream's events folded by the test's own SSE reading)."""
    c = Unix(sock)
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    c.request("POST", path, data, {"content-type": "application/json", **(headers or {})})
    r = c.getresponse()
    raw = r.read()
    c.close()
    if "event-stream" in r.getheader("content-type", ""):
        events = [json.loads(line[5:]) for line in raw.decode().splitlines()
                  if line.startswith("data:") and line[5:].strip() != "[DONE]"]
        return r.status, events
    return r.status, json.loads(raw)


def raw_exchange(sock, data: bytes) -> bytes:
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(30)
    s.connect(sock)
    s.sendall(data)
    out = b""
    while True:
        try:
            chunk = s.recv(65536)
        except socket.timeout:
            break
        if not chunk:
            break
        out += chunk
    s.close()
    return out


@pytest.fixture
def gw():
    made = []

    def start(policy=None, budget=Budget(turns=40), price=FREE, max_body=1 << 20):
        calls = []
        meter = Meter(budget, price)
        g = Gateway(policy or ScriptedAgent({"provider": "scripted"}), meter, on_call=calls.append, max_body=max_body)
        d = tempfile.mkdtemp(prefix="gw")
        sock = g.serve_unix(f"{d}/g.sock")
        made.append((g, d))
        return sock, calls, meter

    yield start
    for g, d in made:
        g.close()
        shutil.rmtree(d, ignore_errors=True)


def anthropic(tools=CLAUDE_TOOLS, stream=False, messages=None):
    return {"model": "whatever", "max_tokens": 1000, "stream": stream, "tools": tools,
            "system": [{"type": "text", "text": "Primary working directory: /workspace"}],
            "messages": messages or [{"role": "user", "content": [{"type": "text", "text": PROMPT}]}]}


def test_claude_codes_tools_come_back_streamed_as_they_do_whole(gw):
    sock, calls, meter = gw()
    status, whole = post(sock, "/v1/messages?beta=true", anthropic())
    assert status == 200 and whole["stop_reason"] == "tool_use"
    (call,) = [b for b in whole["content"] if b["type"] == "tool_use"]
    assert call["name"] == "Write" and call["input"]["file_path"] == "/workspace/kernel.py"
    assert "def kernel" in call["input"]["content"] or "kernel" in call["input"]["content"]
    status, events = post(sock, "/v1/messages", anthropic(stream=True))
    acc = _wire.Accumulator("anthropic")
    for e in events:
        acc.add(e)
    streamed = acc.body()
    assert [b["type"] for b in streamed["content"]] == [b["type"] for b in whole["content"]]
    assert [b.get("input") for b in streamed["content"]] == [b.get("input") for b in whole["content"]]
    assert streamed["usage"]["output_tokens"] == whole["usage"]["output_tokens"] > 0
    assert len(calls) == 2 and meter.turns == 2 and meter.tool_calls == 2
    assert calls[0]["request"]["wire"] == "anthropic" and calls[0]["response"]["tool_calls"][0]["name"] == "Write"
    assert calls[0]["response"]["usage"]["total_tokens"] > 0


def test_the_script_goes_on_from_the_conversation_and_ends_with_what_the_test_said(gw):
    sock, calls, _ = gw()
    messages = [{"role": "user", "content": PROMPT}]
    names = []
    for _ in range(6):
        status, r = post(sock, "/v1/messages", anthropic(messages=messages))
        assert status == 200
        uses = [b for b in r["content"] if b["type"] == "tool_use"]
        if not uses:
            break
        names.append(uses[0]["name"])
        messages += [{"role": "assistant", "content": r["content"]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0]["id"],
                                                   "content": "RESULT correct=1 max_err=0 ms=1 shapes_ms=[1]"}]}]
    assert names == ["Write", "Edit", "Write", "Bash"]
    assert r["stop_reason"] == "end_turn" and "RESULT correct=1" in r["content"][0]["text"]


@pytest.mark.parametrize("path,tools,first", [("/v1/responses", CODEX_TOOLS, "apply_patch"),
                                              ("/v1/chat/completions", CHAT_TOOLS, "write_file")])
def test_openai_formats_get_the_agents_own_tools(gw, path, tools, first):
    sock, calls, _ = gw()
    body = {"model": "x", "tools": tools, "stream": True}
    body |= {"input": PROMPT} if path == "/v1/responses" else {"messages": [{"role": "user", "content": PROMPT}]}
    fmt = "responses" if path == "/v1/responses" else "chat"
    status, events = post(sock, path, body)
    assert status == 200
    acc = _wire.Accumulator(fmt)
    for e in events:
        acc.add(e)
    text, tool_calls, stop = _wire.reply_view(fmt, acc.body())
    assert stop == "tool_use" and tool_calls[0].name == first
    if first == "apply_patch":  # Codex's freeform tool: a patch adding kernel.py
        item = [i for i in acc.body()["output"] if i["type"] == "custom_tool_call"][0]
        assert item["input"].startswith("*** Begin Patch\n*** Add File: kernel.py\n+")
    assert _wire.usage_of(fmt, acc.body()).output_tokens > 0 and calls[0]["request"]["wire"] == fmt


HOSTILE = [
    (b"POST /v1/messages HTTP/1.1\r\nContent-Length: 9\r\n\r\n{not json", b"400"),
    (b"POST /v1/messages HTTP/1.1\r\nContent-Length: 7\r\n\r\n[1,2,3]", b"400"),
    (b"POST /v1/messages HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n{}", b"413"),
    (b"POST /v1/messages HTTP/1.1\r\nContent-Length: -5\r\n\r\n", b"413"),
    (b"POST /v1/messages HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", b"411"),
    (b"POST /v1/messages HTTP/1.1\r\nContent-Encoding: gzip\r\nContent-Length: 2\r\n\r\n{}", b"415"),
    (b'POST /v1/messages HTTP/1.1\r\nContent-Length: 17\r\n\r\n{"stream": "yes"}', b"400"),
    (b"POST /v1/admin HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}", b"404"),
    (b"GET /etc/passwd HTTP/1.1\r\n\r\n", b"404"),
    (b"DELETE /v1/messages HTTP/1.1\r\n\r\n", b"405"),
    (b"\x00\xff\xfe garbage that is not HTTP\r\n\r\n", b"400"),
    (b"POST /v1/messages HTTP/1.1\r\n" + b"X: y\r\n" * 200 + b"\r\n", b"431"),
]


def test_hostile_requests_get_an_error_reply_and_the_gateway_keeps_serving(gw):
    sock, calls, meter = gw(max_body=1 << 16)
    deep = b"[" * 100000 + b"]" * 100000
    cases = HOSTILE + [(b"POST /v1/messages HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % len(deep) + deep, b"413"),
                       (b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 40000\r\n\r\n" + b"[" * 20000 + b"]" * 20000,
                        b"400")]
    for request, status in cases:
        reply = raw_exchange(sock, request)
        assert reply.split(b"\r\n", 1)[0].split(b" ")[1] == status, (request[:60], reply[:200])
    assert calls == [] and meter.turns == 0  # none of them reached a model
    assert post(sock, "/v1/messages", anthropic())[0] == 200  # and it still answers


def test_a_request_in_a_format_the_model_does_not_speak_is_refused(gw):
    replay = ReplayAgent([{"request": {"body": {}}, "response": {"wire": "anthropic", "status": 200}}], "rec")
    sock, calls, _ = gw(policy=replay)
    status, body = post(sock, "/v1/chat/completions", {"messages": []})
    assert status == 400 and "speaks Anthropic Messages, not OpenAI Chat Completions" in body["error"]["message"]
    assert calls == []


def test_turns_past_the_budget_are_refused_and_the_limit_named(gw):
    sock, calls, meter = gw(budget=Budget(turns=2))
    assert [post(sock, "/v1/messages", anthropic())[0] for _ in range(2)] == [200, 200]
    status, body = post(sock, "/v1/messages", anthropic())
    assert status == 400 and "turns budget is spent" in body["error"]["message"]
    assert meter.stopped == "turns" and len(calls) == 2
    assert post(sock, "/v1/messages", anthropic())[0] == 400  # stays ended


@pytest.mark.parametrize("budget,price,limit", [
    (Budget(turns=40, tokens=100), FREE, "tokens"),  # the prompt alone is estimated past 100 tokens
    (Budget(turns=40, cost_usd=0.001), {"input": 10.0, "output": 50.0, "cache_read": 1.0, "cache_write": 12.5}, "cost_usd"),
])
def test_a_call_that_could_cross_tokens_or_dollars_is_refused_before_it_is_made(gw, budget, price, limit):
    sock, calls, meter = gw(budget=budget, price=price)
    status, body = post(sock, "/v1/messages", anthropic())
    assert status == 400 and f"{limit} budget is spent" in body["error"]["message"]
    assert meter.stopped == limit and calls == []


def test_time_spent_outside_model_calls_is_the_agents_tool_time():
    now = [0.0]
    meter = Meter(Budget(turns=9, tool_s=5.0), FREE, gpu=True, clock=lambda: now[0])
    assert meter.admit(1, 0.0) is None
    now[0] = 10.0  # ten seconds waiting on the model
    meter.settle(1, 0.0, Usage(1, 1, calls=1))
    now[0] = 14.0  # four seconds of the agent's own
    assert meter.tool_s() == pytest.approx(4.0) and meter.gpu_s() == pytest.approx(4.0) and meter.over() is None
    now[0] = 15.5
    assert meter.over() == "tool_s" and meter.admit(1, 0.0) == "tool_s" and meter.stopped == "tool_s"


def test_a_replay_serves_the_recording_and_names_the_first_difference(gw):
    sock, calls, _ = gw()
    first = anthropic()
    post(sock, "/v1/messages", first)
    recorded = calls[0]
    replay = ReplayAgent([recorded], "runs/x/trial", check="full", recorded_id="scripted-kernel-search-v1")
    sock2, calls2, meter2 = gw(policy=replay)
    status, body = post(sock2, "/v1/messages", first)
    assert status == 200 and body == recorded["response"]["body"] and meter2.usage.cost_usd == 0.0
    status, body = post(sock2, "/v1/messages", first)  # a call the recording does not have
    assert status == 400 and "asked for call 2 but the recording has 1" in replay.diverged
    other = ReplayAgent([recorded], "runs/x/trial")
    sock3, _, _ = gw(policy=other)
    changed = anthropic(messages=[{"role": "user", "content": PROMPT.replace("rmsnorm", "softmax")}])
    assert post(sock3, "/v1/messages", changed)[0] == 400
    assert other.diverged.startswith("call 1: message 1 text (numbers masked) differs")


def test_a_recording_of_ablates_own_loop_is_not_replayed_through_the_gateway():
    from ablate.errors import AblateError

    loop_call = {"request": {"system": "", "messages": [], "tools": []}, "response": {"stop_reason": "end"}}
    with pytest.raises(AblateError, match="not recorded through the model gateway"):
        ReplayAgent([loop_call], Path("runs/x"))
