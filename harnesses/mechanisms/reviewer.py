"""Implement-then-review: before a submit is accepted, an independent reviewer (the same model in a
fresh context, no tools) reads kernel.py and either approves it or sends it back with changes."""
from __future__ import annotations

from ablate.models import Message
from harnesses.mechanisms._base import Mechanism

REVIEW_SYSTEM = (
    "You are reviewing a GPU kernel written by another engineer. Check it against the reference for "
    "correctness on all shapes (masking, non-power-of-two sizes, dtype and accumulation precision, "
    "numerical stability) and for performance problems (uncoalesced access, wasted bandwidth, "
    "poor occupancy, calls into the library being replaced). Answer with APPROVE on the first line if it "
    "should be submitted as it is, or REVISE on the first line followed by the concrete changes to make."
)


class Reviewer(Mechanism):
    name = "reviewer"

    def __init__(self, rounds: int = 1, **options):
        super().__init__(**options)
        self.rounds = int(rounds)
        self.reviews = 0

    def system(self, task):
        return ("When you submit, an independent reviewer reads kernel.py. If it asks for changes, make them "
                "(or explain why not) and submit again.")

    def bind(self, ws, task):
        self.ws, self.task = ws, task

    def tools(self, task, ws, model):
        self.bind(ws, task)
        return {}

    def before_submit(self, state):
        if self.reviews >= self.rounds:
            return None
        self.reviews += 1
        kernel = (self.ws.path / "kernel.py").read_text(errors="replace")
        reference = self.task.files.get("reference.py", b"").decode(errors="replace")
        prompt = f"Reference (the definition):\n```python\n{reference}\n```\n\nKernel to review:\n```python\n{kernel}\n```"
        response = state.model.generate(REVIEW_SYSTEM, [Message(role="user", content=prompt)], [])
        state.charge(response.usage)
        verdict = "approve" if response.text.strip().upper().startswith("APPROVE") else "revise"
        state.result.events.append({"event": "review", "round": self.reviews, "verdict": verdict,
                                    "text": response.text[:2000]})
        if verdict == "approve":
            return None
        return f"The reviewer asks for changes before this can be submitted:\n{response.text}"
