"""The scripted policy's use of each mechanism's tools, and its reading of their answers.

One kernel goes through every mechanism the harness has (``_try``): the evaluate tool judges it
(a rejected one goes no further), the search mechanism's candidate tool registers it with its
parent and change, the workflow controller validates and measures it and the policy decides keep /
revise / reject by that measurement; the workflow's draft and plan per phase; the reviewer's
objection that kernel.py was not tested after its last change answered by testing it and
submitting again (``_submit``). The policy class (_policy.Policy) mixes these in.
"""
from __future__ import annotations

import json
import re
from typing import Any

from ablate._numbers import geomean
from ablate.harnesses.mechanisms._measure import improves
from ablate.harnesses.scripted._configs import dispatch_wins


class MechanismTools:
    """The tool calls behind each mechanism; the policy's state (kept candidate, lineage ids,
    diagnosis) lives on the policy object."""

    # -- one kernel through every mechanism the harness has ---------------------------------
    def _try(self, config: dict[str, Any], kernel: str, what: str, parent: dict[str, Any] | None,
             specialise: bool = False) -> tuple[float | None, list]:
        """Write, evaluate, register, validate and decide one kernel (a configuration, or a dispatch
        over it); (ms, per-shape ms) as the harness measured them. `parent`: the configuration whose
        candidate this one changes."""
        act = self.s.act
        act(f"Trying {what}.", "write_file", path="kernel.py", content=kernel)
        ms, shapes, accepted = None, [], True
        if self.evaluate:
            out, _ = act(f"Evaluating {what}.", "evaluate")
            ms, shapes = evaluated(out)
            accepted = ms is not None
        register = self.search and accepted and not (specialise and self.workflow)
        if register:  # a kernel the policy stands behind joins the lineage (the search promotes the best)
            out, _ = self._register(what, config, parent, specialise)
            if not self.workflow and not self.evaluate:
                ms, shapes = measured(out)
        if self.workflow:
            out, err = act(f"Handing {what} to the workflow controller.", "workflow", action="advance")
            wms, wshapes = workflow_measured(out) if not err else (None, [])
            ms, shapes = (wms, wshapes) if accepted else (None, [])
            kept = self.kept
            if ms is None:
                act("Rejecting it.", "workflow", action="decide", decision="reject",
                    reason=f"{what}: incorrect on the public shapes, failed to run, or rejected by the evaluator")
            elif kept is None or (not specialise and improves(ms, kept["ms"])) or (
                    specialise and dispatch_wins(shapes, kept["shapes_ms"])
                    and (not self.search or improves(ms, kept["ms"]))):
                act("Keeping it.", "workflow", action="decide", decision="keep",
                    reason=f"{what}: correct and {ms:.4g} ms ({shapes} per shape), faster than the kept candidate")
                self.kept = {"kernel": kernel, "config": config, "ms": ms, "shapes_ms": shapes}
                if specialise and self.search:  # the lineage gets the dispatch the controller kept
                    self._register(what, config, parent, specialise)
            else:
                act("Not keeping it.", "workflow", action="decide", decision="revise",
                    reason=f"{what}: {ms:.4g} ms ({shapes} per shape), not measurably faster than the kept "
                           f"{kept['ms']:.4g} ms ({kept['shapes_ms']})")
        return ms, shapes

    def _register(self, what: str, config: dict[str, Any], parent: dict[str, Any] | None,
                  specialise: bool) -> tuple[str, bool]:
        """The candidate tool: a snapshot with its lineage (the search mechanism's ids: c1, c2, ...)."""
        out, err = self.s.act(f"Keeping {what} as a candidate.", "candidate", change=what,
                              parent=self.ids.get(json.dumps(parent), "") if parent is not None else "")
        try:
            cid = json.loads(out).get("id")
        except (json.JSONDecodeError, AttributeError):
            cid = None
        if cid and not specialise:
            self.ids[json.dumps(config)] = cid
        return out, err

    # -- workflow documents -----------------------------------------------------------------
    def _plan_phase(self, phase: str, configs: list[dict[str, Any]], note: str = "") -> None:
        act = self.s.act
        evidence = "; ".join(self.diagnosis[:2]) or self.sweep_note or "the first kernel's measurement"
        chunks = [configs[i:i + self.per_direction] for i in range(0, len(configs), self.per_direction)]
        rows = [f"| launch configurations ranked {i * self.per_direction + 2}-{i * self.per_direction + len(c) + 1} by "
                f"the sweep: {', '.join(map(str, c))} | {self.benefit} | low | {evidence} |" for i, c in enumerate(chunks)]
        directions = "\n".join(rows) or f"| none left in the template bank | low | low | {evidence} |"
        draft = (f"# Draft: {self.task.operator}, phase {phase}\n\n## Baseline\nThe template kernel at the "
                 f"configuration the sweep ranked first, validated by the controller on the public shapes; "
                 f"{self.sweep_note}.\n\n## Risks\nA configuration can be slower on shapes it was not measured on, "
                 f"or fail to compile.\n\n## Directions\n| direction | benefit | risk | evidence |\n|---|---|---|---|\n"
                 f"{directions}\n\n## Steps\n1. Write the configuration.\n2. Advance.\n\n## Validation\nThe "
                 f"controller's measurement on every public shape.{' ' + note + '.' if note else ''}\n\n## Evidence\n"
                 f"Keep a candidate only when it is correct and measurably faster (a dispatch: faster on some shape, "
                 f"slower on none).\n")
        act(f"Writing the {phase} draft.", "write_file", path="docs/draft.md", content=draft)
        act("Checking the draft.", "workflow", action="advance")
        plan = (f"# Plan: phase {phase}\n\n1. Implement one candidate at a time.\n2. Advance: the controller "
                f"validates and measures.\n3. Decide with the measurement.\n\n## Acceptance\nCorrect on every public "
                f"shape; kept only when faster beyond the noise.\n")
        act(f"Writing the {phase} plan.", "write_file", path="docs/plan.md", content=plan)
        act("Checking the plan.", "workflow", action="advance")

    def _next_phase(self, reason: str) -> None:
        self.s.act("Ending this phase.", "workflow", action="next_phase", reason=reason)

    # -- submitting, and the reviewer's objection -------------------------------------------
    def _submit(self, final: str, restore: bool = False) -> None:
        act = self.s.act
        if restore:
            act("Restoring the best kernel.", "write_file", path="kernel.py", content=final)
        for _ in range(3):
            out, err = act("Submitting.", "submit")
            if not err:
                return
            if "not tested after its last change" in out:  # the reviewer's objection: test the exact file
                if self.evaluate:
                    act("Testing the final kernel, as the reviewer asked.", "evaluate")
                elif self.source:
                    act("Testing the final kernel, as the reviewer asked.", "bash", command="python check.py kernel.py")
                elif self.search:
                    act("Measuring the final kernel, as the reviewer asked.", "candidate", change="the final kernel, re-measured")


