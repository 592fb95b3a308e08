"""The kernel-search policy: one trial of the scripted model, as straight-line code over the tools' answers.

Read the task; take the operator's template (_configs); look up starting configurations in the
wiki when the harness has it; sweep the configurations with the policy's own test script (every
arm has a shell), within a share of the trial's time budget; then either let its own test decide
(goal-only: the best robust configuration, dispatching shapes to others when the test confirms it
pays) or take the sweep's best through the harness's measurements (_tools: evaluate, candidates,
the workflow's phases), as many as the turns allow. No template: the reference as a fallback.

The policy is replayed from the start on every turn (``next_call``): each tool call has a stable
id, and a call already answered returns its recorded result, so decisions depend only on what the
tools said and on the seed.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from ablate.harnesses.mechanisms._measure import improves
from ablate.harnesses.scripted._configs import (PASSTHROUGH, VARIANT_LOSS, Swept, check_script, choose_configs,
                                                configs_from_knowledge, dispatch_wins, render, robust, shape_key,
                                                template, variants)
from ablate.harnesses.scripted._tools import MechanismTools, checked
from ablate.models import Message, ToolCall, ToolSpec

SWEEP_SHARE = 0.05  # of the trial's tightest time budget (tool, GPU or wall seconds) the sweep may take
SWEEP_MAX_S = 150.0
SWEEP_MIN_S = 20.0
CPU_CONFIGS = 3  # configurations swept under Triton's CPU interpreter, whose timings mean little


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
class TaskFacts:
    operator: str
    turns: int
    shapes: list[dict[str, Any]]
    gpu: bool
    seconds: dict[str, float] = field(default_factory=dict)  # the budget's time limits: tool, gpu, wall


def read_task(prompt: str) -> TaskFacts:
    """The facts the policy needs from the task statement (harnesses/prompts/task.md)."""
    operator = m.group(1) if (m := re.search(r"^Operator: (\S+)", prompt, re.M)) else "unknown"
    budget = m.group(1) if (m := re.search(r"^Budget: (.*)$", prompt, re.M)) else ""
    turns = int(m.group(1)) if (m := re.search(r"(\d+) turns", budget)) else 40
    seconds = {name: float(m.group(1)) for name, unit in (("wall", "s wall time"), ("tool", "s of tool time"),
                                                          ("gpu", "GPU-seconds"))
               if (m := re.search(rf"([\d.e+]+) {unit}", budget))}
    shapes = re.search(r"^(?:Public shapes|Shapes)[^:]*: (\[.*\])$", prompt, re.M)
    gpu = bool(re.search(r"^Target: an NVIDIA GPU", prompt, re.M))
    return TaskFacts(operator, turns, json.loads(shapes.group(1)) if shapes else [], gpu, seconds)


class Policy(MechanismTools):
    """One trial of the kernel-search policy, as straight-line code over the tools' answers."""

    def __init__(self, script: _Script, task: TaskFacts, tools: dict[str, ToolSpec], system: str, seed: int):
        self.s, self.task, self.tools, self.seed = script, task, set(tools), seed
        self.workflow, self.search, self.evaluate = "workflow" in tools, "candidate" in tools, "evaluate" in tools
        self.measured = self.workflow or self.search or self.evaluate  # a harness measurement to decide by
        m = re.search(r"killed after ([\d.]+) seconds", tools["bash"].description) if "bash" in tools else None
        self.command_s = float(m.group(1)) if m else 300.0
        m = re.search(r"at most (\d+) iterations per direction", system)
        self.per_direction = int(m.group(1)) if m else 5
        self.kept: dict[str, Any] | None = None  # the workflow's kept candidate: config, ms, shapes_ms
        self.diagnosis: list[str] = []
        self.benefit = "medium"  # of the optimisation direction, until a profile says otherwise
        self.sweep_note = ""
        self.source = ""
        self.ids: dict[str, str] = {}  # configuration (as JSON) -> its candidate id in the search's lineage

    # -- the plan --------------------------------------------------------------------------
    def run(self) -> None:
        act, op = self.s.act, self.task.operator
        act("Looking at the workspace.", "list_files", path=".")
        act("Reading the definition.", "read_file", path="reference.py")
        found = template(op)
        if found is None:
            return self._fallback()
        self.source, configs = found
        recommended = []
        if "search_knowledge" in self.tools:
            out, _ = act("Looking up starting configurations in the knowledge base.", "search_knowledge",
                         query=f"{op.replace('_', ' ')} starting configurations num warps")
            recommended = configs_from_knowledge(out, configs[0])
        order = choose_configs(configs, recommended, self.seed)
        swept = self._sweep(order)
        if self.measured:
            return self._measured_search(order, swept)
        correct = [r for r in swept if r.correct]
        default = self._incumbent(robust(correct))
        self._own_search(default, self._dispatch(default, correct) if default else {}, order[0])

    def _sweep(self, order: list[dict[str, Any]]) -> list[Swept]:
        """Write the template and the test script, run the sweep, read its results."""
        act = self.s.act
        budget = [v for k, v in self.task.seconds.items() if k in ("tool", "gpu", "wall")]
        seconds = min(SWEEP_MAX_S, max(SWEEP_MIN_S, SWEEP_SHARE * min(budget))) if budget else SWEEP_MAX_S
        seconds = round(min(seconds, max(SWEEP_MIN_S, self.command_s - 120)))
        listed = order if self.task.gpu else order[:CPU_CONFIGS]
        extra = variants(self.task.shapes) if self.task.gpu else []  # interpreter timings cannot rank them
        act("Writing the parameterised kernel.", "write_file", path="template.py", content=self.source)
        act("Writing a test and search script.", "write_file", path="check.py",
            content=check_script(self.task.operator, listed, seconds, extra))
        out, _ = act(f"Searching {len(listed)} configurations for at most {seconds} s.", "bash",
                     command="python check.py sweep")
        swept = {}
        for m in re.finditer(r"^RESULT correct=(\d) (?:max_err=\S+ ms=(\S+) shapes_ms=(\[[^\]]*\])"
                             r"(?: variants_ms=(\[[^\]]*\]))?|error=\S+) config=(\d+)", out, re.M):
            i, ok = int(m.group(5)), m.group(1) == "1" and m.group(3) is not None
            if i < len(listed) and i not in swept:  # a crash reported after a partial line counts once
                swept[i] = Swept(i, listed[i], ok, float(m.group(2)) if ok else None, json.loads(m.group(3)) if ok else [],
                                  json.loads(m.group(4)) if ok and m.group(4) else [])
        swept = list(swept.values())
        ok = [r for r in swept if r.correct]
        kept = robust(ok)
        best = self._incumbent(kept)
        fragile = [r.config for r in ok if r not in kept]
        self.sweep_note = (f"the sweep tried {len(swept)} of {len(listed)} configurations, {len(ok)} correct"
                           + (f", {len(extra)} variant shape(s) besides the public ones" if extra else "")
                           + (f"; {len(fragile)} left aside as more than {VARIANT_LOSS:.0%} slower than the best on "
                              f"a variant" if fragile else "")
                           + (f"; fastest {best.config} at {best.ms:.4g} ms" if best else ""))
        return swept

    @staticmethod
    def _incumbent(results: list[Swept]) -> Swept | None:
        """In the order tried, a faster one replaces the incumbent only beyond the margin."""
        best = None
        for r in results:
            if improves(r.ms, best.ms if best else None):
                best = r
        return best

    def _dispatch(self, default: Swept, correct: list[Swept]) -> dict[str, dict[str, Any]]:
        """Public shapes on which another configuration beat the default beyond the margin."""
        table = {}
        for s, shape in enumerate(self.task.shapes):
            if s >= len(default.shapes_ms):
                continue
            best = min(correct, key=lambda r: r.shapes_ms[s] if s < len(r.shapes_ms) else math.inf)
            if best.config != default.config and improves(best.shapes_ms[s], default.shapes_ms[s]):
                table[shape_key(shape)] = best.config
        return table

    # -- goal-only: its own test decides -----------------------------------------------------
    def _own_search(self, default: Swept | None, dispatch: dict[str, dict[str, Any]], first: dict[str, Any]) -> None:
        """The sweep's best configuration (the first one tried when none was correct), dispatching
        shapes to others when its own test confirms the dispatch pays."""
        act = self.s.act
        config = default.config if default else first
        final = render(self.source, config)
        if dispatch:
            special = render(self.source, config, dispatch)
            act(f"Writing the kernel: {config}, with {len(dispatch)} shape(s) dispatched to their own configuration.",
                "write_file", path="kernel.py", content=special)
            out, _ = act("Testing the dispatching kernel.", "bash", command="python check.py kernel.py")
            r = checked(out)
            if r and dispatch_wins(r[1], default.shapes_ms):
                final = special
            else:
                act("The dispatch did not pay on re-measurement; writing the single configuration.",
                    "write_file", path="kernel.py", content=final)
                act("Testing the final kernel.", "bash", command="python check.py kernel.py")
        else:
            act(f"Writing the kernel with the best configuration ({self.sweep_note}).", "write_file",
                path="kernel.py", content=final)
            act("Testing the final kernel.", "bash", command="python check.py kernel.py")
        if "profile" in self.tools:
            act("Profiling the final kernel.", "profile")
        self._submit(final)

    # -- a harness measurement decides -------------------------------------------------------
    def _measured_search(self, order: list[dict[str, Any]], swept: list[Swept]) -> None:
        """Candidates in the sweep's order of speed (then the untried, then those it found wrong), as
        many as the turns allow, each through the harness's tools; then the shape dispatch."""
        act = self.s.act
        correct = [r for r in swept if r.correct]
        kept = robust(correct)  # the robust ones first, each group by its public-shape time
        ranked = [r.config for r in sorted(correct, key=lambda r: (r not in kept, r.ms, order.index(r.config)))]
        tried = [r.config for r in swept]
        cands = ranked + [c for c in order if c not in tried] + [c for c in order if c in tried and c not in ranked]
        cands = cands[: self._fits(len(cands))]
        phase = "correct"
        if self.workflow:
            self._plan_phase(phase, cands[:1])
        scores: list[tuple[float | None, list]] = []
        for i, config in enumerate(cands):
            if self.workflow and phase == "correct" and self.kept:
                self._next_phase("a correct kernel is kept")
                phase = "optimise"
                self._plan_phase(phase, cands[i:])
            parent = cands[self._best(scores)] if scores else None  # each one changes the best so far
            scores.append(self._try(config, render(self.source, config), f"configuration {config}", parent))
            if i == 0 and "profile" in self.tools and scores[0][0] is not None:
                out, err = act("Profiling the first correct version.", "profile")
                if not err:  # the profile's diagnosis and its top recommendation rank the optimisation direction
                    report = json.loads(out)
                    self.diagnosis = report.get("diagnosis", [])
                    self.benefit = (report.get("recommendations") or [{}])[0].get("expected_benefit", "medium")
        best = self._best(scores)
        base = self.kept["config"] if self.workflow and self.kept else cands[best]
        written, final = render(self.source, cands[-1]), render(self.source, base)
        base_swept = next((r for r in correct if r.config == base), None)
        table = self._dispatch(base_swept, correct) if base_swept else {}
        if self.workflow:
            self._next_phase("every configuration in the turn budget was tried")
            self._plan_phase("specialise", [], note=(
                f"The sweep measured {len(table)} public shape(s) faster with another configuration: {table}" if table
                else "The sweep measured no public shape faster with another configuration"))
        if table:
            special = written = render(self.source, base, table)
            ms, shapes = self._try(base, special, f"shape dispatch over {base}: {table}", base, specialise=True)
            base_ms, base_shapes = scores[cands.index(base)]
            if self.workflow:
                final = self.kept["kernel"] if self.kept else final
            elif ms is not None and base_ms is not None and dispatch_wins(shapes, base_shapes) and (
                    not self.search or improves(ms, base_ms)):
                final = special
        if self.workflow:
            self._next_phase("the shape dispatch is kept" if table and final == written else
                             "the shape dispatch did not beat the kept kernel" if table else
                             "no public shape justifies a dispatch")
        self._submit(final, restore=final != written)

    def _best(self, scores: list[tuple[float | None, list]]) -> int:
        """The candidate the harness keeps: in order, a faster one replaces only beyond the margin."""
        best = None
        for i, (ms, _) in enumerate(scores):
            if improves(ms, scores[best][0] if best is not None else None):
                best = i
        return best if best is not None else 0

    def _fits(self, n: int) -> int:
        """How many candidates the turn budget leaves room for (every model call is a turn), the
        shape dispatch's own candidate kept aside."""
        per = 1 + self.evaluate + self.search + 2 * self.workflow
        fixed = 2 + ("search_knowledge" in self.tools) + 3 + ("profile" in self.tools) + 15 * self.workflow + per
        tail = 6  # restore, submit; a review round, a test, a resubmit, a second review
        return max(min(n, 1 + self.workflow), min(n, (self.task.turns - fixed - tail) // per))


    def _fallback(self) -> None:
        """No template: the reference as a fallback (the evaluator rejects it as a passthrough)."""
        act = self.s.act
        act("No template for this operator; writing a fallback.", "write_file", path="kernel.py", content=PASSTHROUGH)
        if self.evaluate:
            act("Evaluating the fallback.", "evaluate")
        self._submit(PASSTHROUGH)



def next_call(system: str, messages: list[Message], tools: list[ToolSpec], seed: int) -> tuple[str, ToolCall | None]:
    """The policy's next tool call (what it says, the call) given the conversation so far; None when done."""
    results = {m.tool_call_id: (m.content, m.is_error) for m in messages if m.role == "tool"}
    try:
        Policy(_Script(results), read_task(messages[0].content), {t.name: t for t in tools}, system, seed).run()
    except _Next as nxt:
        return nxt.text, nxt.call
    return "Done: the harness did not accept the submission and there is nothing left to try.", None
