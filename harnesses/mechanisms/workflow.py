"""Workflow controller: draft, plan, implement one candidate, validate, measure, decide (keep,
revise or reject, with the reason written down), in phases: first a correct kernel; then
profile-guided directions ranked by expected benefit and risk, with a cap on iterations per
direction; then shape-specialised dispatch only where a measured win justifies it.

The controller checks each step's artefact, not the agent's say-so: the draft and plan files and
their required sections, a new kernel file it snapshots, the validation and measurement it runs
itself (the harness's own, in the sandbox), and a decision consistent with those measurements.
A submit is refused until every phase is finished and kernel.py is the kept candidate.
"""
from __future__ import annotations

import ast
import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from ablate.models import ToolSpec
from ablate.sandbox import Tool, ToolResult
from ablate.harnesses import _documents
from ablate.harnesses.mechanisms import _measure
from ablate.harnesses.mechanisms._base import Mechanism

PHASES = ("correct", "optimise", "specialise")
DRAFT_SECTIONS = ("baseline", "risks", "directions", "steps", "validation", "evidence")
LEVELS = {"high": 3, "medium": 2, "low": 1}
DECISIONS = ("keep", "revise", "reject")
MIN_REASON = 12  # characters: a reason, not a placeholder


@dataclass
class WorkflowOptions:
    phases: list[str] = field(default_factory=lambda: list(PHASES))
    iterations_per_direction: int = 5
    margin: float = _measure.MARGIN  # "measurably faster": beyond this fraction


class Refusal(Exception):
    pass


