"""Every option of every config group composes against the schemas; misspelt keys fail at compose
time naming the valid ones; studies decide their scope and the user's overrides win."""
import shutil
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

import ablate.config  # noqa: F401 - registers the schemas
from ablate import ablations
from ablate import operators

CONF = Path(__file__).resolve().parents[2] / "conf"
GROUPS = ["harness", "model", "operators", "study", "budget"]
# Options with a value the user must give (`???`), and a stand-in for it.
REQUIRED = {("model", "replay"): ["model.source=runs/x/y"],
            ("operators", "flashinfer"): ["flashinfer.path=/data/flashinfer-trace"],
            ("operators", "kernelbench"): ["kernelbench.path=/data/KernelBench"]}


def options(group):
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


@pytest.fixture
def hydra_ctx():
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        yield


def plain(cfg):
    return OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)


def test_default_composes_to_the_smoke_study(hydra_ctx):
    cfg = compose("config")
    assert cfg.study.name == "smoke" and list(cfg.study.scopes) == ["smoke"]
    assert set(cfg.study.arms) == {"goal_only", "kda05"}
    assert cfg.study.model.provider == "scripted"
    assert list(cfg.operators.names) == ["rmsnorm"]
    assert cfg.get("harness") is None and cfg.get("model") is None  # so `+harness=` / `+model=` work
    specs = ablations.expand(plain(cfg))
    assert {s.shapes["eval"] for s in specs} == {"smoke"} and len(specs) == 4


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


def test_harness_files_are_goal_only_and_kda05_with_every_mechanism_from_its_own_file(hydra_ctx):
    loop = []  # ablate's own loop's harnesses (the others name an external agent: tests/harnesses/test_agents.py)
    for opt in options("harness"):
        harness = compose("config", overrides=[f"+harness={opt}"]).harness
        assert harness.name == opt
        loop += [opt] if harness.agent is None else []
    assert loop == ["goal_only", "kda05"]  # single-mechanism arms are derived, not files
    kda = compose("config", overrides=["+harness=kda05"]).harness.mechanisms
    from ablate import harnesses

    assert sorted(k for k, v in kda.items() if v is not None) == sorted(harnesses.MECHANISMS)
    assert sorted(p.stem for p in (CONF / "harness" / "mechanism").glob("*.yaml")) == sorted(harnesses.MECHANISMS)
    assert kda.reviewer.rounds == 42 and kda.workflow.iterations_per_direction == 5


@pytest.fixture
def conf_copy(tmp_path):
    shutil.copytree(CONF, tmp_path / "conf")
    return tmp_path / "conf"


@pytest.mark.parametrize("path,text,message", [
    ("budget/typo.yaml", "turns: 10\nmax_token: 100\n",
     "Key 'max_token' not in 'budget (valid: turns, tokens, cost_usd, wall_s, tool_s, gpu_s)'"),
    ("harness/typo.yaml", "name: typo\nmechanisms:\n  knowlege: {}\n",
     "Key 'knowlege' not in 'mechanisms (valid: knowledge, search, workflow, profiler, reviewer, evaluate_tool)'"),
    ("harness/typo.yaml", "name: typo\nmechanisms:\n  reviewer: {round: 3}\n", "Key 'round' not in 'reviewer (valid: rounds)'"),
    ("model/typo.yaml", "name: typo\nprovider: scripted\nmax_token: 100\n",
     "object_type=model (valid: name, provider, id, max_tokens, temperature,"),
    ("study/typo.yaml", "# @package _global_\nstudy:\n  name: typo\n  seed: [0]\n",
     "object_type=study (valid: name, seeds, baseline_arm, arms, model, ablation, scopes, description)"),
    ("study/typo.yaml", "# @package _global_\nstudy:\n  name: typo\nstudies: {}\n",
     "Key 'studies' not in 'the config (valid: operators, budget, study,"),
])
def test_a_misspelt_key_fails_at_compose_time_naming_the_valid_ones(conf_copy, path, text, message):
    (conf_copy / path).write_text(text)
    group, name = path.removesuffix(".yaml").split("/")
    override = f"{'+' if group in ('harness', 'model') else ''}{group}={name}"
    with initialize_config_dir(config_dir=str(conf_copy), version_base="1.3"):
        with pytest.raises(ConfigCompositionException) as e:
            compose("config", overrides=[override])
    assert message in str(e.value.__cause__ or e.value) or message in str(e.value)


