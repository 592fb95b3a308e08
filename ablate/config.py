"""Config schemas, registered in Hydra's ConfigStore: a misspelt key fails when the config is
composed, with the valid keys in the message.

    python -m ablate +budget.turnz=1
    -> error: +budget.turnz=1: unknown key 'turnz' (did you mean 'turns'?); valid keys of budget: turns, ...

A key added with `+` (`+study.seed=[0]`) escapes Hydra's typed check, so the CLI checks every
override's key against the schemas first (`check_overrides`); a misspelt key in a YAML file fails
at compose time with the node's valid keys in its name.

The schemas are made from the dataclasses the code runs with (the budget, the sandbox limits, each
mechanism's options), so a field exists in one place only. `conf/config.yaml` names the top-level
schema first in its defaults list; every config group merges into its typed node: `model` (and
`study.model`, `reviewer_model`), `harness` (and each `study.arms.*`), `budget`, `sandbox`, `study`.
Importing this module registers the schemas (the CLI and the config tests do).
"""
from __future__ import annotations

import dataclasses
import difflib
import typing
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf

from ablate import harnesses
from ablate.sandbox import Limits

SCHEMA = "ablate_schema"  # the ConfigStore name conf/config.yaml lists first


def schema_of(cls: type, label: str) -> type:
    """A non-frozen copy of dataclass `cls` named after its config node and its valid keys (the
    name is what OmegaConf prints for an unknown key). Tuples become lists, as YAML gives them."""
    hints = typing.get_type_hints(cls)
    specs = []
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if typing.get_origin(tp) is tuple:
            tp = List[typing.get_args(tp)[0]]
            default = field(default_factory=lambda d=f.default: list(d))
        elif f.default_factory is not dataclasses.MISSING:
            default = field(default_factory=f.default_factory)
        else:
            default = field(default=f.default)
        specs.append((f.name, tp, default))
    names = ", ".join(f.name for f in dataclasses.fields(cls)) or "none"
    return importable(dataclasses.make_dataclass(f"{label} (valid: {names})", specs))


def importable(cls: type) -> type:
    """Make a generated schema class this module's attribute, so pickle (and the cloudpickle that
    carries a sweep's config to its SLURM jobs) refers to it by name: a by-value copy in the job
    would be a different class from the one the job's ConfigStore composes with, and OmegaConf then
    refuses keys the schema has."""
    assert cls.__qualname__ not in globals(), f"two schemas named {cls.__qualname__!r}"
    cls.__module__ = __name__
    globals()[cls.__qualname__] = cls
    return cls


@dataclass
class ModelConfig:
    """Every provider's keys (conf/model/*.yaml); a provider reads the ones it knows."""

    name: Optional[str] = None
    provider: str = MISSING  # anthropic | openai | scripted | replay
    id: Optional[str] = None
    max_tokens: Optional[int] = None
    temperature: Optional[float] = None
    thinking: Optional[str] = None
    thinking_budget: Optional[int] = None
    effort: Optional[str] = None
    seed: Optional[int] = None
    stream: Optional[bool] = None
    price_per_mtok: Optional[Dict[str, float]] = None
    base_url: Optional[str] = None
    api_key_env: Optional[str] = None
    max_retries: Optional[int] = None
    retry_base_s: Optional[float] = None
    timeout_s: Optional[float] = None
    policy: Optional[str] = None  # scripted
    actions: Optional[List[Any]] = None  # scripted, policy "actions"
    source: Optional[str] = None  # replay
    check: Optional[str] = None  # replay


Mechanisms = importable(dataclasses.make_dataclass(
    f"mechanisms (valid: {', '.join(harnesses.MECHANISMS)})",
    [(name, Optional[schema_of(m.Options, name)], field(default=None)) for name, m in harnesses.MECHANISMS.items()]))


Model = schema_of(ModelConfig, "model")


Agent = schema_of(harnesses.agents.AgentConfig, "agent")


@dataclass
class HarnessConfig:
    name: str = MISSING
    mechanisms: Mechanisms = field(default_factory=Mechanisms)  # null = off; {} = on with its default options
    agent: Optional[Agent] = None  # null: ablate's own loop; else an external agent (harnesses/agents)


@dataclass
class AblationConfig:
    """Arms derived from two named arms, one mechanism at a time (see ablations)."""

    baseline: str = "goal_only"
    specialist: str = "kda05"
    add: List[str] = field(default_factory=list)  # baseline+X, X configured as in the specialist; [all]: each of its mechanisms
    remove: List[str] = field(default_factory=list)  # specialist-X; [all]: each of its mechanisms


Harness = schema_of(HarnessConfig, "harness")
Ablation = schema_of(AblationConfig, "ablation")


@dataclass
class StudyConfig:
    name: str = MISSING
    seeds: List[int] = field(default_factory=lambda: [0])
    baseline_arm: Optional[str] = "goal_only"
    arms: Dict[str, Harness] = field(default_factory=dict)
    model: Optional[Model] = None
    ablation: Optional[Ablation] = None
    scopes: List[str] = field(default_factory=lambda: ["multi_shape"])  # see ablations.SCOPES
    description: str = ""