class Workflow(Mechanism):
    name = "workflow"
    Options = WorkflowOptions
    prompt = "prompts/workflow.md"
    documents = _measure.DOCUMENTS

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        unknown = [p for p in self.options.phases if p not in PHASES]
        if unknown or not self.options.phases:
            raise ValueError(f"unknown workflow phases {unknown or '(none)'}; valid: {', '.join(PHASES)}")
        if self.options.phases[0] != "correct":
            raise ValueError("the first workflow phase must be 'correct' (a correct kernel before any optimisation)")
        self.phase_i = 0
        self.step = "draft"
        self.log: list[dict[str, Any]] = []  # every controller check: step, ok, message
        self.phases: list[dict[str, Any]] = [self._new_phase(self.options.phases[0])]
        self.candidates: list[dict[str, Any]] = []
        self.kept: dict[str, Any] | None = None
        self.accepted_docs: dict[str, str] = {}  # file -> sha last accepted (a new phase needs a new one)
        self.done = False

    def system(self, task):
        return _documents.text(self.prompt).strip().format(iterations=self.options.iterations_per_direction)

    @staticmethod
    def _new_phase(name):
        return {"name": name, "draft": None, "plan": None, "directions": [], "candidates": [], "finished": None}

    @property
    def phase(self) -> dict[str, Any]:
        return self.phases[-1]

    # -- the tool -------------------------------------------------------------------------
    def tools(self, task, ws, model):
        self.ws, self.task = ws, task

        def workflow(args):
            action = str(args.get("action") or "status")
            seconds = gpu = 0.0
            phase, step = self.phase["name"], self.step  # what this call is about, for the log
            try:
                if self.done and action != "status":
                    raise Refusal("the workflow is complete: submit kernel.py (the kept candidate)")
                if action == "advance":
                    message, seconds, gpu = self._advance()
                elif action == "decide":
                    message = self._decide(str(args.get("decision") or ""), str(args.get("reason") or ""))
                elif action == "next_phase":
                    message = self._next_phase(str(args.get("reason") or ""))
                elif action == "status":
                    message = "status"
                else:
                    raise Refusal(f"unknown action {action!r}; valid: status, advance, decide, next_phase")
                ok = True
            except Refusal as e:
                message, ok = f"refused: {e}", False
            self.log.append({"phase": phase, "step": step, "action": action, "ok": ok, "message": message[:500]})
            return ToolResult(json.dumps({"result": message, **self.status()}, indent=1), is_error=not ok,
                              seconds=seconds, gpu_seconds=gpu)

        spec = ToolSpec("workflow", "The workflow controller: status, advance (check the current step's artefact), "
                        "decide (keep | revise | reject, with a reason), next_phase.", {
                            "type": "object", "properties": {
                                "action": {"type": "string", "enum": ["status", "advance", "decide", "next_phase"]},
                                "decision": {"type": "string", "enum": list(DECISIONS)},
                                "reason": {"type": "string"}},
                            "required": ["action"]})
        return {"workflow": Tool(spec, workflow)}

    def status(self) -> dict[str, Any]:
        direction = self._direction()
        return {"phase": self.phase["name"], "phase_number": self.phase_i + 1, "phases": list(self.options.phases),
                "step": "done" if self.done else self.step, "direction": direction and direction["direction"],
                "directions": [{k: d[k] for k in ("direction", "benefit", "risk", "iterations", "status")}
                               for d in self.phase["directions"]],
                "kept": self.kept and {"id": self.kept["id"], "ms": self.kept["ms"]}}

    # -- steps ----------------------------------------------------------------------------
    def _advance(self) -> tuple[str, float, float]:
        if self.step == "draft":
            sha, text = self._document("docs/draft.md")
            missing = [s for s in DRAFT_SECTIONS if not re.search(rf"^##\s+{s}\b", text, re.I | re.M)]
            if missing:
                raise Refusal(f"docs/draft.md lacks the sections {', '.join('## ' + m.title() for m in missing)}")
            if self.phase["name"] == "optimise":
                self.phase["directions"] = _directions(text)
            self.accepted_docs["docs/draft.md"] = sha
            self.phase["draft"], self.step = sha, "plan"
            return "draft accepted; next: write docs/plan.md (numbered steps, ## Acceptance) and advance", 0.0, 0.0
        if self.step == "plan":
            sha, text = self._document("docs/plan.md")
            if len(re.findall(r"^\s*\d+[.)]\s+\S", text, re.M)) < 2 or not re.search(r"^##\s+acceptance\b", text, re.I | re.M):
                raise Refusal("docs/plan.md needs at least two numbered steps and an ## Acceptance section")
            self.accepted_docs["docs/plan.md"] = sha
            self.phase["plan"], self.step = sha, "implement"
            return "plan accepted; next: write a candidate kernel.py and advance", 0.0, 0.0
        if self.step == "implement":
            return self._implement()
        raise Refusal(f"the current step is {self.step!r}: " + ("call workflow(action='decide', ...)" if self.step == "decide" else "see status"))

    def _document(self, rel: str) -> tuple[str, str]:
        try:
            data = self.ws.read_bytes(rel, max_bytes=1 << 20)
        except OSError:
            raise Refusal(f"{rel} does not exist: write it first") from None
        sha = hashlib.sha256(data).hexdigest()
        if self.accepted_docs.get(rel) == sha:
            raise Refusal(f"{rel} is the previous phase's; write this phase's ({self.phase['name']})")
        text = data.decode(errors="replace")
        if len(text.strip()) < 80:
            raise Refusal(f"{rel} is too short to be a {rel.split('/')[-1][:-3]}")
        return sha, text

    def _implement(self) -> tuple[str, float, float]:
        try:
            data = self.ws.read_bytes("kernel.py", max_bytes=4 << 20)
        except OSError:
            raise Refusal("kernel.py does not exist") from None
        try:
            tree = ast.parse(data)
        except SyntaxError as e:
            raise Refusal(f"kernel.py does not parse: {e}") from None
        if not any(isinstance(n, (ast.FunctionDef, ast.Assign, ast.ImportFrom)) and _defines_kernel(n) for n in tree.body):
            raise Refusal("kernel.py defines no function `kernel`")
        sha = hashlib.sha256(data).hexdigest()
        if any(c["sha256"] == sha for c in self.candidates):
            raise Refusal("kernel.py is a candidate already tried; implement a new one")
        direction = self._direction()
        if self.phase["name"] == "optimise" and direction is None:
            raise Refusal("every direction of this phase is closed: call next_phase")
        n = len(self.candidates) + 1
        self.ws.write(f"runs/{n}/kernel.py", data)
        m = _measure.measurer(self.ws, self.task).measure(f"runs/{n}/kernel.py")
        self.ws.write(f"runs/{n}/measurement.json", json.dumps(m.result, indent=1).encode())
        cand = {"id": n, "phase": self.phase["name"], "direction": direction and direction["direction"], "sha256": sha,
                "correct": m.correct, "ms": m.ms, "shapes_ms": [s.get("ms") for s in m.result.get("shapes", [])],
                "decision": None, "reason": None}
        self.candidates.append(cand)
        self.phase["candidates"].append(n)
        self._benchmark(cand, m)
        self.log.append({"phase": self.phase["name"], "step": "validate", "action": "controller", "ok": m.correct,
                         "message": f"candidate {n}: {'correct' if m.correct else 'incorrect'} on the public shapes"})
        self.log.append({"phase": self.phase["name"], "step": "measure", "action": "controller", "ok": m.ms is not None,
                         "message": f"candidate {n}: {m.ms} ms"})
        self.step = "decide"
        verdict = json.dumps(_measure.brief(m))
        return (f"candidate {n} snapshotted to runs/{n}/, validated and measured: {verdict}. "
                "Next: decide keep | revise | reject with a reason", m.seconds, m.gpu_seconds)

    def _benchmark(self, cand: dict[str, Any], m: _measure.Measurement) -> None:
        try:
            old = self.ws.read_bytes("benchmark.csv").decode()
        except OSError:
            old = "candidate,phase,direction,shape,correct,ms\n"
        rows = [f"{cand['id']},{cand['phase']},{(cand['direction'] or '').replace(',', ';')},"
                f"\"{json.dumps(s.get('shape'))}\",{int(bool(s.get('correct')))},{s.get('ms') or ''}\n"
                for s in m.result.get("shapes", [])] or [f"{cand['id']},{cand['phase']},,,0,\n"]
        self.ws.write("benchmark.csv", (old + "".join(rows)).encode())

    def _decide(self, decision: str, reason: str) -> str:
        if self.step != "decide":
            raise Refusal(f"nothing to decide: the current step is {self.step!r}")
        if decision not in DECISIONS:
            raise Refusal(f"decision must be one of {', '.join(DECISIONS)}")
        if len(reason.strip()) < MIN_REASON:
            raise Refusal("write down the reason for the decision (a sentence)")
        cand = self.candidates[-1]
        if decision == "keep":
            self._check_keep(cand)
            self.kept = cand
        cand["decision"], cand["reason"] = decision, reason.strip()[:1000]
        direction = self._direction()
        if direction is not None:
            direction["iterations"] += 1
            if decision == "reject":
                direction["status"] = f"rejected: {reason.strip()[:200]}"
            elif direction["iterations"] >= self.options.iterations_per_direction:
                direction["status"] = "iterations exhausted"
        self._append_decision(cand)
        self.step = "implement"
        return f"candidate {cand['id']}: {decision}. Next: another candidate (implement), or next_phase"

    def _check_keep(self, cand: dict[str, Any]) -> None:
        if not cand["correct"]:
            raise Refusal(f"candidate {cand['id']} is incorrect on the public shapes: revise or reject it")
        if self.kept is None:  # the first correct candidate is kept on correctness alone
            return
        margin = self.options.margin
        if self.phase["name"] == "specialise":
            pairs = list(zip(cand["shapes_ms"], self.kept["shapes_ms"]))
            wins = any(_measure.improves(a, b, margin) for a, b in pairs)
            losses = any(a is None or (b is not None and a > b * (1 + margin)) for a, b in pairs)
            if not wins or losses:
                raise Refusal(f"a specialised candidate is kept only for a measured win on some shape and no loss on "
                              f"any: {cand['shapes_ms']} ms vs kept {self.kept['shapes_ms']} ms")
        elif not _measure.improves(cand["ms"], self.kept["ms"], margin):
            raise Refusal(f"candidate {cand['id']} ({cand['ms']} ms) is not measurably faster than the kept candidate "
                          f"{self.kept['id']} ({self.kept['ms']} ms; margin {margin:.0%}): revise or reject it")

    def _append_decision(self, cand: dict[str, Any]) -> None:
        try:
            old = self.ws.read_bytes("docs/decisions.md").decode()
        except OSError:
            old = "# Decisions\n\n"
        line = (f"- candidate {cand['id']} ({cand['phase']}{', ' + cand['direction'] if cand['direction'] else ''}): "
                f"**{cand['decision']}**, {cand['ms']} ms, correct={cand['correct']}. {cand['reason']}\n")
        self.ws.write("docs/decisions.md", (old + line).encode())

    def _direction(self) -> dict[str, Any] | None:
        return next((d for d in self.phase["directions"] if d["status"] == "open"), None)

    def _next_phase(self, reason: str) -> str:
        if len(reason.strip()) < MIN_REASON:
            raise Refusal("give the reason for ending this phase (a sentence)")
        if self.step == "decide":
            raise Refusal("decide on the last candidate first")
        name = self.phase["name"]
        tried = [c for c in self.candidates if c["phase"] == name]
        if name == "correct" and (self.kept is None or self.kept["phase"] != "correct"):
            raise Refusal("the first phase ends with a kept correct candidate")
        if name == "optimise" and not tried:
            raise Refusal("try at least one candidate of the top-ranked direction before ending this phase")
        if name == "specialise" and not tried and self.phase["plan"] is None:
            raise Refusal("draft and plan this phase first (the draft says whether any shape justifies a dispatch)")
        for d in self.phase["directions"]:
            if d["status"] == "open":
                d["status"] = f"closed: {reason.strip()[:200]}"
        self.phase["finished"] = reason.strip()[:500]
        if self.phase_i + 1 == len(self.options.phases):
            self.done = True
            return "workflow complete: submit kernel.py (it must be the kept candidate)"
        self.phase_i += 1
        self.phases.append(self._new_phase(self.options.phases[self.phase_i]))
        self.step = "draft"
        return f"phase {name} finished; next phase: {self.phase['name']} (write its docs/draft.md)"

    def before_submit(self, state):
        if not self.done:
            return (f"submit refused: the workflow is in phase {self.phase['name']} at step {self.step}; "
                    "finish every phase first (workflow action=status)")
        try:
            sha = hashlib.sha256(self.ws.read_bytes("kernel.py", max_bytes=4 << 20)).hexdigest()
        except OSError:
            sha = None
        if sha != self.kept["sha256"]:
            return (f"submit refused: kernel.py is not the kept candidate {self.kept['id']} "
                    f"(copy runs/{self.kept['id']}/kernel.py back, or take a new candidate through the steps)")
        return None

    def use(self):
        return {"phases": [{k: p[k] for k in ("name", "draft", "plan", "candidates", "finished")}
                           | {"directions": p["directions"]} for p in self.phases],
                "completed": self.done, "kept": self.kept and self.kept["id"],
                "candidates": [{k: c[k] for k in ("id", "phase", "direction", "correct", "ms", "decision", "reason")}
                               for c in self.candidates],
                "checks": len(self.log), "refusals": sum(not e["ok"] for e in self.log if e["action"] != "controller"),
                "log": self.log}


