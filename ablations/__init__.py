"""Study designs: which arms run, how they pair, and single-mechanism ablations.

``expand(cfg)`` turns a composed config into TrialSpecs: arms x operators x seeds, every arm with
the same model, operators, shapes, budget and seeds, so trials pair by match key. Arms come from
``+harness=X`` when given (one arm), else from the study. A study may derive arms from a base
harness by adding (``add``) or removing (``remove``) one mechanism at a time:

    ablation: {base: goal_only, add: [knowledge, workflow]}
      -> goal_only, goal_only+knowledge, goal_only+workflow
    ablation: {base: kda05, remove: [reviewer]}
      -> kda05, kda05-reviewer
"""
from __future__ import annotations

import copy
from typing import Any

from ablate.errors import AblateError
from ablate.trial import TrialSpec


def arms(cfg: dict[str, Any]) -> dict[str, dict[str, Any]]:
    study = cfg["study"]
    if cfg.get("harness"):
        return {cfg["harness"]["name"]: cfg["harness"]}
    found = {name: dict(h, name=h.get("name", name)) for name, h in (study.get("arms") or {}).items()}
    ablation = study.get("ablation")
    if ablation:
        base_name = ablation["base"]
        if base_name not in found:
            raise AblateError(f"study {study['name']!r}: ablation base {base_name!r} is not an arm; arms: {', '.join(found)}")
        base = found[base_name]
        for mech in ablation.get("add") or []:
            derived = copy.deepcopy(base)
            derived["mechanisms"] = dict(derived.get("mechanisms") or {}, **{mech: (ablation.get("options") or {}).get(mech) or {}})
            derived["name"] = f"{base_name}+{mech}"
            found[derived["name"]] = derived
        for mech in ablation.get("remove") or []:
            if mech not in (base.get("mechanisms") or {}):
                raise AblateError(f"study {study['name']!r}: cannot remove {mech!r}: {base_name} has {', '.join(base.get('mechanisms') or {}) or 'no mechanisms'}")
            derived = copy.deepcopy(base)
            derived["mechanisms"] = {k: v for k, v in base["mechanisms"].items() if k != mech}
            derived["name"] = f"{base_name}-{mech}"
            found[derived["name"]] = derived
    if not found:
        raise AblateError(f"study {study['name']!r} names no arms; add study.arms or give +harness=NAME")
    return found


def expand(cfg: dict[str, Any], operator_names: list[str] | None = None) -> list[TrialSpec]:
    study = cfg["study"]
    model = cfg.get("model") or study.get("model")
    if not model:
        raise AblateError("no model: give +model=NAME (e.g. +model=scripted) or set study.model")
    names = list(operator_names if operator_names is not None else cfg["operators"]["names"])
    seeds = [int(s) for s in study["seeds"]]
    specs = []
    for operator in names:
        for seed in seeds:
            for arm_name, harness in arms(cfg).items():
                specs.append(TrialSpec(
                    study=study["name"], arm=arm_name, harness=harness, model=dict(model), operator=operator,
                    shapes=dict(cfg["operators"]["shapes"]), seed=seed, budget=dict(cfg["budget"]),
                    sandbox=dict(cfg.get("sandbox") or {}), operator_set=dict(cfg["operators"]),
                ))
    return specs
