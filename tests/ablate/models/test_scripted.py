"""The scripted policy: reads the task, tries each template configuration with the tools it has,
keeps the fastest correct one; uses each mechanism for real (the wiki's recommendations pick the
first configuration, the workflow's steps, the search's lineage, the profile's diagnosis, the
reviewer's objection answered); reviews for real when asked; plays fixed actions for tests."""
import json

import pytest

from ablate import models
from ablate.errors import AblateError
from ablate.models import Message, ToolSpec
from ablate.models._scripted import choose_configs, configs_from_knowledge, review, template

TASK = "Operator: rmsnorm\n\nGoal...\nPublic shapes (the evaluation also uses hidden shapes): [{\"M\": 8}]\nBudget: 40 turns."
CORE = ("bash", "read_file", "write_file", "list_files", "submit")


def specs(*names):
    return [ToolSpec(n, "", {"type": "object", "properties": {}}) for n in names]


def drive(model, tools, answer, task=TASK, limit=80):
    """Run the policy against fake tools; `answer(call, kernel_source)` gives each tool's output
    (a string, or (string, is_error))."""
    messages = [Message("user", task)]
    files, used = {}, []
    for _ in range(limit):
        r = model.generate("system", messages, tools)
        messages.append(r.as_message())
        if not r.tool_calls:
            return messages, files, used
        call = r.tool_calls[0]
        used.append(call)
        if call.name == "write_file":
            files[call.arguments["path"]] = call.arguments["content"]
        out = answer(call, files.get("kernel.py", ""))
        text, err = out if isinstance(out, tuple) else (out, False)
        if call.name == "submit" and not err:
            return messages, files, used
        messages.append(Message("tool", text, tool_call_id=call.id, is_error=err))
    raise AssertionError("policy never stopped")


def config_of(source):
    return next(line for line in source.splitlines() if line.startswith("CONFIG = "))


def index_of(kernel, configs):
    return next(i for i, c in enumerate(configs) if config_of(kernel) == f"CONFIG = {c!r}")


def test_goal_only_writes_its_own_check_and_keeps_the_fastest():
    source, configs = template("rmsnorm")
    ms = {i: (1.0 if i == 2 else 2.0 + i) for i in range(len(configs))}

    def answer(call, kernel):
        if call.name == "bash":
            assert call.arguments["command"] == "python check.py"
            return f"RESULT correct=1 max_err=0.01 ms={ms[index_of(kernel, configs)]}\n[exit code 0]"
        return "ok"

    _, files, used = drive(models.get({"provider": "scripted"}), specs(*CORE), answer)
    assert "from reference import" in files["check.py"]
    assert config_of(files["kernel.py"]) == f"CONFIG = {configs[2]!r}"
    assert [c.name for c in used].count("bash") == len(configs)
    assert {c.name for c in used} <= set(CORE)


def test_incorrect_configurations_are_never_kept():
    source, configs = template("rmsnorm")

    def answer(call, kernel):
        if call.name == "bash":  # config 0 is "fastest" but wrong; config 1 is the best correct one
            i = index_of(kernel, configs)
            return f"RESULT correct={0 if i == 0 else 1} max_err=0.01 ms={0.5 if i == 0 else 1.0 + i}"
        return "ok"

    _, files, _ = drive(models.get({"provider": "scripted"}), specs(*CORE), answer)
    assert config_of(files["kernel.py"]) == f"CONFIG = {configs[1]!r}"


def test_the_wiki_picks_the_first_configuration():
    from harnesses.mechanisms import knowledge as kb

    source, configs = template("rmsnorm")
    hits = kb.search("rmsnorm starting configurations num warps", 5)
    output = json.dumps([{"page": s.page, "text": s.text} for s, _ in hits])
    recommended = configs_from_knowledge(output, set(configs[0]))
    assert recommended[:2] == [{"num_warps": 8, "rows_per_program": 1}, {"num_warps": 4, "rows_per_program": 1}]
    order = choose_configs(configs, recommended)
    assert order[0] == {"num_warps": 8, "rows_per_program": 1} != configs[0] and sorted(map(str, order)) == sorted(map(str, configs))

    def answer(call, kernel):
        if call.name == "search_knowledge":
            return output
        return "RESULT correct=1 max_err=0 ms=1.0" if call.name == "bash" else "ok"

    def first_kernel(tools):
        _, _, used = drive(models.get({"provider": "scripted"}), specs(*tools), answer)
        return next(c.arguments["content"] for c in used if c.name == "write_file" and c.arguments["path"] == "kernel.py")

    assert config_of(first_kernel(CORE + ("search_knowledge", "read_knowledge"))) == f"CONFIG = {order[0]!r}"
    assert config_of(first_kernel(CORE)) == f"CONFIG = {configs[0]!r}"  # without the wiki: the template's order