def test_a_misspelt_override_fails(hydra_ctx):
    for bad in ("budget.max_token=100", "sandbox.comand_timeout_s=3", "+harness=kda05 harness.mechanisms.knowlege={}"):
        with pytest.raises(ConfigCompositionException, match="Could not override"):
            compose("config", overrides=bad.split())


def test_a_real_model_run_gets_its_budget_and_public_eval_shapes(hydra_ctx):
    """Issue: the default study used to force smoke shapes and 30 turns on everything."""
    cfg = compose("config", overrides=["+harness=kda05", "+model=fable-5.1", "operators=gemm", "budget=small"])
    assert cfg.budget.turns == 20 and cfg.budget.tokens == 500000  # budget=small means small
    specs = ablations.expand(plain(cfg), ["gemm"])
    assert {s.arm for s in specs} == {"kda05"}
    assert {(s.shapes["public"], s.shapes["eval"]) for s in specs} == {("public", "eval")}
    assert all(s.budget["turns"] == 20 for s in specs)
    # ... while the default study, with its own scripted model, keeps its smoke shapes
    default = ablations.expand(plain(compose("config", overrides=["operators=gemm"])), ["gemm"])
    assert {s.shapes["eval"] for s in default} == {"smoke"}
    # and the user's shape override wins for a real model
    cfg = compose("config", overrides=["+model=fable-5.1", "operators.shapes.public=smoke"])
    assert {s.shapes["public"] for s in ablations.expand(plain(cfg))} == {"smoke"}


def test_the_users_shapes_win_over_the_default_studys_smoke_shapes(hydra_ctx):
    """The smoke shapes the default study gives the scripted model are config values, so an override
    replaces them: on a GPU, public/eval shapes give figures worth comparing."""
    both = ["operators.shapes.public=public", "operators.shapes.eval=eval"]
    specs = ablations.expand(plain(compose("config", overrides=both)))
    assert {(s.shapes["public"], s.shapes["eval"]) for s in specs} == {("public", "eval")} and len(specs) == 4
    one = ablations.expand(plain(compose("config", overrides=["operators.shapes.public=public"])))
    assert {(s.shapes["public"], s.shapes["eval"]) for s in one} == {("public", "smoke")}  # the other stays the study's
    named = plain(compose("config", overrides=["+model=scripted"]))  # the scripted model named by the user too
    assert named["operators"]["shapes"] == {"public": "smoke", "eval": "smoke"}


def test_a_composed_config_pickles_by_reference_for_a_sweeps_jobs(hydra_ctx):
    """A SLURM job receives its sweep's config pickled; the schemas must travel by name, not as
    by-value copies, or the job's own composition refuses keys its schema has ('arms' not in study)."""
    import pickle
    import subprocess
    import sys

    cfg = compose("config", overrides=["+harness=kda05"])
    blob = pickle.dumps(cfg)  # the generated schema classes are importable: plain pickle can name them
    assert pickle.loads(blob).study.arms.keys() == cfg.study.arms.keys()
    code = ("import pickle, sys, ablate.config as c; cfg = pickle.load(sys.stdin.buffer); "
            "print(type(cfg.study._get_node('arms')._metadata.element_type) is type and "
            "cfg.study._metadata.object_type is c.Study)")
    out = subprocess.run([sys.executable, "-c", code], input=blob, capture_output=True, timeout=120)
    assert out.stdout.strip() == b"True", out.stderr.decode()[-2000:]


