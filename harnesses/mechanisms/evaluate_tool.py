"""An `evaluate` tool: the trusted evaluator on the public shapes (correctness and timing).

Its seconds are charged to the trial like any tool's; on a GPU they are GPU-seconds too (the
evaluation holds the GPU), the same rule as a shell command run with the GPU visible."""
from __future__ import annotations

import json
import time

from ablate.models import ToolSpec
from ablate.sandbox import Tool, ToolResult
from ablate.harnesses.mechanisms._base import Mechanism


def brief(result: dict) -> dict:
    """The evaluator's verdict trimmed to what an agent needs."""
    return {
        "verdict": result.get("verdict"),
        "reasons": result.get("reasons", []),
        "details": result.get("details", {}),  # why it was rejected: the traceback, the first wrong element
        "timing": result.get("timing"),
        "shapes": [
            {k: s.get(k) for k in ("shape", "correct", "max_abs_error", "error", "time_ms", "best_baseline",
                                   "baselines_ms", "speedup_vs_best", "sol_fraction")}
            for s in result.get("shapes", [])
        ],
        "geomean_speedup": result.get("geomean_speedup"),
    }


class EvaluateTool(Mechanism):
    name = "evaluate_tool"
    prompt = "prompts/evaluate_tool.md"

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.evaluations: list[dict] = []

    def tools(self, task, ws, model):
        def evaluate(args):
            path = ws.resolve(str(args.get("path") or "kernel.py"))
            if not path.is_file():
                return ToolResult(f"evaluate: {path.name} does not exist", is_error=True)
            start = time.monotonic()
            result = task.evaluate_public(str(path))
            seconds = time.monotonic() - start
            self.evaluations.append({"verdict": result.get("verdict"), "reasons": result.get("reasons", []),
                                     "geomean_speedup": result.get("geomean_speedup"), "seconds": round(seconds, 3)})
            return ToolResult(json.dumps(brief(result), indent=1), is_error=result.get("verdict") != "accepted",
                              seconds=seconds, gpu_seconds=seconds if task.gpu else 0.0)

        spec = ToolSpec("evaluate", "Evaluate a kernel file (default kernel.py) on the public shapes.", {
            "type": "object", "properties": {"path": {"type": "string"}}, "required": []})
        return {"evaluate": Tool(spec, evaluate)}

    def use(self):
        return {"evaluations": len(self.evaluations), "accepted": sum(e["verdict"] == "accepted" for e in self.evaluations),
                "calls": self.evaluations}
