import pytest

from ablate.errors import AblateError
from ablations import arms, expand

GOAL = {"name": "goal_only", "mechanisms": {}}
KDA = {"name": "kda05", "mechanisms": {"knowledge": {}, "workflow": {}, "reviewer": {"rounds": 1}}}
MODEL = {"name": "scripted", "provider": "scripted", "id": "scripted-kernel-search-v1"}


def cfg(**study):
    base = {"name": "s", "seeds": [0, 1], "arms": {"goal_only": GOAL, "kda05": KDA}, "model": MODEL}
    return {"study": base | study, "operators": {"names": ["rmsnorm"], "shapes": {"public": "smoke", "eval": "smoke"}},
            "budget": {"turns": 10}, "sandbox": {}}


def test_arms_share_everything_but_the_harness():
    specs = expand(cfg())
    assert len(specs) == 4
    by_seed = {}
    for s in specs:
        by_seed.setdefault(s.seed, []).append(s)
    for seed, pair in by_seed.items():
        assert {s.arm for s in pair} == {"goal_only", "kda05"}
        assert pair[0].match_key == pair[1].match_key
        assert pair[0].trial_id != pair[1].trial_id
    assert by_seed[0][0].match_key != by_seed[1][0].match_key


def test_match_key_changes_with_model_and_budget():
    a = expand(cfg())[0]
    c = cfg()
    c["budget"] = {"turns": 11}
    assert expand(c)[0].match_key != a.match_key
    c = cfg()
    c["model"] = dict(MODEL, id="other-model")
    assert expand(c)[0].match_key != a.match_key


def test_plus_harness_narrows_to_one_arm():
    c = cfg()
    c["harness"] = KDA
    specs = expand(c)
    assert {s.arm for s in specs} == {"kda05"} and len(specs) == 2
    # pairs with the goal_only trials of a run that named only goal_only
    c2 = cfg()
    c2["harness"] = GOAL
    assert {s.match_key for s in specs} == {s.match_key for s in expand(c2)}


def test_single_mechanism_ablation_adds_and_removes():
    found = arms(cfg(arms={"goal_only": GOAL}, ablation={"base": "goal_only", "add": ["knowledge", "workflow"]}))
    assert set(found) == {"goal_only", "goal_only+knowledge", "goal_only+workflow"}
    assert set(found["goal_only+knowledge"]["mechanisms"]) == {"knowledge"}
    found = arms(cfg(ablation={"base": "kda05", "remove": ["reviewer"]}))
    assert set(found["kda05-reviewer"]["mechanisms"]) == {"knowledge", "workflow"}
    with pytest.raises(AblateError, match="cannot remove 'profiler'"):
        arms(cfg(ablation={"base": "kda05", "remove": ["profiler"]}))


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
    assert f["evaluator_version"] == str(getattr(ablate.evaluate, "VERSION", "1"))
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
    monkeypatch.setattr(ablate.evaluate, "VERSION", "999", raising=False)
    assert expand(cfg())[0].match_key != a.match_key
