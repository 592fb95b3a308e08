"""Arms, scopes and pairing: what a study plans, from a plain config."""
import pytest

from ablate.errors import AblateError
from ablate.ablations import arms, expand, scope_shapes

GOAL = {"name": "goal_only", "mechanisms": {}}
KDA = {"name": "kda05", "mechanisms": {"knowledge": {"max_results": 3}, "workflow": {}, "reviewer": {"rounds": 2},
                                       "profiler": None}}
MODEL = {"name": "scripted", "provider": "scripted", "id": "scripted-kernel-search-v1"}


def cfg(**study):
    base = {"name": "s", "seeds": [0, 1], "arms": {"goal_only": GOAL, "kda05": KDA}, "model": MODEL,
            "scopes": ["multi_shape"]}
    return {"study": base | study, "operators": {"names": ["rmsnorm"], "shapes": {"public": "public", "eval": "eval"}},
            "budget": {"turns": 10}, "sandbox": {}}


def test_arms_share_everything_but_the_harness():
    specs = expand(cfg())
    assert len(specs) == 4
    by_seed = {}
    for s in specs:
        by_seed.setdefault(s.seed, []).append(s)
    for pair in by_seed.values():
        assert {s.arm for s in pair} == {"goal_only", "kda05"}
        assert pair[0].match_key == pair[1].match_key
        assert pair[0].trial_id != pair[1].trial_id
    assert by_seed[0][0].match_key != by_seed[1][0].match_key


def test_match_key_changes_with_model_budget_shapes_and_an_auxiliary_model():
    a = expand(cfg())[0]
    for change in ({"budget": {"turns": 11}}, {"operators": {"names": ["rmsnorm"], "shapes": {"public": "smoke", "eval": "eval"}}},
                   {"reviewer_model": {"provider": "anthropic", "id": "claude-fable-5-1"}}):
        c = cfg() | change
        assert expand(c)[0].match_key != a.match_key, change
    c = cfg()
    c["study"]["model"] = dict(MODEL, id="other-model")
    assert expand(c)[0].match_key != a.match_key


def test_a_reviewer_model_is_shared_by_every_arm_of_the_match():
    c = cfg() | {"reviewer_model": {"provider": "anthropic", "id": "claude-fable-5-1"}}
    specs = expand(c)
    assert all(s.auxiliary_models == {"reviewer": c["reviewer_model"]} for s in specs)  # goal_only too: it pairs
    assert len({s.match_key for s in specs if s.seed == 0}) == 1


def test_plus_harness_narrows_to_one_arm():
    c = cfg()
    c["harness"] = KDA
    specs = expand(c)
    assert {s.arm for s in specs} == {"kda05"} and len(specs) == 2
    c2 = cfg()
    c2["harness"] = GOAL
    assert {s.match_key for s in specs} == {s.match_key for s in expand(c2)}


def test_derived_arms_take_their_mechanism_from_the_specialist():
    found = arms(cfg(ablation={"baseline": "goal_only", "specialist": "kda05", "add": ["all"], "remove": ["reviewer"]}))
    assert set(found) == {"goal_only", "kda05", "goal_only+knowledge", "goal_only+workflow", "goal_only+reviewer",
                          "kda05-reviewer"}
    assert found["goal_only+knowledge"]["mechanisms"] == {"knowledge": {"max_results": 3}}  # configured as in kda05
    assert found["goal_only+reviewer"]["mechanisms"] == {"reviewer": {"rounds": 2}}
    assert set(found["kda05-reviewer"]["mechanisms"]) == {"knowledge", "workflow"}  # null (off) mechanisms drop out
    with pytest.raises(AblateError, match="cannot remove 'profiler': kda05 has knowledge, workflow, reviewer"):
        arms(cfg(ablation={"baseline": "goal_only", "specialist": "kda05", "remove": ["profiler"]}))
    with pytest.raises(AblateError, match="ablation specialist 'kda06' is not an arm"):
        arms(cfg(ablation={"baseline": "goal_only", "specialist": "kda06", "add": ["all"]}))


