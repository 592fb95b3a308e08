"""Phased workflow: the agent works through named phases and reports each before it may submit."""
from __future__ import annotations

from ablate.models import ToolSpec
from ablate.sandbox import Tool, ToolResult
from harnesses.mechanisms._base import Mechanism

PHASES = {
    "understand": "Read the reference and shapes; state the contract, the bytes moved and FLOPs, and the roofline time.",
    "plan": "Choose the parallelisation, tiling and memory-access plan; predict the time it should reach.",
    "implement": "Write a correct kernel.py and check it against the reference on every public shape.",
    "measure": "Time it against the library baseline; compare with the roofline; find the bottleneck.",
    "refine": "Try the changes the measurements point to, keep the fastest correct version.",
}


class Workflow(Mechanism):
    name = "workflow"

    def __init__(self, phases: list[str] | None = None, **options):
        super().__init__(**options)
        self.phases = list(phases or PHASES)
        unknown = [p for p in self.phases if p not in PHASES]
        if unknown:
            raise ValueError(f"unknown workflow phases {unknown}; valid: {', '.join(PHASES)}")
        self.done: list[str] = []

    def system(self, task):
        steps = "\n".join(f"{i + 1}. {p}: {PHASES[p]}" for i, p in enumerate(self.phases))
        return ("Work in these phases, in order. When a phase is done, call `complete_phase` with its name "
                f"and a short report. You can submit only after every phase is complete.\n{steps}")

    def tools(self, task, ws, model):
        def complete_phase(args):
            phase = str(args.get("phase", ""))
            expected = self.phases[len(self.done)] if len(self.done) < len(self.phases) else None
            if expected is None:
                return ToolResult("all phases are complete; submit when ready")
            if phase != expected:
                return ToolResult(f"the next phase is {expected!r}, not {phase!r}", is_error=True)
            self.done.append(phase)
            nxt = self.phases[len(self.done)] if len(self.done) < len(self.phases) else None
            return ToolResult(f"phase {phase!r} complete." + (f" Next: {nxt}: {PHASES[nxt]}" if nxt else " Submit when ready."))

        spec = ToolSpec("complete_phase", "Mark the current workflow phase complete, with a short report.", {
            "type": "object",
            "properties": {"phase": {"type": "string", "enum": self.phases}, "report": {"type": "string"}},
            "required": ["phase", "report"],
        })
        return {"complete_phase": Tool(spec, complete_phase)}

    def before_submit(self, state):
        missing = [p for p in self.phases if p not in self.done]
        if missing:
            return f"submit refused: complete the workflow phases first ({', '.join(missing)})"
        return None
