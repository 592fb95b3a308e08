"""Record a conversation, replay it offline, and stop with a clear message where it diverges."""
from __future__ import annotations

import json

import pytest

from ablate.errors import AblateError
from ablate.models import Message, Recorder, Response, ToolCall, ToolSpec, Usage, get, preflight
from ablate.models._replay import ReplayModel

SYSTEM = "You write GPU kernels."
TOOLS = [ToolSpec("bash", "Run a shell command.", {"type": "object", "properties": {"command": {"type": "string"}}}),
         ToolSpec("submit", "Submit kernel.py.", {"type": "object", "properties": {}})]


class Canned:
    """A stand-in model answering from a list, with usage and provider blocks like a real one."""

    id = "claude-fable-5-1"

    def __init__(self):
        thinking = {"type": "thinking", "thinking": "check the files", "signature": "c2ln"}
        self.replies = [
            Response("Looking.", [ToolCall("toolu_1", "bash", {"command": "ls"})], Usage(100, 20, 0, 500, 0.01, 1),
                     "tool_use", [thinking, {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"command": "ls"}}]),
            Response("", [ToolCall("toolu_2", "bash", {"command": "python check.py"})], Usage(30, 25, 600, 0, 0.002, 1),
                     "tool_use", None),
            Response("Submitting.", [ToolCall("toolu_3", "submit", {})], Usage(40, 10, 700, 0, 0.001, 1), "tool_use", None),
        ]

    def generate(self, system, messages, tools):
        return self.replies[sum(m.role == "assistant" for m in messages)]

    def max_cost_of_next_call(self, system, messages, tools):
        return 1.0


def run_loop(model, output=lambda call: f"ran {call.name}\n[exit code 0, 1.2s]", turns=3):
    """A minimal agent loop: ask, run each tool call, hand back results."""
    messages = [Message("user", "Write kernel.py for rmsnorm.")]
    responses = []
    for _ in range(turns):
        r = model.generate(SYSTEM, messages, TOOLS)
        responses.append(r)
        messages.append(r.as_message())
        messages += [Message("tool", output(c), tool_call_id=c.id) for c in r.tool_calls]
    return responses


@pytest.fixture
def trial(tmp_path):
    """A trial directory as the trial writes it: model_calls.jsonl and record.json."""
    recorder = Recorder(Canned())
    run_loop(recorder)
    recorder.write(tmp_path / "model_calls.jsonl")
    (tmp_path / "record.json").write_text(json.dumps({"model": {"id": "claude-fable-5-1", "provider": "anthropic"}}))
    return tmp_path


def test_replay_returns_the_recorded_responses_free(trial):
    model = get({"provider": "replay", "source": str(trial)})
    assert model.id == "replay:claude-fable-5-1"
    original = Canned().replies
    replayed = run_loop(model)
    for r, o in zip(replayed, original):
        assert (r.text, r.tool_calls, r.stop_reason, r.raw) == (o.text, o.tool_calls, o.stop_reason, o.raw)
        assert (r.usage.input_tokens, r.usage.output_tokens, r.usage.cache_read_tokens, r.usage.cache_write_tokens) == \
            (o.usage.input_tokens, o.usage.output_tokens, o.usage.cache_read_tokens, o.usage.cache_write_tokens)
        assert r.usage.cost_usd == 0.0
    assert model.max_cost_of_next_call(SYSTEM, [], TOOLS) == 0.0


def test_replay_accepts_the_jsonl_file_itself(trial):
    assert len(run_loop(ReplayModel(trial / "model_calls.jsonl"))) == 3


def test_changed_tool_output_stops_the_replay_where_it_diverges(trial):
    model = ReplayModel(trial)
    outputs = iter(["ran bash\n[exit code 0, 1.2s]", "ran bash\n[exit code 1, 1.2s]"])
    with pytest.raises(AblateError) as e:
        run_loop(model, output=lambda call: next(outputs))
    assert str(e.value) == ("replay diverged at call 3: message 5 (tool) content differs: "
                            "recorded 'ran bash\\n[exit code 0, <time>]' vs now 'ran bash\\n[exit code 1, <time>]'")


