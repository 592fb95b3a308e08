"""Study designs: which arms run, on which shapes (the scope), and how trials pair.

``expand(cfg)`` turns a composed config into TrialSpecs: arms x operators x scope shapes x seeds,
every arm with the same model, shapes, budget and seeds, so trials pair by match key. Arms come
from ``+harness=X`` when given (one arm), else from the study: its named arms plus those its
ablation derives, one mechanism at a time, from a baseline and a specialist arm:

    ablation: {baseline: goal_only, specialist: kda05, add: [knowledge, workflow]}
      -> goal_only+knowledge, goal_only+workflow  (each mechanism configured as in kda05)
    ablation: {baseline: goal_only, specialist: kda05, remove: [all]}
      -> kda05-knowledge, kda05-workflow, ...     (one per mechanism of kda05)

An external agent's configuration items (skill:NAME, plugin:NAME, instructions, mcp:NAME,
setting:KEY; harnesses/agents) are added and removed the same way: claude_code+skill-KernelWiki.

Scopes (``study.scopes``), each planned in full:
    multi_shape   the operator set's shapes: public shown to the agent, eval (public + hidden) judged
    single_shape  one trial per eval shape; the agent is shown exactly the shape it is judged on
    smoke         the operator set's shapes as configured, like multi_shape; the default study
                  (conf/study/smoke.yaml) configures the smoke shapes for the scripted policy on a
                  CPU and public/eval for any other model (toy shapes measure launches, not
                  kernels), and a user's operators.shapes override wins over both
"""
from __future__ import annotations

import copy
from typing import Any

from ablate import harnesses
from ablate.errors import AblateError
from ablate.ablations._spec import TrialSpec

SCOPES = ("multi_shape", "single_shape", "smoke")


def _mechanisms(harness: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return harnesses.active(harness.get("mechanisms"))


def arms(cfg: dict[str, Any]) -> dict[str, dict[str, Any]]:
    study = cfg["study"]
    if cfg.get("harness"):
        found = {cfg["harness"]["name"]: cfg["harness"]}
    else:
        found = {name: dict(h, name=h.get("name") or name) for name, h in (study.get("arms") or {}).items()}
        if study.get("ablation"):
            found.update(derived(study["name"], found, study["ablation"]))
    if not found:
        raise AblateError(f"study {study['name']!r} names no arms; add study.arms or give +harness=NAME")
    return {name: dict(h, mechanisms=_mechanisms(h), **({"agent": harnesses.agents.absolute(h["agent"])}
                                                        if h.get("agent") else {}))
            for name, h in found.items()}


def derived(study: str, named: dict[str, dict[str, Any]], ablation: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The single-mechanism arms an ablation derives from its baseline and specialist arms."""
    for role in ("baseline", "specialist"):
        if ablation.get(role) not in named:
            raise AblateError(f"study {study!r}: ablation {role} {ablation.get(role)!r} is not an arm; "
                              f"arms: {', '.join(named)}")
    base, full = named[ablation["baseline"]], named[ablation["specialist"]]
    have = _mechanisms(full)
    items = harnesses.agents.items_of(full)  # an external agent's skills, plugins, ...: ablated alike
    out = {}
    for op, wanted in (("add", ablation.get("add") or []), ("remove", ablation.get("remove") or [])):
        names = list(have) + list(items) if list(wanted) == ["all"] else list(wanted)
        for mech in names:
            if mech not in have and mech not in items:
                raise AblateError(f"study {study!r}: cannot {op} {mech!r}: {ablation['specialist']} has "
                                  f"{', '.join([*have, *items]) or 'no mechanisms'}")
            arm = copy.deepcopy(base if op == "add" else full)
            if mech in items:
                arm["agent"] = harnesses.agents.toggled(arm, mech, items[mech] if op == "add" else None)
                sign, label = ("+", ablation["baseline"]) if op == "add" else ("-", ablation["specialist"])
                arm["name"] = f"{label}{sign}{mech.replace(':', '-')}"
            elif op == "add":
                arm["mechanisms"] = {**_mechanisms(base), mech: copy.deepcopy(have[mech])}
                arm["name"] = f"{ablation['baseline']}+{mech}"
            else:
                arm["mechanisms"] = {k: v for k, v in have.items() if k != mech}
                arm["name"] = f"{ablation['specialist']}-{mech}"
            out[arm["name"]] = arm
    return out


def scope_shapes(scope: str, cfg: dict[str, Any], model: dict[str, Any], operator: str) -> list[dict[str, str]]:
    """The {public, eval} shape-set names each trial of this scope gets, for one operator."""
    shapes = dict(cfg["operators"]["shapes"])
    if scope in ("multi_shape", "smoke"):
        return [shapes]
    if scope == "single_shape":
        from ablate import operators  # the runner has loaded external operator sets by now

        op = operators.get(operator)
        return [{"public": f"{shapes['eval']}[{sid}]", "eval": f"{shapes['eval']}[{sid}]"}
                for sid in (operators.shape_id(s) for s in op.shape_set(shapes["eval"]))]
    raise AblateError(f"unknown scope {scope!r}; valid scopes: {', '.join(SCOPES)}")


def auxiliary_models(cfg: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Models besides the agent's that every arm of the match shares (their ids join the match key)."""
    return {"reviewer": dict(cfg["reviewer_model"])} if cfg.get("reviewer_model") else {}


def expand(cfg: dict[str, Any], operator_names: list[str] | None = None) -> list[TrialSpec]:
    study = cfg["study"]
    model = cfg.get("model") or study.get("model")
    if not model:
        raise AblateError("no model: give +model=NAME (e.g. +model=scripted) or set study.model")
    budget = dict(cfg["budget"])
    unknown = [k for k in budget if k not in harnesses.Budget.__dataclass_fields__]
    if unknown:
        raise AblateError(f"budget: unknown key {unknown[0]!r}; valid: {', '.join(harnesses.Budget.__dataclass_fields__)}")
    aux = auxiliary_models(cfg)
    chosen = arms(cfg)
    for harness in chosen.values():
        harnesses.build(harness, aux)  # unknown mechanisms or options fail here, before any trial
    names = list(operator_names if operator_names is not None else cfg["operators"]["names"])
    scopes = list(study.get("scopes") or ["multi_shape"])
    specs = []
    for scope in scopes:
        for operator in names:
            for shapes in scope_shapes(scope, cfg, model, operator):
                for seed in (int(s) for s in study["seeds"]):
                    for arm_name, harness in chosen.items():
                        specs.append(TrialSpec(
                            study=study["name"], arm=arm_name, harness=harness, model=dict(model), operator=operator,
                            shapes=shapes, seed=seed, budget=budget, sandbox=dict(cfg.get("sandbox") or {}),
                            operator_set=dict(cfg["operators"]), scope=scope, auxiliary_models=aux))
    return specs
