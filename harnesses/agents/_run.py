"""One external agent's run: its sandbox, its gateway, its budget, and the AgentResult that makes its
record read like ablate's own loop's (end_reason, turns, usage, spent, the transcript).

    result = run(agent, model, task, ws, budget, model_config, progress, after_tool)

The agent runs in the workspace's bubblewrap confinement with three more mounts (its home, its
program, the gateway's socket folder), its model calls go through the gateway, and it ends when it
exits by itself ("submitted": its kernel.py is judged), when the gateway refuses a call past a
budget or a time limit passes (the budget's name; the whole sandbox is killed), or when it fails
("agent_error"; after the model API failed, ProviderOutage: the runner retries the trial).
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from ablate import gateway
from ablate.errors import AblateError
from ablate.models import Message, ProviderOutage, ToolCall, Usage
from ablate.models import _pricing
from ablate.sandbox import _bwrap
from ablate.harnesses import _documents
from ablate.harnesses._loop import AgentResult, Spend
from ablate.harnesses.agents._agents import HOME, External

PROMPT = "agents/prompt.md"  # what an external agent is told besides the task (harnesses/agents/prompt.md)
POLL_S = 0.2
CEILING_S = 6 * 3600.0  # a run with no wall budget still ends
KEEP = 4000  # characters of the agent's stderr kept in the record


def prompt(task_prompt: str, agent: str) -> str:
    return _documents.text(PROMPT).format(task=task_prompt, agent=agent).strip()


class _Transcript:
    """The conversation as the record's transcript holds ablate's own: the prompt, then for each
    model call the tool results it carried and the reply."""

    def __init__(self, result: AgentResult):
        self.result, self.seen = result, set()

    def add(self, call: dict[str, Any]) -> None:
        msgs = call["request"]["messages"]
        tail = []
        for m in reversed(msgs):
            if m.get("role") != "tool":
                break
            tail.append(m)
        for m in reversed(tail):
            if m.get("tool_call_id") not in self.seen:
                self.seen.add(m.get("tool_call_id"))
                self.result.messages.append(Message("tool", str(m.get("content", "")), tool_call_id=m.get("tool_call_id"),
                                                    is_error=bool(m.get("is_error"))))
        r = call["response"]
        calls = [ToolCall(str(c.get("id")), str(c.get("name")), c.get("arguments") or {}) for c in r.get("tool_calls") or []]
        self.result.messages.append(Message("assistant", str(r.get("text") or ""), calls))


def _record(model: Any, call: dict[str, Any]) -> None:
    """Hand a gateway call to the trial's recorder (ablate.models.Recorder: its calls, its usage, and
    its ``recorded`` hook, which the trial streams to model_calls.jsonl)."""
    model.calls.append(call)
    model.usage = model.usage + Usage.from_dict(call["response"]["usage"])
    provider = getattr(model, "model", None)
    if call["request"].get("forwarded") and isinstance(getattr(provider, "attempts", None), int):
        provider.attempts += 1  # the record's count of API requests: each forwarded call is one
    if hasattr(model, "recorded"):
        model.recorded(call)


def _last_result(stream: Path) -> dict[str, Any] | None:
    """The agent's own last JSON line on stdout (Claude Code's "result", Codex's "turn.completed")."""
    try:
        with open(stream, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 65536))
            lines = f.read().decode(errors="replace").strip().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            d = json.loads(line)
        except ValueError:
            continue
        if isinstance(d, dict):
            return {k: d.get(k) for k in ("type", "subtype", "is_error", "num_turns", "error") if k in d}
    return None