@pytest.mark.parametrize("mechanism,tools", [
    ("knowledge", ("search_knowledge", "read_knowledge")), ("workflow", ("workflow",)), ("profiler", ("profile",)),
    ("search", ("candidate",)), ("evaluate_tool", ("evaluate",))])
def test_each_mechanism_is_used_and_nothing_else(mechanism, tools):
    source, configs = template("rmsnorm")

    def answer(call, kernel):
        if call.name == "evaluate":
            return json.dumps({"verdict": "accepted", "shapes": [{"time_ms": {"median": 3.0}}]})
        if call.name == "candidate":
            return json.dumps({"id": "c1", "evidence": {"correct": True, "ms": 2.0}})
        if call.name == "profile":
            return json.dumps({"diagnosis": ["latency-bound"], "recommendations": [{"expected_benefit": "high"}]})
        if call.name == "workflow":
            if call.arguments["action"] == "advance" and "CONFIG" in kernel:
                return json.dumps({"result": 'candidate 1 snapshotted to runs/1/, validated and measured: '
                                             '{"correct": true, "ms": 2.0}. Next: decide'})
            return json.dumps({"result": "ok", "phase": "correct", "phases": ["correct"]})
        if call.name == "search_knowledge":
            return "[]"
        return "RESULT correct=1 max_err=0 ms=1.0" if call.name == "bash" else "ok"

    _, files, used = drive(models.get({"provider": "scripted"}), specs(*CORE, *tools), answer)
    names = [c.name for c in used]
    assert set(names) <= set(CORE) | set(tools)
    assert all(t in names for t in tools if t != "read_knowledge")
    assert ("check.py" in files) == (mechanism in ("knowledge", "profiler"))  # it measures with the harness's tool when there is one


def test_the_turn_budget_limits_the_search():
    calls = []

    def answer(call, kernel):
        calls.append(call.name)
        return "RESULT correct=1 max_err=0 ms=1.0" if call.name == "bash" else "ok"

    drive(models.get({"provider": "scripted"}), specs(*CORE), answer, task="Operator: rmsnorm\nBudget: 13 turns.")
    assert calls.count("bash") == 2 and len(calls) <= 13


def test_unknown_operator_falls_back_to_the_reference():
    _, files, used = drive(models.get({"provider": "scripted"}), specs(*CORE), lambda c, k: "ok",
                           task="Operator: no_such_op\nBudget: 30 turns.")
    assert "from reference import reference as kernel" in files["kernel.py"] and used[-1].name == "submit"


def test_a_reviewers_objection_is_answered_by_testing_the_final_kernel():
    source, configs = template("rmsnorm")
    submits = []

    def answer(call, kernel):
        if call.name == "bash":  # the first configuration is the fastest: the policy rewrites it at the end
            return f"RESULT correct=1 max_err=0 ms={1.0 if index_of(kernel, configs) == 0 else 5.0}"
        if call.name == "submit":
            submits.append(1)
            if len(submits) == 1:
                return ("The reviewer did not approve kernel.py. Its objections:\nREVISE\n1. kernel.py was not "
                        "tested after its last change: run the check", True)
        return "ok"

    _, files, used = drive(models.get({"provider": "scripted"}), specs(*CORE), answer)
    names = [c.name for c in used]
    first = names.index("submit")
    assert names[first + 1:] == ["bash", "submit"] and len(submits) == 2
    assert config_of(files["kernel.py"]) == f"CONFIG = {configs[0]!r}"


def test_the_scripted_reviewer_reviews_for_real():
    request = ("kernel.py under review (sha256 x):\n```python\ntl.load(p, mask=m)\n```\n\n"
               "Evidence since kernel.py last changed:\n{}\n\nObjections from earlier rounds:\n(none)")
    assert review(request.format("- bash {...}\nRESULT correct=1")).startswith("APPROVE")
    untested = review(request.format("none: kernel.py was not tested after its last change"))
    assert untested.startswith("REVISE") and "not tested after its last change" in untested
    unmasked = review(request.replace("mask=m", "other=0").format("- bash ok"))
    assert unmasked.startswith("REVISE") and "not masked" in unmasked
    r = models.get({"provider": "scripted"}).generate("review", [Message("user", request.format("x" * 400))], [])
    assert r.text.startswith("APPROVE") and not r.tool_calls and r.usage.input_tokens >= 100 and r.usage.cost_usd == 0


