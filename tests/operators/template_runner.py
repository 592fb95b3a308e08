"""Runs scripted templates at chosen configurations on their operator's smoke shapes (and extra
shapes), for every input distribution, under the Triton CPU interpreter; prints JSON failures per
template.

Run as a subprocess: TRITON_INTERPRET must be set before triton is first imported.
    python tests/operators/template_runner.py softmax layernorm ...        every listed configuration
    python tests/operators/template_runner.py --plan '{"topk": {"configs": [0, 5], "shapes": [...]}}'
"""
import json
import os
import sys
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "1"

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from ablate import operators  # noqa: E402
from ablate.operators._operator import load_module  # noqa: E402

TEMPLATES = ROOT / "harnesses" / "scripted" / "templates"


def configs(path: Path) -> list[dict]:
    first = path.read_text().splitlines()[0]
    return json.loads(first.removeprefix("# scripted-configs:"))


def run(name: str, which: list[int] | None = None, extra_shapes: list[dict] = ()) -> dict:
    path = TEMPLATES / f"{name}.py"
    op = operators.get(name)
    report = {"configs": 0, "checks": 0, "failures": []}
    listed = configs(path)
    for i in range(len(listed)) if which is None else which:
        cfg = listed[i]
        mod = load_module(path, f"template_{name}_{i}")
        mod.CONFIG = cfg  # what the scripted policy does by rewriting the CONFIG line
        report["configs"] += 1
        for shape in list(op.shapes["smoke"]) + list(extra_shapes):
            for seed, dist in enumerate(operators.DISTRIBUTIONS):
                inputs = op.make_inputs(shape, seed, "cpu", dist)
                try:
                    j = op.verify(mod.kernel(*inputs), inputs)
                    ok, msg = j.ok, j.message
                except Exception as e:  # a crash is a failure to report, not to hide
                    ok, msg = False, f"{type(e).__name__}: {e}"[:300]
                report["checks"] += 1
                if not ok:
                    report["failures"].append(f"config {cfg} shape {shape} dist {dist}: {msg}")
    return report


if __name__ == "__main__":
    if sys.argv[1] == "--plan":
        plan = json.loads(sys.argv[2])
        print(json.dumps({name: run(name, p.get("configs"), p.get("shapes", [])) for name, p in plan.items()}))
    else:
        print(json.dumps({name: run(name) for name in sys.argv[1:]}))
