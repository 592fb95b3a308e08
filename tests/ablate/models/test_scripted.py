"""The scripted policy: reads the task, tests each template configuration with the tools it has,
submits the fastest correct one; approves when asked to review; plays fixed actions for tests."""
import json

import pytest

from ablate import models
from ablate.errors import AblateError
from ablate.models import Message, ToolSpec
from ablate.models._scripted import template

TASK = "Operator: rmsnorm\n\nGoal...\nBudget: 30 turns."


def specs(*names):
    return [ToolSpec(n, "", {"type": "object", "properties": {}}) for n in names]


def drive(model, tools, answer, task=TASK, limit=60):
    """Run the policy against fake tools; `answer(call, kernel_source)` gives each tool's output."""
    messages = [Message("user", task)]
    files = {}
    for _ in range(limit):
        r = model.generate("system", messages, tools)
        messages.append(r.as_message())
        if not r.tool_calls:
            return messages, files, None
        call = r.tool_calls[0]
        if call.name == "write_file":
            files[call.arguments["path"]] = call.arguments["content"]
        if call.name == "submit":
            return messages, files, call
        messages.append(Message("tool", answer(call, files.get("kernel.py", "")), tool_call_id=call.id))
    raise AssertionError("policy never submitted")


def config_of(source):
    return next(line for line in source.splitlines() if line.startswith("CONFIG = "))


def test_goal_only_writes_its_own_check_and_keeps_the_fastest():
    source, configs = template("rmsnorm")
    fastest = 2  # the fake measurements make configuration 2 the fastest
    ms = {f"CONFIG = {c!r}": (1.0 if i == fastest else 2.0 + i) for i, c in enumerate(configs)}

    def answer(call, kernel):
        if call.name == "bash":
            assert call.arguments["command"] == "python check.py"
            return f"RESULT correct=1 max_err=0.01 ms={ms[config_of(kernel)]}\n[exit code 0]"
        return "ok"

    model = models.get({"provider": "scripted"})
    messages, files, submit = drive(model, specs("bash", "read_file", "write_file", "list_files", "submit"), answer)
    assert submit is not None
    assert "check.py" in files and "from reference import" in files["check.py"]
    assert config_of(files["kernel.py"]) == f"CONFIG = {configs[fastest]!r}"
    tested = [m for m in messages if m.role == "assistant" and m.tool_calls and m.tool_calls[0].name == "bash"]
    assert len(tested) == len(configs)


def test_incorrect_configurations_are_never_kept():
    source, configs = template("rmsnorm")

    def answer(call, kernel):
        if call.name == "bash":  # config 0 is "fastest" but wrong; config 1 is the best correct one
            i = next(i for i, c in enumerate(configs) if config_of(kernel) == f"CONFIG = {c!r}")
            return f"RESULT correct={0 if i == 0 else 1} max_err=0.01 ms={0.5 if i == 0 else 1.0 + i}"
        return "ok"

    _, files, _ = drive(models.get({"provider": "scripted"}), specs("bash", "write_file", "read_file", "list_files", "submit"), answer)
    assert config_of(files["kernel.py"]) == f"CONFIG = {configs[1]!r}"


def test_specialist_tools_are_used():
    source, configs = template("rmsnorm")
    used = []

    def answer(call, kernel):
        used.append(call.name)
        if call.name == "list_files":
            return "reference.py\nshapes.json\nwiki/\nwiki/README.md"
        if call.name == "evaluate":
            return json.dumps({"verdict": "accepted", "shapes": [{"time_ms": {"median": 3.0}}]})
        return "ok"

    tools = specs("bash", "read_file", "write_file", "list_files", "submit", "evaluate", "complete_phase", "profile")
    _, files, submit = drive(models.get({"provider": "scripted"}), tools, answer)
    assert submit is not None and "check.py" not in files  # it uses the evaluate tool instead
    assert used.count("evaluate") == len(configs) and used.count("profile") == 1
    phases = [u for u in used if u == "complete_phase"]
    assert len(phases) == 5
    assert "read_file" in used


def test_turn_budget_limits_the_search():
    calls = []

    def answer(call, kernel):
        calls.append(call.name)
        return "RESULT correct=1 max_err=0 ms=1.0" if call.name == "bash" else "ok"

    drive(models.get({"provider": "scripted"}), specs("bash", "write_file", "read_file", "list_files", "submit"),
          answer, task="Operator: rmsnorm\nBudget: 9 turns.")
    assert calls.count("bash") == 2 and len(calls) + 1 <= 9


def test_unknown_operator_falls_back_to_the_reference():
    _, files, submit = drive(models.get({"provider": "scripted"}), specs("write_file", "read_file", "list_files", "submit"),
                             lambda c, k: "ok", task="Operator: no_such_op\nBudget: 30 turns.")
    assert "from reference import reference as kernel" in files["kernel.py"] and submit is not None


def test_review_requests_get_an_approval_and_usage_is_counted():
    r = models.get({"provider": "scripted"}).generate("review this", [Message("user", "x" * 400)], [])
    assert r.text.startswith("APPROVE") and not r.tool_calls and r.stop_reason == "end"
    assert r.usage.input_tokens >= 100 and r.usage.cost_usd == 0


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
