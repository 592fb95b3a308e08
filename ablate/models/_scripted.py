"""The `scripted` model: a deterministic, non-LLM policy. The offline default and a control arm.

Policy "kernel-search": read the task, write a Triton kernel from a parameterised template
(``scripted_templates/<operator>.py``, outside every agent workspace) and try its configurations
with whatever the harness offers, using each mechanism for real:
- knowledge: looks up the operator in the wiki and tries the configurations a table there
  recommends first (``configs_from_knowledge``, ``choose_configs``);
- workflow: writes each phase's draft and plan, takes every configuration through implement,
  validate and measure, and decides keep / revise / reject by the controller's measurements;
- search: registers each configuration as a candidate with its parent and change;
- profiler: profiles the first correct kernel and cites the diagnosis as the evidence of its
  optimisation direction;
- evaluate tool: tests with it instead of writing a check script of its own (goal-only does that);
- reviewer: when a reviewer objects that the final kernel.py was not tested after its last
  change, tests it and submits again.
Asked without tools (a review request) it reviews for real: evidence on the final file, masks,
no call into the reference. Policy "actions": play a fixed list of tool calls (for tests), then submit.

The policy is a straight-line function replayed from the start on every turn: each tool call
has a stable id, and a call already answered returns its recorded result, so decisions depend
only on what the tools said.
"""
from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ablate.errors import AblateError
from ablate.models._protocol import Message, Response, ToolCall, ToolSpec, Usage

TEMPLATES = Path(__file__).resolve().parent / "scripted_templates"
POLICIES = ("kernel-search", "actions")
MARGIN = 0.02  # the same "measurably faster" as the harness's own rule

# The goal-only agent's own test: correctness on the public shapes against reference.py, then
# a median time. Prints one RESULT line the policy reads back.
CHECK_SCRIPT = '''\
import json, math, statistics, time
import torch
from reference import example_inputs, reference
from kernel import kernel

device = "cuda" if torch.cuda.is_available() else "cpu"
ok, worst, times = True, 0.0, []
for shape in json.load(open("shapes.json")):
    dims = {k: v for k, v in shape.items() if k != "dtype"}
    for seed in (1, 2):
        inputs = example_inputs(**dims, device=device, seed=seed)
        got, want = kernel(*inputs), reference(*inputs)
        got = got if isinstance(got, tuple) else (got,)
        want = want if isinstance(want, tuple) else (want,)
        for g, w in zip(got, want):
            worst = max(worst, (g.float() - w.float()).abs().max().item())
            ok = ok and g.shape == w.shape and torch.allclose(g.float(), w.float(), atol=2e-2, rtol=2e-2)
    if device == "cuda":
        from triton.testing import do_bench
        times.append(do_bench(lambda: kernel(*inputs), return_mode="median"))
    else:
        samples = []
        for _ in range(3):
            t = time.perf_counter(); kernel(*inputs); samples.append((time.perf_counter() - t) * 1e3)
        times.append(statistics.median(samples))
ms = math.exp(sum(math.log(t) for t in times) / len(times))
print(f"RESULT correct={int(ok)} max_err={worst:.3g} ms={ms:.6g}")
'''

PASSTHROUGH = '''\
# No template for this operator: the scripted policy falls back to the reference itself, which the
# evaluator rejects as a library passthrough (it is not a kernel of the agent's own).
from reference import reference as kernel
'''


