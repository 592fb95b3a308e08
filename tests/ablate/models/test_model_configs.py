"""Every conf/model file composes, carries the common keys, and builds its provider offline."""
from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from ablate.models import PROVIDERS, get

CONF = Path(__file__).resolve().parents[3] / "conf"
MINE = sorted(p.stem for p in (CONF / "model").glob("*.yaml") if p.stem != "scripted")
KEYS = {"name", "provider", "id", "max_tokens", "temperature", "thinking_budget", "seed", "price_per_mtok",
        "base_url", "max_retries", "timeout_s"}


def compose_model(name: str, *overrides: str):
    with initialize_config_dir(config_dir=str(CONF / "model"), version_base="1.3"):
        return compose(config_name=name, overrides=list(overrides))


@pytest.mark.parametrize("name", MINE)
def test_model_config_has_the_common_keys(name):
    cfg = compose_model(name)
    assert KEYS <= set(cfg), KEYS - set(cfg)
    assert cfg.provider in PROVIDERS
    assert set(cfg.price_per_mtok) == {"input", "output", "cache_read", "cache_write"}


@pytest.mark.parametrize("name", [n for n in MINE if n != "replay"])
def test_model_config_builds_its_provider_offline(name, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    cfg = OmegaConf.to_container(compose_model(name), resolve=True)
    model = get(cfg)
    assert model.id == cfg["id"]
    assert model.max_cost_of_next_call("system", [], []) >= 0


@pytest.mark.parametrize("name", [n for n in MINE if compose_model(n).provider == "anthropic"])
def test_paid_models_name_their_prices_and_date(name):
    text = (CONF / "model" / f"{name}.yaml").read_text()
    assert "as listed on 2026-" in text  # the price table says when it was read
    assert all(v > 0 for v in compose_model(name).price_per_mtok.values())


def test_model_id_is_overridable():
    assert compose_model("fable-5.1", "id=claude-fable-5-2").id == "claude-fable-5-2"


def test_replay_source_must_be_set():
    cfg = compose_model("replay")
    assert OmegaConf.is_missing(cfg, "source")
    assert compose_model("replay", "source=runs/default/t1").source == "runs/default/t1"
