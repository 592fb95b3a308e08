"""Implement-then-review: a candidate is promoted (the submit accepted) only once a reviewer
approves it. Each round is a fresh review call (no memory of the implementer's conversation)
that answers APPROVE, or REVISE with objections handed back to the implementer. At most
``rounds`` rounds; a kernel changed after an approval is reviewed again.

The reviewer's model is the agent's own unless the study names another (``reviewer_model``: then
it is an auxiliary model of the match, in its key and in every table). Every review call goes
through the trial's one budget check and counts toward its turns, tokens and cost.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from ablate import models
from ablate.models import Message
from ablate.harnesses import _documents
from ablate.harnesses.mechanisms._base import Mechanism

TESTS = ("bash", "evaluate", "profile", "workflow", "candidate")  # tools whose output is evidence about kernel.py
EVIDENCE_CHARS = 1500


@dataclass
class ReviewerOptions:
    rounds: int = 3  # review calls at most; after the last, the submit stands with approved: false


class Reviewer(Mechanism):
    name = "reviewer"
    Options = ReviewerOptions
    prompt = "prompts/reviewer.md"
    documents = ("prompts/reviewer_system.md", "prompts/reviewer_request.md")

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        if self.options.rounds < 1:
            raise ValueError("reviewer.rounds must be at least 1")
        self.reviews: list[dict[str, Any]] = []
        self.approved: set[str] = set()  # kernel hashes a reviewer approved
        self._model = None

    def system(self, task):
        return _documents.text(self.prompt).strip().format(rounds=self.options.rounds)

    def tools(self, task, ws, model):
        self.ws, self.task = ws, task
        return {}

    def reviewer_model(self, state):
        if "reviewer" not in self.auxiliary_models:
            return state.model  # the same model, in a fresh context
        if self._model is None:
            self._model = models.Recorder(models.get(self.auxiliary_models["reviewer"]))
        return self._model

    def before_submit(self, state):
        try:
            kernel = self.ws.read_bytes("kernel.py", max_bytes=1 << 20)
        except OSError:
            return None  # nothing to review; the core submit tool already refuses a missing kernel.py
        sha = hashlib.sha256(kernel).hexdigest()
        if sha in self.approved or len(self.reviews) >= self.options.rounds:
            return None
        request = _documents.text("prompts/reviewer_request.md").format(
            round=len(self.reviews) + 1, rounds=self.options.rounds, task=state.messages[0].content,
            reference=self.task.files.get("reference.py", b"").decode(errors="replace"),
            kernel=kernel.decode(errors="replace"), sha=sha[:12], evidence=_evidence(state.messages),
            earlier="\n".join(f"round {r['round']}: {r['text'][:800]}" for r in self.reviews if r["verdict"] == "revise")
            or "(none)")
        model = self.reviewer_model(state)
        response = state.call(model, _documents.text("prompts/reviewer_system.md").strip(),
                              [Message(role="user", content=request)], [], owner=self.name)
        verdict = "approve" if response.text.strip().upper().startswith("APPROVE") else "revise"
        self.reviews.append({"round": len(self.reviews) + 1, "kernel_sha256": sha, "verdict": verdict,
                             "model": getattr(model, "id", None), "text": response.text[:4000],
                             "tokens": response.usage.total_tokens})
        if verdict == "approve":
            self.approved.add(sha)
            return None
        left = self.options.rounds - len(self.reviews)
        return (f"The reviewer did not approve kernel.py (round {len(self.reviews)} of {self.options.rounds}; "
                f"{left} left). Its objections:\n{response.text}\nAddress them, then submit again.")

    def use(self):
        final = self.reviews[-1] if self.reviews else None
        return {"rounds": len(self.reviews), "verdicts": [r["verdict"] for r in self.reviews],
                "approved": bool(final and final["verdict"] == "approve"),
                "reviewer_model": self.auxiliary_models.get("reviewer", {}).get("id") or "same as the agent",
                "reviews": self.reviews}


def _evidence(messages: list[Message]) -> str:
    """The outputs of tests the implementer ran after it last wrote kernel.py (newest last)."""
    calls = {c.id: c for m in messages if m.role == "assistant" for c in m.tool_calls}
    since = []
    for m in messages:
        call = calls.get(m.tool_call_id) if m.role == "tool" else None
        if call is None:
            continue
        if call.name == "write_file" and str(call.arguments.get("path", "")).lstrip("./") in ("kernel.py", "/workspace/kernel.py"):
            since = []  # the kernel changed: earlier evidence is about another kernel
        elif call.name in TESTS or (call.name == "bash" and "kernel" in json.dumps(call.arguments)):
            since.append(f"- {call.name} {json.dumps(call.arguments)[:200]}\n{m.content[-EVIDENCE_CHARS:]}")
    return "\n".join(since[-4:]) or "none: kernel.py was not tested after its last change"