def _tokens(text: str) -> int:
    return max(1, len(text) // 4)


# -- template rendering ------------------------------------------------------------------------
def template(operator: str) -> tuple[str, list[dict[str, Any]]] | None:
    """(source, configs) of the operator's template, or None if there is none."""
    path = TEMPLATES / f"{operator.split('/')[-1]}.py"
    if not path.is_file():
        return None
    source = path.read_text()
    first = source.splitlines()[0]
    if not first.startswith("# scripted-configs:"):
        raise ValueError(f"{path}: first line must be '# scripted-configs: [...]'")
    return source, json.loads(first.split(":", 1)[1])


def render(source: str, config: dict[str, Any]) -> str:
    """The template with its CONFIG line set to one configuration."""
    out, n = re.subn(r"^CONFIG = .*$", f"CONFIG = {config!r}", source, count=1, flags=re.M)
    if n != 1:
        raise ValueError("template has no 'CONFIG = ...' line")
    return out


# -- choice of configuration ----------------------------------------------------------------
def configs_from_knowledge(search_output: str, keys: set[str]) -> list[dict[str, Any]]:
    """Configurations recommended by the tables of knowledge-base search results: every table
    whose columns name all of the template's keys ("num warps" -> num_warps), row by row."""
    try:
        hits = json.loads(search_output)
    except (json.JSONDecodeError, TypeError):
        return []
    found: list[dict[str, Any]] = []
    for hit in hits if isinstance(hits, list) else []:
        rows = [[c.strip() for c in line.strip().strip("|").split("|")]
                for line in str(hit.get("text", "")).splitlines() if line.strip().startswith("|")]
        if len(rows) < 3:
            continue
        header = [re.sub(r"\W+", "_", h.lower()).strip("_") for h in rows[0]]
        if not keys <= set(header):
            continue
        for row in rows[2:]:
            try:
                config = {k: int(row[header.index(k)]) for k in keys}
            except (ValueError, IndexError):
                continue
            if config not in found:
                found.append(config)
    return found


def choose_configs(configs: list[dict[str, Any]], recommended: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The order to try the template's configurations in: recommended ones first."""
    first = [configs[configs.index(c)] for c in recommended if c in configs]  # the template's own dicts (key order)
    return first + [c for c in configs if c not in first]


# -- the review a scripted reviewer gives ----------------------------------------------------
def review(request: str) -> str:
    """APPROVE, or REVISE with numbered objections: evidence on the exact file, masks, no reference call."""
    evidence = request.split("Evidence since kernel.py last changed:", 1)[-1].split("Objections from earlier", 1)[0]
    kernel = request.split("under review", 1)[-1].split("Evidence since", 1)[0]
    objections = []
    if "none: kernel.py was not tested" in evidence:
        objections.append("kernel.py was not tested after its last change: run the correctness check and the "
                          "timing on this exact file, then submit again.")
    if "from reference import" in kernel or "reference(" in kernel.split("def kernel", 1)[-1]:
        objections.append("kernel.py calls the reference instead of computing the operator itself.")
    if "tl.load" in kernel and "mask" not in kernel:
        objections.append("loads are not masked: rows whose length is not a multiple of the block read past the end.")
    if objections:
        return "REVISE\n" + "\n".join(f"{i}. {o}" for i, o in enumerate(objections, 1))
    return "APPROVE\nThe final kernel was tested after its last change; loads are masked and nothing calls the reference."


@dataclass
class _Next(Exception):
    text: str
    call: ToolCall


class _Script:
    """Replays the policy: ``act`` returns a recorded tool result, or raises the next call."""

    def __init__(self, results: dict[str, tuple[str, bool]]):
        self.results, self.n = results, 0

    def act(self, text: str, tool: str, **args) -> tuple[str, bool]:
        cid = f"s{self.n}-{tool}"
        self.n += 1
        if cid in self.results:
            return self.results[cid]
        raise _Next(text, ToolCall(cid, tool, args))


@dataclass
class _Task:
    operator: str
    turns: int
    shapes: int


def _task(prompt: str) -> _Task:
    """The facts the policy needs from the task statement (harnesses/prompts/task.md)."""
    operator = m.group(1) if (m := re.search(r"^Operator: (\S+)", prompt, re.M)) else "unknown"
    turns = int(m.group(1)) if (m := re.search(r"^Budget: (\d+) turns", prompt, re.M)) else 40
    shapes = re.search(r"^(?:Public shapes|Shapes)[^:]*: (\[.*\])$", prompt, re.M)
    return _Task(operator, turns, len(json.loads(shapes.group(1))) if shapes else 1)


class ScriptedModel:
    def __init__(self, policy: str = "kernel-search", actions: list[dict[str, Any]] | None = None):
        self.policy = policy
        self.actions = list(actions or [])
        self.id = f"scripted-{policy}-v1"

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> "ScriptedModel":
        cls.preflight(cfg)
        return cls(cfg.get("policy") or "kernel-search", [dict(a) for a in cfg.get("actions") or []])

    @classmethod
    def preflight(cls, cfg: Mapping[str, Any]) -> None:
        if (cfg.get("policy") or "kernel-search") not in POLICIES:
            raise AblateError(f"unknown scripted policy {cfg.get('policy')!r}; valid policies: {', '.join(POLICIES)}")

    def max_cost_of_next_call(self, system, messages, tools) -> float:
        return 0.0

    def generate(self, system: str, messages: list[Message], tools: list[ToolSpec]) -> Response:
        if not tools:
            text, calls = review(messages[-1].content if messages else ""), []
        else:
            if self.policy == "actions":
                step = sum(1 for m in messages if m.role == "assistant" and m.tool_calls)
                text, call = self._next_action(step)
            else:
                text, call = self._kernel_search(messages, {t.name for t in tools})
            calls = [call] if call else []
        prompt_chars = len(system) + sum(len(m.content) for m in messages)
        usage = Usage(input_tokens=_tokens(" " * prompt_chars), output_tokens=_tokens(text + json.dumps([c.arguments for c in calls])), calls=1)
        return Response(text=text, tool_calls=calls, usage=usage, stop_reason="tool_use" if calls else "end")

    def _next_action(self, step: int) -> tuple[str, ToolCall | None]:
        if step < len(self.actions):
            a = self.actions[step]
            return f"action {step}", ToolCall(f"a{step}", a["tool"], dict(a.get("args", {})))
        if step == len(self.actions):
            return "submitting", ToolCall(f"a{step}", "submit", {})
        return "done", None

    def _kernel_search(self, messages: list[Message], tools: set[str]) -> tuple[str, ToolCall | None]:
        results = {m.tool_call_id: (m.content, m.is_error) for m in messages if m.role == "tool"}
        try:
            _Policy(_Script(results), _task(messages[0].content), tools).run()
        except _Next as nxt:
            return nxt.text, nxt.call
        return "Done: the harness did not accept the submission and there is nothing left to try.", None


class _Policy:
    """One trial of the kernel-search policy, as straight-line code over the tools' answers."""

    def __init__(self, script: _Script, task: _Task, tools: set[str]):
        self.s, self.task, self.tools = script, task, tools
        self.workflow, self.search, self.evaluate = "workflow" in tools, "candidate" in tools, "evaluate" in tools
        self.own_check = not (self.workflow or self.search or self.evaluate)  # goal-only: its own test script
        self.kept_ms: float | None = None
        self.diagnosis: list[str] = []
        self.benefit = "medium"  # of the optimisation direction, until a profile says otherwise

    def run(self) -> None:
        act, op = self.s.act, self.task.operator
        act("Looking at the workspace.", "list_files", path=".")
        act("Reading the definition.", "read_file", path="reference.py")
        found = template(op)
        configs = found[1] if found else []
        if "search_knowledge" in self.tools:
            out, _ = act("Looking up starting configurations in the knowledge base.", "search_knowledge",
                         query=f"{op.replace('_', ' ')} starting configurations num warps")
            configs = choose_configs(configs, configs_from_knowledge(out, set(configs[0]) if configs else set()))
        if self.workflow:
            self._plan_phase("correct", configs[:1])
        if found is None:
            act("No template for this operator; writing a fallback.", "write_file", path="kernel.py", content=PASSTHROUGH)
            self._try(0, PASSTHROUGH, "the reference as a fallback")
            return self._finish(PASSTHROUGH)
        source = found[0]
        if self.own_check:
            act("Writing a test script.", "write_file", path="check.py", content=CHECK_SCRIPT)
        configs = configs[: self._fits(len(configs))]
        scores: list[float | None] = []
        for i, config in enumerate(configs):
            if self.workflow and i == 1:
                self._next_phase("a correct kernel is kept")
                self._plan_phase("optimise", configs[1:])
            scores.append(self._try(i, render(source, config), f"configuration {config}"))
            if i == 0 and "profile" in self.tools and scores[0] is not None:
                out, err = act("Profiling the first correct version.", "profile")
                if not err:  # the profile's diagnosis and its top recommendation rank the optimisation direction
                    report = json.loads(out)
                    self.diagnosis = report.get("diagnosis", [])
                    self.benefit = (report.get("recommendations") or [{}])[0].get("expected_benefit", "medium")
        valid = [(s, i) for i, s in enumerate(scores) if s is not None]
        best = self._incumbent(scores) if valid else 0
        self._finish(render(source, configs[best]) if configs else PASSTHROUGH, last=len(configs) - 1 == best)

    # -- one configuration through every mechanism the harness has ------------------------------
    def _try(self, i: int, kernel: str, what: str) -> float | None:
        act = self.s.act
        act(f"Trying {what}.", "write_file", path="kernel.py", content=kernel)
        score = None
        if self.evaluate:
            out, _ = act(f"Evaluating {what}.", "evaluate")
            score = _evaluated_ms(out)
        if self.own_check:
            out, _ = act(f"Testing {what}.", "bash", command="python check.py")
            score = _checked_ms(out)
        if self.search:
            out, _ = act(f"Keeping {what} as a candidate.", "candidate", change=what, parent=f"c{i}" if i else "")
            score = _measured_ms(out, "evidence") if not self.workflow else score
        if self.workflow:
            out, err = act(f"Handing {what} to the workflow controller.", "workflow", action="advance")
            ms = _workflow_ms(out) if not err else None
            if ms is not None and (self.kept_ms is None or ms < self.kept_ms * (1 - MARGIN)):
                act("Keeping it.", "workflow", action="decide", decision="keep",
                    reason=f"{what}: correct and {ms:.4g} ms, faster than the kept candidate")
                self.kept_ms = ms
            elif ms is not None:
                act("Not keeping it.", "workflow", action="decide", decision="revise",
                    reason=f"{what}: {ms:.4g} ms, not measurably faster than the kept {self.kept_ms:.4g} ms")
            else:
                act("Rejecting it.", "workflow", action="decide", decision="reject",
                    reason=f"{what}: incorrect on the public shapes or failed to run")
            score = ms
        return score

    def _incumbent(self, scores: list[float | None]) -> int:
        """The configuration the harness would keep: in order, a faster one replaces only beyond the margin."""
        best = None
        for i, s in enumerate(scores):
            if s is not None and (best is None or s < scores[best] * (1 - MARGIN)):
                best = i
        return best if best is not None else 0

    def _fits(self, n: int) -> int:
        """How many configurations the turn budget leaves room for (every model call is a turn)."""
        per = 1 + self.evaluate + self.own_check + self.search + 2 * self.workflow
        fixed = 2 + ("search_knowledge" in self.tools) + self.own_check + ("profile" in self.tools) + 16 * self.workflow
        tail = 6  # final write, submit; a review round, a test, a resubmit, a second review
        return max(min(n, 1 + self.workflow), min(n, (self.task.turns - fixed - tail) // per))

    # -- workflow documents -----------------------------------------------------------------
    def _plan_phase(self, phase: str, configs: list[dict[str, Any]]) -> None:
        act = self.s.act
        evidence = "; ".join(self.diagnosis[:2]) or "the first kernel's measurement"
        # One direction: the template's launch configuration, iterated over the configurations left.
        benefit = self.benefit
        directions = (f"| launch configuration: {', '.join(map(str, configs))} | {benefit} | low | {evidence} |"
                      if configs else f"| none left in the template bank | low | low | {evidence} |")
        draft = (f"# Draft: {self.task.operator}, phase {phase}\n\n## Baseline\nThe template kernel with one "
                 f"configuration, validated by the controller on the public shapes.\n\n## Risks\nA configuration "
                 f"can be slower or fail to compile.\n\n## Directions\n| direction | benefit | risk | evidence |\n"
                 f"|---|---|---|---|\n{directions}\n\n## Steps\n1. Write the configuration.\n2. Advance.\n\n"
                 f"## Validation\nThe controller's measurement on every public shape.\n\n## Evidence\nKeep a "
                 f"candidate only when it is correct and measurably faster.\n")
        act(f"Writing the {phase} draft.", "write_file", path="docs/draft.md", content=draft)
        act("Checking the draft.", "workflow", action="advance")
        plan = (f"# Plan: phase {phase}\n\n1. Implement one configuration at a time.\n2. Advance: the controller "
                f"validates and measures.\n3. Decide with the measurement.\n\n## Acceptance\nCorrect on every public "
                f"shape; kept only when faster beyond the noise.\n")
        act(f"Writing the {phase} plan.", "write_file", path="docs/plan.md", content=plan)
        act("Checking the plan.", "workflow", action="advance")

    def _next_phase(self, reason: str) -> None:
        self.s.act("Ending this phase.", "workflow", action="next_phase", reason=reason)

    def _finish(self, final: str, last: bool = True) -> None:
        act = self.s.act
        if self.workflow:  # end the current phase, then draft, plan and end each remaining one
            status = json.loads(act("Where is the workflow?", "workflow", action="status")[0])
            phases, current = status.get("phases", []), status.get("phase")
            for name in phases[phases.index(current):] if current in phases else []:
                if name != current:
                    self._plan_phase(name, [])
                why = {"correct": "a correct kernel is kept", "optimise": "every configuration in the budget was tried",
                       "specialise": "no shape-specialised variant in this policy's template bank"}.get(name, name)
                self._next_phase(why)
        if not last:
            act("Restoring the best configuration.", "write_file", path="kernel.py", content=final)
        for _ in range(3):
            out, err = act("Submitting.", "submit")
            if not err:
                return
            if "not tested after its last change" in out:  # the reviewer's objection: test the exact file
                if self.evaluate:
                    act("Testing the final kernel, as the reviewer asked.", "evaluate")
                elif self.own_check:
                    act("Testing the final kernel, as the reviewer asked.", "bash", command="python check.py")
                elif self.search:
                    act("Measuring the final kernel, as the reviewer asked.", "candidate", change="the final kernel, re-measured")


def _evaluated_ms(output: str) -> float | None:
    try:
        result = json.loads(output)
    except json.JSONDecodeError:
        return None
    times = [s["time_ms"]["median"] for s in result.get("shapes", []) if s.get("time_ms")]
    if result.get("verdict") != "accepted" or not times:
        return None
    return math.exp(sum(math.log(t) for t in times) / len(times))


def _checked_ms(output: str) -> float | None:
    m = re.search(r"RESULT correct=(\d) max_err=\S+ ms=(\S+)", output)
    return float(m.group(2)) if m and m.group(1) == "1" else None


def _measured_ms(output: str, key: str) -> float | None:
    try:
        ev = json.loads(output).get(key) or {}
    except (json.JSONDecodeError, AttributeError):
        return None
    return ev.get("ms") if ev.get("correct") else None


def _workflow_ms(output: str) -> float | None:
    m = re.search(r'validated and measured: (\{.*\})\. Next', json.loads(output).get("result", ""), re.S)
    if not m:
        return None
    r = json.loads(m.group(1))
    return r.get("ms") if r.get("correct") else None