def test_single_shape_scope_gives_one_trial_per_eval_shape_the_agent_sees():
    from ablate import operators

    specs = expand(cfg(scopes=["single_shape"], seeds=[0]))
    evals = operators.get("rmsnorm").shape_set("eval")
    assert len(specs) == 2 * len(evals)
    shapes = sorted({s.shapes["eval"] for s in specs})
    assert shapes == sorted(f"eval[{operators.shape_id(e)}]" for e in evals)
    for s in specs:
        assert s.shapes["public"] == s.shapes["eval"] and s.scope == "single_shape"
        assert len(operators.get("rmsnorm").shape_set(s.shapes["eval"])) == 1
    assert len({s.match_key for s in specs}) == len(evals)  # each shape its own match


def test_smoke_scope_takes_the_shapes_as_configured():
    """The smoke shapes for the scripted model are the default study's config (conf/study/smoke.yaml),
    so a user's operators.shapes override wins; the scope itself plans what the config says."""
    c = cfg(scopes=["smoke"])
    assert scope_shapes("smoke", c, MODEL, "rmsnorm") == [{"public": "public", "eval": "eval"}]
    c["operators"]["shapes"] = {"public": "smoke", "eval": "smoke"}
    assert scope_shapes("smoke", c, {"provider": "anthropic", "id": "m"}, "rmsnorm") == [{"public": "smoke", "eval": "smoke"}]
    with pytest.raises(AblateError, match="unknown scope 'tiny'; valid scopes: multi_shape, single_shape, smoke"):
        expand(cfg(scopes=["tiny"]))


def test_bad_budget_keys_and_mechanism_options_fail_before_any_trial():
    c = cfg()
    c["budget"] = {"turns": 10, "max_token": 100}
    with pytest.raises(AblateError, match="valid: turns, tokens, cost_usd, wall_s, tool_s, gpu_s"):
        expand(c)
    with pytest.raises(AblateError, match="no option 'round'"):
        expand(cfg(arms={"r": {"name": "r", "mechanisms": {"reviewer": {"round": 1}}}}))


def test_no_model_is_a_clear_error():
    c = cfg()
    del c["study"]["model"]
    with pytest.raises(AblateError, match=r"\+model="):
        expand(c)


def test_match_key_holds_what_could_change_a_result(tmp_path, monkeypatch):
    import ablate.evaluate

    a = expand(cfg())[0]
    f = a.match_fields
    assert f["shape_lists"]["eval"] and f["shape_lists"]["public"]  # the shapes themselves, not only their set's name
    assert set(f["task"]) == {"goal", "prompt", "files"} and "reference.py" in f["task"]["files"]
    assert f["evaluator_version"] == ablate.evaluate._reasons.VERSION
    kernel = tmp_path / "theirs.py"
    kernel.write_text("def kernel(x, w): ...\n")
    for ext in ({"theirs": str(kernel)}, {"rmsnorm": {"theirs": str(kernel)}}):  # flat and per operator
        c = cfg()
        c["operators"] = dict(c["operators"], external_baselines=ext)
        b = expand(c)[0]
        assert b.match_fields["external_baselines"]["theirs"] != a.match_fields["external_baselines"].get("theirs")
        assert b.match_key != a.match_key
    c = cfg()
    c["sandbox"] = {"command_timeout_s": 5}
    assert expand(c)[0].match_key != a.match_key
    c["sandbox"] = {"bwrap": "/opt/bwrap"}  # where the binary is installed is no limit
    assert expand(c)[0].match_key == a.match_key
    monkeypatch.setattr(ablate.evaluate._reasons, "VERSION", "999")
    assert expand(cfg())[0].match_key != a.match_key


def test_the_core_prompts_hashes_are_in_the_match_key(monkeypatch):
    from ablate import harnesses

    before = expand(cfg())[0].match_key
    monkeypatch.setattr(harnesses, "core_hashes", lambda: {"prompts/core.md": "0" * 64, "prompts/task.md": "1" * 64})
    assert expand(cfg())[0].match_key != before