def _defines_kernel(node: ast.AST) -> bool:
    if isinstance(node, ast.FunctionDef):
        return node.name == "kernel"
    if isinstance(node, ast.Assign):
        return any(isinstance(t, ast.Name) and t.id == "kernel" for t in node.targets)
    return any((a.asname or a.name) == "kernel" for a in node.names)


def _directions(draft: str) -> list[dict[str, Any]]:
    """The draft's directions table, ranked: higher benefit first, then lower risk, then as written."""
    section = re.split(r"^##\s+directions\b.*$", draft, flags=re.I | re.M)[1]
    section = re.split(r"^##\s", section, flags=re.M)[0]
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in section.splitlines() if line.strip().startswith("|")]
    if len(rows) < 3:
        raise Refusal("the optimise draft's ## Directions needs a table: direction | benefit | risk | evidence")
    header = [h.lower() for h in rows[0]]
    try:
        cols = {k: next(i for i, h in enumerate(header) if k in h) for k in ("direction", "benefit", "risk", "evidence")}
    except StopIteration:
        raise Refusal("the ## Directions table needs the columns direction | benefit | risk | evidence") from None
    found = []
    for row in rows[2:]:  # rows[1] is the |---| line
        if len(row) <= max(cols.values()):
            continue
        d = {k: row[i] for k, i in cols.items()}
        benefit, risk = d["benefit"].lower(), d["risk"].lower()
        if benefit not in LEVELS or risk not in LEVELS:
            raise Refusal(f"direction {d['direction']!r}: benefit and risk must be high, medium or low")
        if not d["evidence"]:
            raise Refusal(f"direction {d['direction']!r}: give the evidence (a measurement or profile) behind it")
        found.append({**d, "benefit": benefit, "risk": risk, "iterations": 0, "status": "open"})
    if not found:
        raise Refusal("the ## Directions table lists no direction")
    order = sorted(range(len(found)), key=lambda i: (-LEVELS[found[i]["benefit"]], LEVELS[found[i]["risk"]], i))
    return [dict(found[i], rank=r + 1) for r, i in enumerate(order)]
