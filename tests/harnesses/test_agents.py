"""External agents as arms, without running one: their configs compose and plan; a study's ablation
adds and removes skills, plugins and instructions one at a time; the configuration's content is in
the record and the trial id, not the match key; every misuse is refused in one line saying what to
do. (Runs of the real CLIs: test_agents_e2e.py.)"""
import json
import tomllib
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

import ablate.config  # noqa: F401 - registers the schemas
from ablate import harnesses
from ablate.errors import AblateError
from ablate.ablations import expand
from ablate.harnesses import agents
from ablate.harnesses.agents import _install
from ablate.harnesses.agents._agents import ClaudeCode, Codex, toml

CONF = Path(__file__).resolve().parents[2] / "conf"
MODEL = {"name": "scripted", "provider": "scripted", "id": "scripted-kernel-search-v1"}


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """Both CLIs "installed" (a manifest and a stand-in binary), in a folder of the test's own."""
    monkeypatch.setenv("ABLATE_AGENTS_DIR", str(tmp_path / "agents"))
    for name, pkg in _install.PINNED.items():
        home = _install.folder(name, pkg.version) / "bin"
        home.mkdir(parents=True)
        (home / name).write_text("#!/bin/sh\n")
        (_install.folder(name, pkg.version) / _install.MANIFEST).write_text(json.dumps(
            {"agent": name, "package": pkg.npm, "version": pkg.version, "reported": f"{pkg.version} ({name})",
             "binary": str(home / name), "home": str(home), "sha256": "0" * 64}))


@pytest.fixture
def kda(tmp_path):
    """A user's KDA-like configuration: two skills, a plugin, an instructions file."""
    root = tmp_path / "kda"
    for skill in ("KernelWiki", "ncu-report-skill"):
        (root / skill).mkdir(parents=True)
        (root / skill / "SKILL.md").write_text(f"---\nname: {skill}\ndescription: {skill}\n---\nUse it.\n")
    (root / "humanize" / ".claude-plugin").mkdir(parents=True)
    (root / "humanize" / ".claude-plugin" / "plugin.json").write_text('{"name": "humanize"}')
    (root / "CLAUDE.md").write_text("# Work like KDA\n")
    return root


def kda_overrides(root):
    arm = "study.arms.claude_code_kda.agent"
    return [f"{arm}.skills.KernelWiki={root}/KernelWiki", f"{arm}.skills.ncu-report-skill={root}/ncu-report-skill",
            f"{arm}.plugins.humanize={root}/humanize", f"{arm}.instructions={root}/CLAUDE.md"]  # optional: given


def composed(*overrides):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=["study.seeds=[0]", *overrides])
    return OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)


def test_the_kda_study_pairs_goal_only_claude_code_with_the_specialist_and_each_item_alone(installed, kda):
    specs = expand(composed("study=kda_skills", "+model=scripted", "operators=rmsnorm", "study.scopes=[multi_shape]",
                            *kda_overrides(kda)))
    arms = {s.arm: s for s in specs}
    assert sorted(arms) == sorted(["claude_code", "claude_code_kda", "claude_code+skill-KernelWiki",
                                   "claude_code+skill-ncu-report-skill", "claude_code+plugin-humanize",
                                   "claude_code+instructions"])
    assert len({s.match_key for s in specs}) == 1  # one match: the same model, shapes, budget, seed
    assert len({s.trial_id for s in specs}) == 6 and len({s.agent_key for s in specs}) == 6
    one = arms["claude_code+skill-KernelWiki"].harness["agent"]
    assert one["name"] == "claude_code" and one["skills"] == {"KernelWiki": f"{kda}/KernelWiki"}
    assert one["plugins"] == {} and one["instructions"] is None
    assert arms["claude_code"].harness["agent"]["skills"] == {}
    full = harnesses.build(arms["claude_code_kda"].harness).describe()["agent"]
    assert sorted(full["configuration"]) == ["instructions", "plugin:humanize", "skill:KernelWiki",
                                             "skill:ncu-report-skill"]
    assert full["name"] == "claude_code" and full["version"] == _install.PINNED["claude_code"].version