def test_the_typed_schemas_name_their_valid_keys(hydra_ctx):
    """What OmegaConf prints for an unknown key in a YAML file is the node's type name: it lists the keys."""
    from ablate.config import key_problem

    assert key_problem(["study", "seed"]) == ("unknown key 'seed' (did you mean 'seeds'?); valid keys of study: "
                                              "name, seeds, baseline_arm, arms, model, ablation, scopes, description")
    assert key_problem(["operators", "anything", "goes"]) is None  # untyped: the operator loader checks it
    assert key_problem(["study", "arms", "any_arm", "mechanisms", "reviewer", "rounds"]) is None
    assert key_problem(["study", "arms", "any_arm", "mechanisms", "reviewer", "round"]).startswith(
        "unknown key 'round' (did you mean 'rounds'?); valid keys of study.arms.any_arm.mechanisms.reviewer: rounds")


def test_justgoal_plans_the_papers_design(hydra_ctx):
    cfg = compose("config", overrides=["study=justgoal", "+model=scripted"])
    assert list(cfg.operators.names) == list(operators.REGISTRY)
    specs = ablations.expand(plain(cfg))
    arms = {"goal_only", "kda05", "goal_only+knowledge", "goal_only+workflow"}
    assert {s.arm for s in specs} == arms
    per_op = {name: 1 + len(operators.get(name).shape_set("eval")) for name in operators.REGISTRY}  # multi + each shape
    assert len(specs) == sum(per_op.values()) * len(arms) * 3
    multi = [s for s in specs if s.scope == "multi_shape"]
    assert {(s.shapes["public"], s.shapes["eval"]) for s in multi} == {("public", "eval")}
    single = [s for s in specs if s.scope == "single_shape"]
    assert all(s.shapes["public"] == s.shapes["eval"] and s.shapes["eval"].startswith("eval[") for s in single)
    assert {s.seed for s in specs} == {0, 1, 2}
    for key in {s.match_key for s in specs}:  # every match has every arm
        assert {s.arm for s in specs if s.match_key == key} == arms
    gk = next(s for s in specs if s.arm == "goal_only+knowledge").harness["mechanisms"]
    assert set(gk) == {"knowledge"}


def test_mechanisms_study_plans_every_add_and_remove_arm(hydra_ctx):
    from ablate import harnesses

    cfg = compose("config", overrides=["study=mechanisms", "+model=scripted", "operators=rmsnorm", "study.seeds=[0]"])
    specs = ablations.expand(plain(cfg))
    names = set(harnesses.MECHANISMS)
    assert {s.arm for s in specs} == ({"goal_only", "kda05"} | {f"goal_only+{m}" for m in names}
                                      | {f"kda05-{m}" for m in names})
    assert len(specs) == 2 + 2 * len(names) and len({s.match_key for s in specs}) == 1


def test_the_gpu_smoke_command_composes(hydra_ctx):
    cfg = compose("config", overrides=["study=justgoal", "+model=scripted", "operators.names=[rmsnorm,softmax]",
                                       "study.seeds=[0]", "study.scopes=[multi_shape]"])
    specs = ablations.expand(plain(cfg))
    assert len(specs) == 8 and {s.operator for s in specs} == {"rmsnorm", "softmax"}


def test_reviewer_model_is_a_model_option(hydra_ctx):
    cfg = compose("config", overrides=["+model=fable-5.1", "+model@reviewer_model=claude-haiku-4.5"])
    specs = ablations.expand(plain(cfg))
    assert {s.auxiliary_models["reviewer"]["name"] for s in specs} == {"claude-haiku-4.5"}


def test_slurm_launcher_composes(hydra_ctx):
    cfg = compose("config", overrides=["hydra/launcher=slurm"], return_hydra_config=True)
    assert cfg.hydra.launcher.gpus_per_node == 1
    assert "submitit" in cfg.hydra.launcher._target_.lower()
