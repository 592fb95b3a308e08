"""Config schemas, registered in Hydra's ConfigStore: a misspelt key fails when the config is
composed, with the valid keys in the message.

    python -m ablate budget.max_token=100
    -> Key 'max_token' not in 'budget (valid: turns, tokens, cost_usd, wall_s, tool_s, gpu_s)'

The schemas are made from the dataclasses the code runs with (the budget, the sandbox limits, each
mechanism's options), so a field exists in one place only. `conf/config.yaml` names the top-level
schema first in its defaults list; every config group merges into its typed node: `model` (and
`study.model`, `reviewer_model`), `harness` (and each `study.arms.*`), `budget`, `sandbox`, `study`.
Importing this module registers the schemas (the CLI and the config tests do).
"""
from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

import harnesses
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
    return dataclasses.make_dataclass(f"{label} (valid: {names})", specs)


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


Mechanisms = dataclasses.make_dataclass(
    f"mechanisms (valid: {', '.join(harnesses.MECHANISMS)})",
    [(name, Optional[schema_of(m.Options, name)], field(default=None)) for name, m in harnesses.MECHANISMS.items()])


@dataclass
class HarnessConfig:
    name: str = MISSING
    mechanisms: Mechanisms = field(default_factory=Mechanisms)  # null = off; {} = on with its default options


@dataclass
class AblationConfig:
    """Arms derived from two named arms, one mechanism at a time (see ablations)."""

    baseline: str = "goal_only"
    specialist: str = "kda05"
    add: List[str] = field(default_factory=list)  # baseline+X, X configured as in the specialist; [all]: each of its mechanisms
    remove: List[str] = field(default_factory=list)  # specialist-X; [all]: each of its mechanisms


@dataclass
class StudyConfig:
    name: str = MISSING
    seeds: List[int] = field(default_factory=lambda: [0])
    baseline_arm: Optional[str] = "goal_only"
    arms: Dict[str, HarnessConfig] = field(default_factory=dict)
    model: Optional[ModelConfig] = None
    ablation: Optional[AblationConfig] = None
    scopes: List[str] = field(default_factory=lambda: ["multi_shape"])  # see ablations.SCOPES
    description: str = ""


Budget = schema_of(harnesses.Budget, "budget")
Sandbox = schema_of(Limits, "sandbox")


@dataclass
class AblateConfig:
    operators: Any = MISSING  # conf/operators: names, shapes, external baselines, or an external source
    budget: Budget = field(default_factory=Budget)
    study: StudyConfig = MISSING
    sandbox: Sandbox = field(default_factory=Sandbox)
    store: str = "runs"
    parallel: Any = "auto"
    retries: int = 2  # more attempts for a trial that failed for a reason not the agent's
    retry_delay_s: float = 60.0
    analysis: Dict[str, Any] = field(default_factory=dict)
    model: Optional[ModelConfig] = None  # +model=NAME: the study's arms with this model
    harness: Optional[HarnessConfig] = None  # +harness=NAME: only this arm
    reviewer_model: Optional[ModelConfig] = None  # +model@reviewer_model=NAME; null: the agent's own model
    flashinfer: Optional[Dict[str, Any]] = None  # conf/operators/flashinfer.yaml's own keys
    kernelbench: Optional[Dict[str, Any]] = None  # conf/operators/kernelbench.yaml's own keys


def register() -> None:
    ConfigStore.instance().store(name=SCHEMA, node=AblateConfig)


register()