Study = schema_of(StudyConfig, "study")
Budget = schema_of(harnesses.Budget, "budget")
Sandbox = schema_of(Limits, "sandbox")


@dataclass
class AblateConfig:
    operators: Any = MISSING  # conf/operators: names, shapes, external baselines, or an external source
    budget: Budget = field(default_factory=Budget)
    study: Study = MISSING
    sandbox: Sandbox = field(default_factory=Sandbox)
    store: str = "runs"
    parallel: Any = "auto"
    retries: int = 2  # more attempts for a trial that failed for a reason not the agent's
    retry_delay_s: float = 60.0
    analysis: Dict[str, Any] = field(default_factory=dict)
    model: Optional[Model] = None  # +model=NAME: the study's arms with this model
    harness: Optional[Harness] = None  # +harness=NAME: only this arm
    reviewer_model: Optional[Model] = None  # +model@reviewer_model=NAME; null: the agent's own model
    flashinfer: Optional[Dict[str, Any]] = None  # conf/operators/flashinfer.yaml's own keys
    kernelbench: Optional[Dict[str, Any]] = None  # conf/operators/kernelbench.yaml's own keys
    dry_run: bool = False  # print the plan (trials, what is stored, GPU time, model cost) and run nothing


Root = schema_of(AblateConfig, "the config")
ADDED_BY_THE_SWEEPER = ("trial",)  # +trial=<id>: the one trial a sweep's job runs (hydra_plugins/ablate_sweeper)
NEED_A_CHOICE = {  # nodes that are null until a group option fills them, and how to change them instead
    "model": "+model=NAME first (e.g. +model=fable-5.1), or change the study's own model with study.model.KEY=...",
    "harness": "+harness=NAME first (e.g. +harness=kda05), or change a study's arm with study.arms.ARM.KEY=...",
    "reviewer_model": "+model@reviewer_model=NAME first (e.g. +model@reviewer_model=claude-haiku-4.5)"}


def _node_type(tp: Any) -> Any:
    """Optional[X] -> X."""
    if typing.get_origin(tp) is typing.Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return args[0] if len(args) == 1 else Any
    return tp


def key_problem(path: list[str]) -> str | None:
    """Why a dotted key is not in the schema (one line naming the valid keys), or None. Keys under
    a node typed Any (operators, analysis) are the code's to check."""
    tp: Any = Root
    for i, part in enumerate(path):
        tp = _node_type(tp)
        if dataclasses.is_dataclass(tp):
            names = [f.name for f in dataclasses.fields(tp)]
            if part not in names:
                where = ".".join(path[:i]) or "the config"
                close = difflib.get_close_matches(part, names, n=1)
                return (f"unknown key {part!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
                        + f"; valid keys of {where}: {', '.join(names)}")
            tp = typing.get_type_hints(tp)[part]
        elif typing.get_origin(tp) is dict:
            tp = typing.get_args(tp)[1]
        else:
            return None
    return None


def check_overrides(overrides: list[str]) -> None:
    """Raise AblateError (one line: the override, its unknown key, the valid keys) for a command-line
    override whose key the schemas do not have, `+` or not, or that changes a node nothing set.
    Group choices (`study=justgoal`, `+model=fable-5.1`) and Hydra's own keys are Hydra's to check."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from ablate.errors import AblateError

    parsed = OverridesParser.create().parse_overrides(overrides)
    chosen = {o.package or o.key_or_group for o in parsed if "." not in o.key_or_group}
    for o in parsed:
        key = o.key_or_group
        path = key.split(".")
        if "/" in key or o.package is not None or path[0] in ("hydra", *ADDED_BY_THE_SWEEPER):
            continue
        if len(path) == 1 and dataclasses.is_dataclass(_node_type(typing.get_type_hints(Root).get(key))):
            continue  # a config group's option (budget=small, +model=NAME)
        problem = key_problem(path)
        if problem:
            raise AblateError(f"{o.input_line}: {problem}")
        if len(path) > 1 and path[0] in NEED_A_CHOICE and path[0] not in chosen and not (o.is_add() or o.is_force_add()):
            raise AblateError(f"{o.input_line}: no {path[0]} is set in this run to change; give "
                              f"{NEED_A_CHOICE[path[0]]}")


def scripted_smoke(which: str, _root_: Any) -> str:
    """`${scripted_smoke:public}` (conf/study/smoke.yaml): "smoke" when the run's model (+model, else
    the study's) is the scripted policy, else `which`; a value the user sets replaces it."""
    model = _root_.get("model") or _root_.get("study", {}).get("model") or {}
    return "smoke" if model.get("provider") == "scripted" else which


def register() -> None:
    ConfigStore.instance().store(name=SCHEMA, node=Root)
    if not OmegaConf.has_resolver("scripted_smoke"):
        OmegaConf.register_new_resolver("scripted_smoke", scripted_smoke)


register()