def test_a_users_own_items_are_ablated_one_at_a_time_by_the_agent_items_study(installed, kda):
    specs = expand(composed("study=agent_items", "+model=scripted", "operators=rmsnorm", "study.scopes=[multi_shape]",
                            f"+study.arms.configured.agent.skills.my-skill={kda}/KernelWiki",
                            f"+study.arms.configured.agent.plugins.my-plugin={kda}/humanize"))
    arms = {s.arm: s.harness["agent"] for s in specs}
    assert sorted(arms) == ["configured", "goal", "goal+plugin-my-plugin", "goal+skill-my-skill"]
    assert arms["goal+plugin-my-plugin"]["plugins"] == {"my-plugin": f"{kda}/humanize"} and not arms["goal"]["skills"]
    assert len({s.match_key for s in specs}) == 1


def test_a_skills_folder_changes_the_trial_id_and_the_record_but_not_the_match_key(installed, kda):
    base = composed("+harness=claude_code", "+model=scripted")
    with_skill = composed("+harness=claude_code", "+model=scripted", f"+harness.agent.skills.KernelWiki={kda}/KernelWiki")
    (a,), (b,) = expand(base), expand(with_skill)
    assert a.match_key == b.match_key  # arms that differ in one skill still pair
    assert a.trial_id != b.trial_id and b.trial_id.endswith(b.agent_key)
    before = harnesses.build(b.harness).describe()["agent"]["configuration"]["skill:KernelWiki"]
    (kda / "KernelWiki" / "SKILL.md").write_text("edited\n")  # the user edits the skill
    (c,) = expand(with_skill)
    assert c.trial_id != b.trial_id and c.match_key == b.match_key  # it re-runs, still pairs
    assert harnesses.build(c.harness).describe()["agent"]["configuration"]["skill:KernelWiki"] != before
    assert expand(base)[0].trial_id == a.trial_id  # the goal-only arm does not re-run


def test_ablates_own_loop_is_the_default_and_its_trial_ids_are_unchanged(installed):
    (spec,) = expand(composed("+harness=goal_only", "+model=scripted"))
    assert spec.agent_key == "" and spec.trial_id.endswith(spec.match_key[:8])
    assert "agent" not in harnesses.build(spec.harness).describe()


def test_relative_paths_are_taken_from_where_ablate_runs(installed, kda, monkeypatch):
    monkeypatch.chdir(kda)
    (spec,) = expand(composed("+harness=claude_code", "+model=scripted", "+harness.agent.skills.KernelWiki=KernelWiki"))
    assert spec.harness["agent"]["skills"]["KernelWiki"] == str(kda / "KernelWiki")


@pytest.mark.parametrize("node,message", [
    ({"name": "cursor"}, "unknown agent 'cursor'; valid agents: ablate, claude_code, codex, command"),
    ({"name": "claude_code", "skilz": {}}, "agent has no key 'skilz'; valid: name, version, skills"),
    ({"name": "claude_code", "skills": {"KernelWiki": "/nowhere/KernelWiki"}}, "skill:KernelWiki: /nowhere/KernelWiki does not exist"),
    ({"name": "ablate", "skills": {"x": "/tmp"}}, "agent ablate (ablate's own loop) takes mechanisms, not skills"),
    ({"name": "command"}, "agent command needs agent.command"),
    ({"name": "claude_code", "version": "0.0.1"}, "agent claude_code 0.0.1 is not installed in"),
])
def test_a_bad_agent_node_is_refused_in_one_line_saying_what_to_do(installed, node, message):
    with pytest.raises(AblateError, match=message.replace("(", r"\(").replace(")", r"\)")) as e:
        harnesses.build({"name": "arm", "mechanisms": {}, "agent": node})
    assert "\n" not in str(e.value)


def test_an_uninstalled_cli_names_the_command_that_installs_it(tmp_path, monkeypatch):
    monkeypatch.setenv("ABLATE_AGENTS_DIR", str(tmp_path))
    with pytest.raises(AblateError, match=r"`python -m ablate.harnesses.agents install codex`"):
        harnesses.build({"name": "codex", "agent": {"name": "codex"}})


def test_mechanisms_and_an_external_agent_do_not_mix(installed):
    with pytest.raises(AblateError, match="mechanisms are ablate's own loop's; agent claude_code is given skills"):
        harnesses.build({"name": "x", "mechanisms": {"knowledge": {}}, "agent": {"name": "claude_code"}})