# -- the tools' answers, read -------------------------------------------------------------
def evaluated(output: str) -> tuple[float | None, list]:
    try:
        result = json.loads(output)
    except json.JSONDecodeError:
        return None, []
    times = [s["time_ms"]["median"] for s in result.get("shapes", []) if s.get("time_ms")]
    if result.get("verdict") != "accepted" or not times:
        return None, []
    return geomean(times), times


def checked(output: str) -> tuple[float, list] | None:
    """(ms, per-shape ms) of a correct kernel from `python check.py kernel.py`, else None."""
    m = re.search(r"^RESULT correct=(\d) max_err=\S+ ms=(\S+) shapes_ms=(\[[^\]]*\])\s*$", output, re.M)
    return (float(m.group(2)), json.loads(m.group(3))) if m and m.group(1) == "1" else None


def measured(output: str) -> tuple[float | None, list]:
    try:
        ev = json.loads(output).get("evidence") or {}
    except (json.JSONDecodeError, AttributeError):
        return None, []
    return (ev.get("ms"), [s.get("ms") for s in ev.get("shapes") or []]) if ev.get("correct") else (None, [])


def workflow_measured(output: str) -> tuple[float | None, list]:
    m = re.search(r'validated and measured: (\{.*\})\. Next', json.loads(output).get("result", ""), re.S)
    if not m:
        return None, []
    r = json.loads(m.group(1))
    return (r.get("ms"), [s.get("ms") for s in r.get("shapes") or []]) if r.get("correct") else (None, [])
