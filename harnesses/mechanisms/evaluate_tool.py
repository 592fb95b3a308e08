"""An `evaluate` tool: the trusted evaluator on the public shapes (correctness and timing)."""
from __future__ import annotations

import json

from ablate.models import ToolSpec
from ablate.sandbox import Tool, ToolResult
from harnesses.mechanisms._base import Mechanism


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

    def system(self, task):
        return ("An `evaluate` tool runs the benchmark's own evaluator on kernel.py over the public shapes: "
                "correctness on fresh inputs, timing, and the speedup against the best library.")

    def tools(self, task, ws, model):
        def evaluate(args):
            path = ws.resolve(str(args.get("path") or "kernel.py"))
            if not path.is_file():
                return ToolResult(f"evaluate: {path.name} does not exist", is_error=True)
            result = task.evaluate_public(str(path))
            return ToolResult(json.dumps(brief(result), indent=1), is_error=result.get("verdict") != "accepted")

        spec = ToolSpec("evaluate", "Evaluate a kernel file (default kernel.py) on the public shapes.", {
            "type": "object", "properties": {"path": {"type": "string"}}, "required": []})
        return {"evaluate": Tool(spec, evaluate)}
