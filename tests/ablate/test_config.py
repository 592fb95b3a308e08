"""Every option of every config group composes; the user's commands compose as written."""
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

CONF = Path(__file__).resolve().parents[2] / "conf"
GROUPS = ["harness", "model", "operators", "study", "budget"]
# Options with a value the user must give (`???`), and a stand-in for it.
REQUIRED = {("model", "replay"): ["model.source=runs/x/y"],
            ("operators", "flashinfer"): ["flashinfer.path=/data/flashinfer-trace"],
            ("operators", "kernelbench"): ["kernelbench.path=/data/KernelBench"]}


def options(group):
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


@pytest.fixture(scope="module")
def hydra_ctx():
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        yield


def test_default_composes_to_the_default_study(hydra_ctx):
    cfg = compose("config")
    assert cfg.study.name == "default"
    assert set(cfg.study.arms) == {"goal_only", "kda05"}
    assert cfg.study.model.provider == "scripted"
    assert list(cfg.operators.names) == ["rmsnorm"]
    assert dict(cfg.operators.shapes) == {"public": "smoke", "eval": "smoke"}
    assert "harness" not in cfg and "model" not in cfg  # so `+harness=` / `+model=` work


@pytest.mark.parametrize("group", GROUPS)
def test_every_option_composes(hydra_ctx, group):
    opts = options(group)
    assert opts, f"conf/{group} is empty"
    for opt in opts:
        prefix = "+" if group in ("harness", "model") else ""
        overrides = [f"{prefix}{group}={opt}"] + REQUIRED.get((group, opt), [])
        cfg = compose("config", overrides=overrides)
        node = cfg[group] if group != "study" else cfg.study
        assert node, f"{group}={opt} composed to nothing"
        OmegaConf.to_container(cfg, resolve=True)  # interpolations resolve


def test_users_command_composes(hydra_ctx):
    cfg = compose("config", overrides=["+harness=kda05", "+model=fable-5.1"])
    assert cfg.harness.name == "kda05" and "reviewer" in cfg.harness.mechanisms
    assert cfg.model.provider == "anthropic" and cfg.model.id


def test_harness_names_match_their_files(hydra_ctx):
    for opt in options("harness"):
        assert compose("config", overrides=[f"+harness={opt}"]).harness.name == opt


def test_slurm_launcher_composes(hydra_ctx):
    cfg = compose("config", overrides=["hydra/launcher=slurm"], return_hydra_config=True)
    assert cfg.hydra.launcher.gpus_per_node == 1
    assert "submitit" in cfg.hydra.launcher._target_.lower()
