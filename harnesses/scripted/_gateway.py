"""The scripted model behind the gateway: no network, no key, and replies in the agent's own tool
vocabulary, so a whole external-agent trial runs offline.

    Claude Code (Anthropic Messages; Write, Edit, Bash)   Codex (Responses; apply_patch, exec_command)
    any other agent: tools named like bash/shell and write_file/write (or a shell alone: files are
    written with a heredoc), in any of the three formats

Policy "kernel-search" (the scripted model's default) here is short: write the operator's Triton
template (harnesses/scripted/templates, the scripted policy's own), edit its configuration line
to the template's first configuration, write the scripted policy's test script and run it on
kernel.py, then end the turn with what the test said. Policy "actions" plays the model config's
``actions`` ({tool: bash | write_file, args}) in the agent's vocabulary, then ends (for tests).
The step comes from the conversation itself (how many of its tool calls the agent sent back), so
any request can be answered afresh; a request without the agent's tools (a title, a summary) gets
a line of text.
"""
from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable

from ablate.gateway import Outcome, _wire
from ablate.harnesses.scripted._configs import PASSTHROUGH, check_script, template
from ablate.harnesses.scripted._policy import read_task
from ablate.models import Usage

MARK = "ablate"  # in the id of every tool call this model makes


@dataclass
class Vocabulary:
    name: str
    write: Callable[[str, str, str], _wire.Call]  # (id, path, content)
    run: Callable[[str, str], _wire.Call]  # (id, command)
    edit: Callable[[str, str, str, str], _wire.Call] | None = None  # (id, path, old, new)


def _patch(kind: str, path: str, body: list[str]) -> str:
    return "\n".join(["*** Begin Patch", f"*** {kind} File: {path}", *body, "*** End Patch"]) + "\n"


def vocabulary(fmt: str, tools: list[Any], cwd: str) -> Vocabulary | None:
    """The agent's tools for writing a file and running a command, from the request's tool list."""
    by_name = {str(t.get("name") or (t.get("function") or {}).get("name")): t for t in tools if isinstance(t, dict)}

    def at(path: str) -> str:
        return path if path.startswith("/") else f"{cwd.rstrip('/')}/{path}"

    if fmt == "anthropic" and {"Write", "Bash"} <= set(by_name):
        return Vocabulary(
            "claude_code",
            lambda i, p, c: _wire.Call(i, "Write", {"file_path": at(p), "content": c}),
            lambda i, cmd: _wire.Call(i, "Bash", {"command": cmd, "description": "Run the check"}),
            (lambda i, p, old, new: _wire.Call(i, "Edit", {"file_path": at(p), "old_string": old, "new_string": new}))
            if "Edit" in by_name else None)
    if "apply_patch" in by_name and ({"exec_command", "shell"} & set(by_name)):
        custom = by_name["apply_patch"].get("type") == "custom"

        def patch(i: str, text: str) -> _wire.Call:
            return _wire.Call(i, "apply_patch", text if custom else {"input": text}, custom=custom)

        def run(i: str, cmd: str) -> _wire.Call:
            if "exec_command" in by_name:
                return _wire.Call(i, "exec_command", {"cmd": cmd, "yield_time_ms": 30000})
            return _wire.Call(i, "shell", {"command": ["bash", "-lc", cmd]})

        return Vocabulary("codex", lambda i, p, c: patch(i, _patch("Add", p, ["+" + ln for ln in c.rstrip("\n").split("\n")])),
                          run, lambda i, p, old, new: patch(i, _patch("Update", p, ["@@", "-" + old, "+" + new])))
    lower = {n.lower(): n for n in by_name}
    shell = next((lower[n] for n in ("bash", "shell", "run", "exec_command") if n in lower), None)
    write = next((lower[n] for n in ("write_file", "write") if n in lower), None)
    if shell is None:
        return None
    key = "cmd" if shell == "exec_command" else "command"

    def run(i: str, cmd: str) -> _wire.Call:
        return _wire.Call(i, shell, {key: cmd})

    if write:
        return Vocabulary("generic", lambda i, p, c: _wire.Call(i, write, {"path": p, "content": c}), run)
    return Vocabulary("shell", lambda i, p, c: run(i, f"cat > {p} <<'ABLATE_EOF'\n{c.rstrip()}\nABLATE_EOF"), run)