def test_timings_and_temporary_paths_do_not_count_as_divergence(tmp_path):
    def output(workdir, seconds):
        return lambda call: f"{workdir}/kernel.py: tensor at 0x7f3a9c2b{seconds * 10:02.0f} took {seconds} ms\n[exit code 0, {seconds}s]"

    recorder = Recorder(Canned())
    run_loop(recorder, output=output("/tmp/ablate-x81k", 1.25))
    recorder.write(tmp_path / "model_calls.jsonl")
    assert len(run_loop(ReplayModel(tmp_path), output=output("/tmp/pytest-of-ci/ablate-q2", 7.5))) == 3
    with pytest.raises(AblateError, match="message 3 \\(tool\\) content differs"):
        run_loop(ReplayModel(tmp_path), output=output("/home/ci/ablate-q2", 7.5))  # not a temporary path


def test_structure_check_ignores_tool_output_but_not_arguments(trial):
    run_loop(ReplayModel(trial, check="structure"), output=lambda call: "completely different output")
    model = ReplayModel(trial, check="structure")
    model.generate(SYSTEM, [Message("user", "Write kernel.py for rmsnorm.")], TOOLS)
    with pytest.raises(AblateError, match=r"call 2: message 2 \(assistant\) tool_calls differs"):
        model.generate(SYSTEM, [Message("user", "Write kernel.py for rmsnorm."),
                                Message("assistant", "Looking.", [ToolCall("toolu_1", "bash", {"command": "pwd"})]),
                                Message("tool", "x", tool_call_id="toolu_1")], TOOLS)


def test_asking_past_the_recording_names_both_counts(trial):
    model = ReplayModel(trial)
    with pytest.raises(AblateError, match=r"the harness asked for call 4 but the recording has 3"):
        run_loop(model, turns=4)


@pytest.mark.parametrize("system,tools,words", [
    ("You write CUDA kernels.", TOOLS, r"call 1: system prompt differs: recorded 'You write GPU kernels.' vs now 'You write CUDA kernels.'"),
    (SYSTEM, TOOLS[:1], r"call 1: tools differ: recorded \['bash', 'submit'\] vs now \['bash'\]"),
    (SYSTEM, [TOOLS[0], ToolSpec("submit", "Submit now.", {})], r"call 1: tool 'submit' differs"),
])
def test_system_and_tool_changes_are_named(trial, system, tools, words):
    with pytest.raises(AblateError, match=words):
        ReplayModel(trial).generate(system, [Message("user", "Write kernel.py for rmsnorm.")], tools)


def test_a_missing_message_is_named(trial):
    with pytest.raises(AblateError, match="the harness sent 0 messages, the recording has 1"):
        ReplayModel(trial).generate(SYSTEM, [], TOOLS)


def test_recorded_id_falls_back_to_replay_without_a_record(trial):
    (trial / "record.json").unlink()
    assert ReplayModel(trial).id == "replay:replay"


@pytest.mark.parametrize("source,words", [
    ("???", r"needs model.source=runs/<study>/<trial>"),
    (None, r"needs model.source=runs/<study>/<trial>"),
    ("missing-dir", "has no model_calls.jsonl"),
])
def test_preflight_names_a_missing_source(source, words):
    with pytest.raises(AblateError, match=words):
        preflight({"provider": "replay", "source": source})


def test_preflight_rejects_an_empty_or_broken_recording(tmp_path):
    (tmp_path / "model_calls.jsonl").write_text("")
    with pytest.raises(AblateError, match="holds no model calls"):
        preflight({"provider": "replay", "source": str(tmp_path)})
    (tmp_path / "model_calls.jsonl").write_text('{"request": {"messages": []}, "response": {"stop_reason": "end"}}\nnot json\n')
    with pytest.raises(AblateError, match=r"model_calls.jsonl:2 is not a recorded model call"):
        preflight({"provider": "replay", "source": str(tmp_path)})


def test_preflight_accepts_a_good_recording(trial):
    preflight({"provider": "replay", "source": str(trial)})
