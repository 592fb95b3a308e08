"""The goal-only core, and what each mechanism adds to it: tools, prompt, files, record."""
import pytest

from ablate import harnesses
from ablate.errors import AblateError
from ablate.harnesses import Budget

CORE_TOOLS = {"bash", "read_file", "write_file", "list_files", "submit"}
# Words that only a mechanism's text may use: goal_only must show none of them.
MECHANISM_WORDS = ("wiki", "knowledge", "workflow", "phase", "draft", "profile", "review", "candidate", "lineage",
                   "evaluate", "ncu", "template")
ADDS = {  # mechanism -> the tools it adds
    "knowledge": {"search_knowledge", "read_knowledge"}, "workflow": {"workflow"}, "profiler": {"profile"},
    "search": {"candidate"}, "reviewer": set(), "evaluate_tool": {"evaluate"},
}


@pytest.fixture
def run(h):
    def go(mechanisms, ws, calls=(h.WRITE, ("submit", {}))):
        harness = harnesses.build({"name": "h", "mechanisms": mechanisms})
        model = h.Playback(list(calls))
        result = harness.run(model, h.make_task(), ws, Budget(turns=6))
        return harness, model, result
    return go


def test_goal_only_is_the_core_and_nothing_else(ws, run):
    before = sorted(p.name for p in ws.path.rglob("*"))
    harness, model, r = run({}, ws)
    assert r.end_reason == "submitted"
    first = model.seen[0]
    assert set(first["tools"]) == CORE_TOOLS
    assert first["system"] == harnesses.core_system()
    prompt = (first["system"] + first["messages"][0].content).lower()
    assert not [w for w in MECHANISM_WORDS if w in prompt]
    assert sorted(p.name for p in ws.path.rglob("*")) == sorted(before + ["kernel.py"])  # the workspace gained only the agent's file
    assert r.mechanisms == {} and harness.describe()["mechanisms"] == {}
    assert set(harness.describe()["hashes"]) == {"core"}


@pytest.mark.parametrize("name", list(ADDS))
def test_each_mechanism_alone_adds_its_tools_and_prompt(ws, run, name):
    harness, model, r = run({name: {}}, ws)
    first = model.seen[0]
    assert set(first["tools"]) == CORE_TOOLS | ADDS[name]
    extra = first["system"].removeprefix(harnesses.core_system())
    assert extra.strip() and first["system"].startswith(harnesses.core_system())
    assert name in r.mechanisms  # its use is on record, even when unused
    hashes = harness.describe()["hashes"]
    assert set(hashes) == {"core", name} and hashes[name]  # its prompt (and documents) are hashed
    assert all(len(v) == 64 for v in hashes[name].values())


def test_kda05_has_every_mechanism_in_submit_order():
    h = harnesses.build({"name": "kda05", "mechanisms": {n: {} for n in reversed(list(harnesses.MECHANISMS))}})
    assert [m.name for m in h.mechanisms] == list(harnesses.MECHANISMS)
    order = list(harnesses.MECHANISMS)
    assert order.index("search") < order.index("workflow") < order.index("reviewer")  # promote, gate, review


def test_a_null_mechanism_is_off():
    assert [m.name for m in harnesses.build({"name": "x", "mechanisms": {"knowledge": None, "profiler": {}}}).mechanisms] == ["profiler"]


def test_unknown_mechanism_and_option_are_one_line_errors_listing_the_valid_names():
    with pytest.raises(AblateError, match="valid: knowledge, search, workflow, profiler, reviewer, evaluate_tool"):
        harnesses.build({"name": "w", "mechanisms": {"telepathy": {}}})
    with pytest.raises(AblateError, match="no option 'round'; valid: rounds"):
        harnesses.build({"name": "w", "mechanisms": {"reviewer": {"round": 3}}})
    with pytest.raises(AblateError, match="unknown workflow phases"):
        harnesses.build({"name": "w", "mechanisms": {"workflow": {"phases": ["dance"]}}})


def test_core_prompt_hashes_are_the_files_hashes():
    import hashlib
    from pathlib import Path

    root = Path(harnesses.__file__).parent
    assert harnesses.core_hashes() == {rel: hashlib.sha256((root / rel).read_bytes()).hexdigest()
                                       for rel in ("prompts/core.md", "prompts/task.md")}