def run(agent: External, model: Any, task: Any, ws: Any, budget: Any, model_config: dict[str, Any] | None,
        progress=None, after_tool=None) -> AgentResult:
    cfg = dict(model_config or {})
    if ws.confinement != "bwrap":
        raise AblateError(f"agent {agent.name} runs only in the bwrap sandbox (its gateway's port lives in the "
                          f"sandbox's own network namespace); remove sandbox.confinement=none")
    model_id = str(cfg.get("id") or getattr(model, "id", "model"))
    agent.check(cfg.get("provider"), cfg.get("name") or model_id)
    policy = gateway.policy_for(cfg, getattr(model, "model", None))
    meter = gateway.Meter(budget, _pricing.prices(cfg, model_id, required=False), gpu=ws.gpu_visible)
    text = prompt(task.prompt(budget), agent.name)
    result = AgentResult(messages=[Message("user", text)], end_reason="")
    state = SimpleNamespace(result=result)
    transcript, lock = _Transcript(result), threading.Lock()

    def sync() -> None:
        result.turns, result.usage = meter.turns, meter.usage

    def on_call(call: dict[str, Any]) -> None:
        with lock:
            _record(model, call)
            transcript.add(call)
            sync()
            if progress:
                progress(result)

    def on_request(fmt: str, body: dict[str, Any]) -> None:
        if after_tool:
            with lock:
                sync()
                after_tool(state, "")

    gw = gateway.Gateway(policy, meter, on_call=on_call, on_request=on_request)
    trial_dir = ws.path.parent
    home = trial_dir / "agent_home"
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir()
    # the model the agent is told it runs: the configured one; a scripted or replayed run's own
    name = policy.model.removeprefix("replay:") if cfg.get("provider") in ("scripted", "replay") else model_id
    agent.prepare(home, name, ws.limits.command_timeout_s)
    _bwrap.chown_tree(home, ws.uid)
    # the socket's folder: the runner's and the sandbox's alone (other users of the machine would
    # otherwise reach the trial's model through it)
    sockdir = Path(tempfile.mkdtemp(prefix="ablate-gw-"))
    _bwrap.chown_tree(sockdir, ws.uid)
    stream, errors = trial_dir / "agent_stdout.jsonl", trial_dir / "agent_stderr.log"
    proc = None
    try:
        gw.serve_unix(str(sockdir / Path(gateway.bridge.SOCKET).name))
        inner = gateway.bridge.command(agent.argv(text, name))
        binds = [(ws.path, _bwrap.INNER, True), (home, HOME, True), (sockdir, str(Path(gateway.bridge.SOCKET).parent), False)]
        binds += [(Path(host), inside, False) for host, inside in agent.binds()]
        lim = ws.limits
        argv = sandbox_argv(ws, binds) + _bwrap.launcher(lim.cpu_s, lim.max_processes, lim.max_file_bytes, ws.uid, inner)
        base = ws.env()
        env = {**base, **agent.env(name, lim.command_timeout_s, base["PATH"])}
        # A login shell (Codex runs `bash -lc`) resets PATH in /etc/profile; the profile puts back
        # the sandbox's, so the agent's shell finds the runner's Python as ablate's own shell does.
        profile = home / ".bash_profile"
        profile.write_text(f"# ablate: login shells keep the sandbox's PATH\nexport PATH={shlex.quote(env['PATH'])}\n")
        _bwrap.chown_tree(profile, ws.uid)
        deadline = time.monotonic() + (budget.wall_s if budget.wall_s is not None else CEILING_S)
        with open(stream, "wb") as out, open(errors, "wb") as err:
            proc = subprocess.Popen(argv, cwd=str(ws.path), env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                    start_new_session=True, close_fds=True)
            while proc.poll() is None:
                time.sleep(POLL_S)
                limit = meter.stopped or meter.over()
                if limit is None and time.monotonic() >= deadline:
                    limit = "wall_s"
                if limit or getattr(policy, "diverged", None):
                    if limit:
                        meter.stop(limit)
                    _kill(proc)
                    proc.wait()
    finally:
        if proc is not None and proc.poll() is None:
            _kill(proc)
            proc.wait()
        gw.close()
        shutil.rmtree(sockdir, ignore_errors=True)
        if hasattr(policy, "close"):
            policy.close()
    with lock:
        sync()
        if after_tool:
            after_tool(state, "")
    if getattr(policy, "diverged", None):
        raise AblateError(f"replay diverged: {policy.diverged}")
    rc = proc.returncode
    tail = errors.read_bytes()[-KEEP:].decode(errors="replace") if errors.exists() else ""
    result.events = list(meter.events) + [{"event": "exit", "code": rc, "agent": _last_result(stream),
                                           "stderr_tail": tail[-1000:]}]
    if meter.stopped:
        result.end_reason = meter.stopped
    elif rc == 0:
        result.end_reason, result.submitted = "submitted", True
    elif gw.last_failure == "outage":
        raise ProviderOutage(f"agent {agent.name} ended (exit {rc}) after the model API failed: "
                             f"{tail.strip().splitlines()[-1:] or ['no stderr']}")
    else:
        result.end_reason = "agent_error"
    result.wall_s = meter.wall_s()
    result.tool_s, result.gpu_s = meter.tool_s(), meter.gpu_s()
    result.spent = {"agent": Spend(model_calls=meter.turns, tokens=meter.usage.total_tokens, cost_usd=meter.usage.cost_usd,
                                   tool_calls=meter.tool_calls, tool_s=result.tool_s, gpu_s=result.gpu_s)}
    return result


def sandbox_argv(ws: Any, binds: list[tuple[Path, str, bool]]) -> list[str]:
    """The workspace's bwrap command line with more mounts. Folders the mounts need that the new
    root lacks (/home, /opt/ablate, /run) are made first, traversable by the sandbox's uid."""
    hidden = _bwrap.project_paths() + [Path(h).resolve() for h in ws.limits.hide]
    argv = _bwrap.argv(ws.bwrap, [], ws.mode, ws.gpu_visible, hidden, ws.limits.tmp_bytes, chdir=_bwrap.INNER)
    at = argv.index("--remount-ro")
    perms = ["--perms", "0755"] if "--perms" in _bwrap.version(ws.bwrap)[1] else []
    made, extra = set(), []
    for _, inner, _ in binds:
        for parent in reversed(Path(inner).parents):
            if str(parent) not in ("/", "/tmp") and parent not in made:
                made.add(parent)
                extra += [*perms, "--dir", str(parent)]
    for host, inner, writable in binds:
        extra += ["--bind" if writable else "--ro-bind", str(host), inner]
    return argv[:at] + extra + argv[at:]


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # bwrap and everything in its sandbox (it dies with its parent)
    except (ProcessLookupError, PermissionError):
        proc.kill()