def test_actions_policy_plays_the_list_then_submits():
    model = models.get({"provider": "scripted", "policy": "actions",
                        "actions": [{"tool": "bash", "args": {"command": "echo hi"}}]})
    msgs = [Message("user", "t")]
    r1 = model.generate("s", msgs, specs("bash", "submit"))
    assert r1.tool_calls[0].name == "bash" and r1.tool_calls[0].arguments == {"command": "echo hi"}
    msgs += [r1.as_message(), Message("tool", "hi", tool_call_id=r1.tool_calls[0].id)]
    assert model.generate("s", msgs, specs("bash", "submit")).tool_calls[0].name == "submit"


def test_unknown_policy_is_a_clear_error():
    with pytest.raises(AblateError, match="valid policies: kernel-search, actions"):
        models.preflight({"provider": "scripted", "policy": "cheat"})


def test_unknown_provider_lists_the_valid_ones():
    with pytest.raises(AblateError, match="valid providers: anthropic, openai, scripted, replay"):
        models.get({"provider": "nope"})


@pytest.mark.slow
def test_kda05_end_to_end_every_mechanism_used_for_real(tmp_path):
    """The scripted policy under every mechanism, in the sandbox, with real measurements and profiles
    (the evaluate tool's evaluator stands in: the trusted evaluator is tested on its own)."""
    import harnesses
    import operators
    from ablate.sandbox import Workspace
    from harnesses import Budget, Task

    op = operators.get("rmsnorm")
    shapes = op.shape_set("smoke")
    files = {n: p.read_bytes() for n, p in op.task_files.items()} | {"shapes.json": json.dumps(shapes).encode()}
    evals = []

    def evaluate(path):
        evals.append(path)
        return {"verdict": "accepted", "reasons": [], "shapes": [{"time_ms": {"median": 1.0}}]}

    task = Task("rmsnorm", op.goal, shapes, files, None, evaluate, hidden_shapes=False,
                roofline=[{"bytes": op.bytes(s), "flops": op.flops(s)} for s in shapes])
    ws = Workspace.create(tmp_path / "ws", files)
    harness = harnesses.build({"name": "kda05", "mechanisms": {m: {} for m in harnesses.MECHANISMS}})
    r = harness.run(models.get({"provider": "scripted"}), task, ws, Budget(turns=60))
    assert r.end_reason == "submitted", [m.content[:200] for m in r.messages if m.role == "tool" and m.is_error]
    use = r.mechanisms
    assert use["knowledge"]["queries"] == 1 and "row-reductions" in use["knowledge"]["pages_found"]
    assert use["workflow"]["completed"] and [p["name"] for p in use["workflow"]["phases"]] == ["correct", "optimise", "specialise"]
    assert use["workflow"]["refusals"] == 0 and len(use["workflow"]["candidates"]) == 3
    assert use["search"]["candidates"] == 3 and use["search"]["promoted"]
    kept = next(c for c in use["workflow"]["candidates"] if c["id"] == use["workflow"]["kept"])
    promoted = next(c for c in use["search"]["lineage"] if c["id"] == use["search"]["promoted"])
    assert kept["ms"] == promoted["ms"]  # the workflow's kept candidate is the one the search promoted
    assert use["profiler"]["sources"] == ["timed"] and use["profiler"]["ncu_unavailable"] == ["no GPU: Nsight Compute needs one"]
    assert use["reviewer"]["approved"] and use["evaluate_tool"]["evaluations"] == len(evals) >= 3
    first = json.loads(next(m.content for m in r.messages if m.role == "tool" and '"id": "c1"' in m.content))
    assert "'num_warps': 8, 'rows_per_program': 1" in first["change"]  # the wiki's first recommendation went first
    for f in ("docs/draft.md", "docs/plan.md", "docs/decisions.md", "benchmark.csv", "candidates.jsonl", "runs/1/kernel.py"):
        assert (ws.path / f).is_file(), f
    assert r.spent["search"].tool_s > 0 and r.spent["reviewer"].model_calls == use["reviewer"]["rounds"]