class ScriptedAgent:
    formats = ("anthropic", "chat", "responses")

    def __init__(self, cfg: Mapping[str, Any]):
        self.policy = cfg.get("policy") or "kernel-search"
        self.actions = [dict(a) for a in cfg.get("actions") or []]
        self.model = f"scripted-{self.policy}-v1"

    def prepare(self, fmt: str, body: dict[str, Any]) -> tuple[dict[str, Any], int, dict[str, Any]]:
        return body, 0, {}

    def respond(self, fmt: str, body: dict[str, Any], stream: bool, out: Any, headers: Any = None) -> Outcome:
        reply = self.reply(fmt, body)
        rendered = _wire.render(fmt, reply, self.model)
        _wire.send(out, fmt, rendered, stream)
        return Outcome(200, rendered, reply.usage)

    def reply(self, fmt: str, body: dict[str, Any]) -> _wire.Reply:
        system, messages, _ = _wire.request_view(fmt, body)
        text = "\n".join(m.content for m in messages if m.role in ("user", "system"))
        found = re.search(r"(?:Primary working directory|<cwd>):?\s*([^\s<]+)", f"{system}\n{text}")
        cwd = found.group(1) if found else "/workspace"
        vocab = vocabulary(fmt, body.get("tools") or [], cwd)
        done = [c for m in messages if m.role == "assistant" for c in m.tool_calls if MARK in c.id]
        results = {m.tool_call_id: m.content for m in messages if m.role == "tool"}
        steps = self._plan(text, vocab) if vocab else []
        if not vocab:
            say, calls = "ablate's scripted model has nothing to do here.", []
        elif len(done) < len(steps):
            say, call = steps[len(done)]
            calls = [call(f"{'toolu' if fmt == 'anthropic' else 'call'}_{MARK}_{len(done):02d}")]
        else:
            last = results.get(done[-1].id, "") if done else ""
            found = re.findall(r"^RESULT .*$", last, re.M)
            say, calls = f"Done. {found[-1] if found else last.strip()[-300:]}".strip(), []
        prompt_chars = len(json.dumps(body))
        reply = _wire.Reply(say, calls)
        reply.usage = Usage(input_tokens=max(1, prompt_chars // 4),
                            output_tokens=max(1, (len(say) + len(json.dumps([c.input for c in calls]))) // 4), calls=1)
        return reply

    def _plan(self, prompt: str, v: Vocabulary) -> list[tuple[str, Callable[[str], _wire.Call]]]:
        """(what it says, the tool call given its id) for each step, in order."""
        if self.policy == "actions":
            steps = []
            for a in self.actions:
                args = dict(a.get("args") or {})
                if a.get("tool") == "bash":
                    steps.append((f"Running {args.get('command')!r}.", lambda i, c=str(args.get("command")): v.run(i, c)))
                elif a.get("tool") == "write_file":
                    steps.append((f"Writing {args.get('path')}.", lambda i, p=str(args.get("path")),
                                  c=str(args.get("content")): v.write(i, p, c)))
                else:
                    raise ValueError(f"scripted action {a.get('tool')!r}: the gateway plays bash and write_file")
            return steps
        task = read_task(prompt)
        found = template(task.operator)
        if found is None:
            return [("No template for this operator; writing a fallback.",
                     lambda i: v.write(i, "kernel.py", PASSTHROUGH))]
        source, configs = found
        line = re.search(r"^CONFIG = .*$", source, re.M).group(0)
        config_line = f"CONFIG = {configs[0]!r}"
        check = check_script(task.operator, configs[:1], 60, [])
        steps = [(f"Writing the {task.operator} template.", lambda i: v.write(i, "kernel.py", source))]
        if v.edit is not None:
            steps.append(("Setting its configuration.", lambda i: v.edit(i, "kernel.py", line, config_line)))
        else:
            steps.append(("Setting its configuration.",
                          lambda i: v.write(i, "kernel.py", source.replace(line, config_line, 1))))
        steps += [("Writing a test.", lambda i: v.write(i, "check.py", check)),
                  ("Testing kernel.py.", lambda i: v.run(i, "python check.py kernel.py"))]
        return steps