def test_an_item_cannot_be_added_to_an_arm_of_ablates_own_loop(installed, kda):
    cfg = composed("study=kda_skills", "+model=scripted", *kda_overrides(kda), "study.ablation.baseline=goal_only",
                   "+harness@study.arms.goal_only=goal_only")
    with pytest.raises(AblateError, match="cannot add skill:KernelWiki: its agent is ablate's own loop"):
        expand(cfg)


def test_an_agent_refuses_a_model_it_cannot_speak_to(installed):
    ClaudeCode(agents.parse({"name": "claude_code"})).check("scripted", "scripted")
    Codex(agents.parse({"name": "codex"})).check("openai", "qwen")
    with pytest.raises(AblateError, match="agent codex speaks OpenAI Responses; model fable-5.1 is provider 'anthropic'"):
        Codex(agents.parse({"name": "codex"})).check("anthropic", "fable-5.1")
    with pytest.raises(AblateError, match="agent claude_code speaks Anthropic Messages"):
        ClaudeCode(agents.parse({"name": "claude_code"})).check("openai", "qwen")


def test_codex_gets_its_configuration_as_toml_and_claude_code_as_its_own_files(installed, kda, tmp_path):
    cfg = agents.parse({"name": "codex", "skills": {"KernelWiki": str(kda / "KernelWiki")},
                        "instructions": str(kda / "CLAUDE.md"), "settings": {"model_reasoning_effort": "high"},
                        "mcp_servers": {"ncu": {"command": "python", "args": ["-m", "ncu_mcp"], "env": {"A": "1"}}}})
    Codex(cfg).prepare(tmp_path / "h", "scripted-kernel-search-v1", 300)
    conf = tomllib.loads((tmp_path / "h" / ".codex" / "config.toml").read_text())
    assert conf["model"] == Codex.STAND_IN and conf["model_provider"] == "ablate" and conf["web_search"] == "disabled"
    assert conf["model_providers"]["ablate"]["base_url"].startswith("http://127.0.0.1:")
    assert conf["model_reasoning_effort"] == "high" and conf["mcp_servers"]["ncu"]["env"] == {"A": "1"}
    assert (tmp_path / "h" / ".codex" / "skills" / "KernelWiki" / "SKILL.md").is_file()
    assert (tmp_path / "h" / ".codex" / "AGENTS.md").read_text() == "# Work like KDA\n"
    claude = agents.parse({"name": "claude_code", "plugins": {"humanize": str(kda / "humanize")},
                           "skills": {"KernelWiki": str(kda / "KernelWiki")}, "instructions": str(kda / "CLAUDE.md")})
    ClaudeCode(claude).prepare(tmp_path / "c", "m", 300)
    assert (tmp_path / "c" / ".claude" / "skills" / "KernelWiki" / "SKILL.md").is_file()
    assert (tmp_path / "c" / ".claude" / "CLAUDE.md").is_file()
    argv = ClaudeCode(claude).argv("the task", "m")
    assert argv[argv.index("--plugin-dir") + 1] == "/home/agent/plugins/humanize" and argv[-2:] == ["--", "the task"]
    assert "WebSearch,WebFetch" in argv and "--dangerously-skip-permissions" in argv
    with pytest.raises(AblateError, match="agent codex takes no plugins"):
        Codex(agents.parse({"name": "codex", "plugins": {"humanize": str(kda / "humanize")}})).prepare(tmp_path / "x", "m", 1)


def test_toml_refuses_what_it_cannot_write():
    assert tomllib.loads(toml({"a": [1, "b", True], "t": {"u": {"v": 1.5}}, "e": {}})) == \
        {"a": [1, "b", True], "t": {"u": {"v": 1.5}}, "e": {}}
    with pytest.raises(AblateError, match="has no TOML form"):
        toml({"a": None})


def test_the_harness_configs_name_their_agents():
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        for name in ("claude_code", "codex"):
            h = compose("config", overrides=[f"+harness={name}"]).harness
            assert h.agent.name == name and h.agent.version is None and not h.agent.skills
        kda = compose("config", overrides=["+harness=claude_code_kda"]).harness.agent
    assert OmegaConf.is_missing(kda.skills, "KernelWiki") and OmegaConf.is_missing(kda.plugins, "humanize")
    assert kda.instructions is None  # optional
