"""python -m ablate.evaluate --operator OP --submission PATH [--shapes SET] [--json] [--seed N]

Prints one JSON object (--json) or a short table on stdout, progress lines on stderr (--quiet:
none); exits 0 whenever a verdict was reached, 2 for bad arguments or a failure of the evaluator
itself."""
from __future__ import annotations

import argparse
import json
import sys

from ablate.errors import AblateError
from ablate.evaluate._supervisor import EvaluatorFailure, evaluate


def _fmt(x, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def table(r: dict) -> str:
    lines = [f"{r['operator']} [{r['shape_set']}] on {r['device'].get('name') or '?'} ({r['timing']}): "
             f"{r['verdict'].upper()}" + (f" - {', '.join(r['reasons'])}" if r["reasons"] else "")]
    if r["shapes"]:
        head = f"{'shape':<34} {'ok':<3} {'max err':>9} {'ms':>9} {'best baseline':>22} {'speedup':>8} {'SOL':>6}"
        lines += [head, "-" * len(head)]
        for s in r["shapes"]:
            best = s["best_baseline"]
            base = f"{best} {s['baselines_ms'][best]:.4g}" if best else "-"
            lines.append(f"{s['shape_id']:<34} {'yes' if s['correct'] else 'no':<3} {_fmt(s['max_abs_error'], '9.2e')} "
                         f"{_fmt((s['time_ms'] or {}).get('median'), '9.4g')} {base:>22} "
                         f"{_fmt(s['speedup_vs_best'], '7.2f') + ('x' if s['speedup_vs_best'] else ''):>8} "
                         f"{_fmt(s['sol_fraction'], '6.0%')}")
    if r.get("geomean_speedup"):
        lines.append(f"geomean speedup vs best baseline: {r['geomean_speedup']:.3f}x")
    for code, msg in (r.get("details") or {}).items():
        lines.append(f"  {code}: {msg[:400]}")
    lines.append(f"({r['seconds']:.1f} s)")
    return "\n".join(lines)


def _progress(message: str) -> None:
    print(f"  {message}", file=sys.stderr, flush=True)  # stderr: --json output stays one object


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ablate.evaluate", description="Judge a kernel.py against an operator.")
    p.add_argument("--operator", required=True)
    p.add_argument("--submission", required=True, help="path to kernel.py")
    p.add_argument("--shapes", default="eval", help="shape set: smoke, public or eval")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    p.add_argument("--seed", type=int, default=None, help="reproducible inputs (default: fresh random seeds)")
    p.add_argument("--no-timing", action="store_true", help="check correctness only")
    p.add_argument("--device", default="auto", help="auto, cpu or cuda")
    p.add_argument("--draws", type=int, default=3, help="seeds per input distribution and shape")
    p.add_argument("--timeout", type=float, default=None, help="seconds the candidate may run")
    p.add_argument("--operator-set", default=None, metavar="JSON",
                   help='the conf/operators node to load first, e.g. \'{"source": "kernelbench", "path": "...", "level": 1}\'')
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    a = p.parse_args(argv)
    try:
        node = json.loads(a.operator_set) if a.operator_set else None
        if node is not None and not isinstance(node, dict):
            raise AblateError("--operator-set must be a JSON object")
        if node:  # an external operator exists only once its node is loaded, here as in the judge
            from ablate import operators

            operators.load_set(node)
        r = evaluate(a.operator, a.submission, shapes=a.shapes, seed=a.seed, timing=not a.no_timing,
                     device=a.device, draws=a.draws, timeout_s=a.timeout,
                     operator_set=node, progress=None if a.quiet else _progress)
    except (AblateError, json.JSONDecodeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except EvaluatorFailure as e:  # the evaluator broke, not the submission: say everything
        print(f"evaluator failure: {e}", file=sys.stderr)
        return 2
    print(json.dumps(r) if a.json else table(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
