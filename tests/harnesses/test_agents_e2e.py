"""The real Claude Code and Codex CLIs (npm, pinned: `python -m ablate.harnesses.agents install`) as arms, end
to end, offline: `python -m ablate +harness=claude_code +model=scripted` writes, judges and records a
kernel; a budget ends the agent mid-trial; a recorded trial replays; probed from inside through the
agent's own shell tool, the sandbox has no network, no key and no outside socket but the gateway's; a skill
given by path reaches the agent. And any program as an agent (`command`).

CI installs the CLIs first and sets ABLATE_REQUIRE_AGENTS=1: there a missing CLI fails these tests
instead of skipping them."""
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from ablate.store import Store
from ablate.trial import TrialSpec, run_trial
from ablate.harnesses import agents

ROOT = Path(__file__).resolve().parents[2]
TOOLS = {"claude_code": ("anthropic", "Write", "Bash"), "codex": ("responses", "apply_patch", "exec_command")}
SENTINEL = "sk-ant-api03-SENTINEL-the-runners-own-key"
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]  # trials of 5-20 s; generous for busy cores


@pytest.fixture(scope="module")
def clis():
    missing = [n for n in agents.PINNED if agents.installed(n) is None]
    if missing:
        why = f"{', '.join(missing)} not installed; `python -m ablate.harnesses.agents install` installs them"
        if os.environ.get("ABLATE_REQUIRE_AGENTS") == "1":
            pytest.fail(why)
        pytest.skip(why)


def ablate(*args, timeout=900):
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY")}
    r = subprocess.run([sys.executable, "-m", "ablate", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=timeout)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    return r


def one_record(store: Path) -> tuple[dict, Path]:
    (path,) = sorted(store.rglob("record.json"))
    return json.loads(path.read_text()), path.parent


def calls(trial: Path) -> list[dict]:
    return [json.loads(line) for line in (trial / "model_calls.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def claude_trial(clis, tmp_path_factory):
    store = tmp_path_factory.mktemp("claude")
    ablate("+harness=claude_code", "+model=scripted", f"store={store}", "study.seeds=[0]")
    return one_record(store)


def check_complete(rec: dict, trial: Path, agent: str) -> None:
    wire, write, shell = TOOLS[agent]
    a = rec["harness"]["agent"]
    assert a["name"] == agent and a["version"] == agents.PINNED[agent].version and a["version"] in a["reported"]
    assert len(a["sha256"]) == 64 and a["configuration"] == {} and rec["trial_id"].endswith(a["configuration_hash"])
    assert rec["end_reason"] == "submitted" and rec["agent"]["submitted"]
    assert rec["evaluation"]["verdict"] == "accepted", rec["evaluation"].get("reasons")
    assert (trial / "kernel.py").read_bytes() == (trial / "workspace" / "kernel.py").read_bytes()
    made = calls(trial)
    assert len(made) == rec["agent"]["turns"] == rec["agent"]["spent"]["agent"]["model_calls"] >= 5
    assert {c["request"]["wire"] for c in made} == {wire}
    used = [t["name"] for c in made for t in c["response"]["tool_calls"]]
    assert used[0] == write and shell in used and rec["agent"]["spent"]["agent"]["tool_calls"] == len(used)
    assert rec["usage"]["total_tokens"] == sum(c["response"]["usage"]["total_tokens"] for c in made) > 0
    assert rec["agent"]["events"][-1] == {**rec["agent"]["events"][-1], "event": "exit", "code": 0}
    transcript = [json.loads(line) for line in (trial / "transcript.jsonl").read_text().splitlines()]
    assert [m["role"] for m in transcript].count("tool") == len(used)


def test_claude_code_writes_a_kernel_that_is_judged_and_recorded(claude_trial):
    rec, trial = claude_trial
    check_complete(rec, trial, "claude_code")
    first = calls(trial)[0]["request"]["body"]
    assert not {"WebSearch", "WebFetch"} & {t.get("name") for t in first["tools"]}  # no network through its tools
    assert rec["snapshots"]["taken"]  # kernel.py along the trial, as for every arm


def test_codex_writes_a_kernel_that_is_judged_and_recorded(clis, tmp_path):
    ablate("+harness=codex", "+model=scripted", f"store={tmp_path}", "study.seeds=[0]")
    check_complete(*one_record(tmp_path), "codex")


def test_a_turn_budget_ends_the_agent_mid_trial_and_its_kernel_so_far_is_judged(clis, tmp_path):
    ablate("+harness=claude_code", "+model=scripted", f"store={tmp_path}", "study.seeds=[0]", "budget.turns=3")
    rec, trial = one_record(tmp_path)
    assert rec["end_reason"] == "turns" and rec["agent"]["turns"] == 3 and len(calls(trial)) == 3
    assert {"event": "budget", "limit": "turns"}.items() <= rec["agent"]["events"][0].items()
    assert rec["evaluation"]["verdict"] == "accepted"  # written in turn 1, configured in turn 2


def test_a_recorded_trial_replays_call_for_call(claude_trial, tmp_path):
    rec, trial = claude_trial
    ablate("+harness=claude_code", "+model=replay", f"model.source={trial}", f"store={tmp_path}", "study.seeds=[0]",
           "operators.shapes.public=smoke", "operators.shapes.eval=smoke")
    again, replayed = one_record(tmp_path)
    assert again["model"]["id"] == "replay:scripted-kernel-search-v1" and again["end_reason"] == "submitted"
    assert [c["response"]["tool_calls"] for c in calls(replayed)] == [c["response"]["tool_calls"] for c in calls(trial)]
    assert again["usage"]["total_tokens"] == rec["usage"]["total_tokens"] and again["usage"]["cost_usd"] == 0
    assert (replayed / "kernel.py").read_bytes() == (trial / "kernel.py").read_bytes()


PROBE = r'''
import json, os, socket, stat
out = {"environ": dict(os.environ), "interfaces": [n for _, n in socket.if_nameindex()]}
def tcp(host, port):
    try:
        socket.create_connection((host, port), timeout=3).close()
        return "connected"
    except OSError as e:
        return type(e).__name__
out["internet"] = tcp("1.1.1.1", 443)
out["metadata"] = tcp("169.254.169.254", 80)
try:
    socket.getaddrinfo("api.anthropic.com", 443)
    out["dns"] = "resolved"
except OSError as e:
    out["dns"] = type(e).__name__
out["gateway"] = tcp("127.0.0.1", int(os.environ["ABLATE_GATEWAY_URL"].rsplit(":", 1)[1]))
sockets = []
for top in ("/run", "/tmp", "/var", "/home", "/opt", "/workspace", "/etc", "/dev"):
    for root, dirs, files in os.walk(top):
        for n in dirs + files:
            p = os.path.join(root, n)
            try:
                if stat.S_ISSOCK(os.lstat(p).st_mode):
                    sockets.append(p)
            except OSError:
                pass
out["sockets"] = sockets
home = os.path.expanduser("~")
out["skills"] = sorted(os.listdir(os.path.join(home, ".claude/skills")) if os.path.isdir(os.path.join(home, ".claude/skills"))
                       else os.listdir(os.path.join(home, ".codex/skills")))
json.dump(out, open("probe.json", "w"))
'''


@pytest.mark.parametrize("agent", ["claude_code", "codex"])
def test_probed_through_its_own_shell_the_sandbox_has_no_network_no_key_and_one_socket(clis, tmp_path, monkeypatch,
                                                                                        agent):
    monkeypatch.setenv("ANTHROPIC_API_KEY", SENTINEL)  # the runner's key, which must stay outside
    monkeypatch.setenv("OPENAI_API_KEY", SENTINEL)
    host = socket.socket(socket.AF_UNIX)  # a socket of the runner's machine, in its /tmp
    host_path = f"/tmp/ablate-test-host-{os.getpid()}.sock"
    host.bind(host_path)
    host.listen(1)
    skill = tmp_path / "probe-skill"
    skill.mkdir()
    (skill / "SKILL.md").write_text("---\nname: probe-skill\ndescription: Probes the sandbox for ablate's tests.\n---\n"
                                    "Run probe.py.\n")
    spec = TrialSpec(study="probe", arm=agent, operator="rmsnorm", shapes={"public": "smoke", "eval": "smoke"}, seed=0,
                     harness={"name": agent, "mechanisms": {}, "agent": {"name": agent, "skills": {"probe-skill": str(skill)}}},
                     model={"name": "scripted", "provider": "scripted", "id": "scripted-actions-v1", "policy": "actions",
                            "actions": [{"tool": "write_file", "args": {"path": "probe.py", "content": PROBE}},
                                        {"tool": "bash", "args": {"command": "python probe.py"}}]},
                     budget={"turns": 10})
    try:
        trial = run_trial(spec, Store(tmp_path / "store"))
    finally:
        host.close()
        os.unlink(host_path)
    out = json.loads((trial / "workspace" / "probe.json").read_text())
    shell = TOOLS[agent][2]
    assert [t["name"] for c in calls(trial) for t in c["response"]["tool_calls"]][-1] == shell  # its own shell ran it
    assert SENTINEL not in json.dumps(out["environ"])
    assert out["environ"]["ANTHROPIC_API_KEY"] == out["environ"]["OPENAI_API_KEY"] == agents._agents.PLACEHOLDER_KEY
    assert out["interfaces"] == ["lo"] and out["internet"] != "connected" and out["metadata"] != "connected"
    assert out["dns"] != "resolved"
    # the gateway's is the one socket from outside; the agent's own live in its private /tmp
    assert out["gateway"] == "connected" and host_path not in out["sockets"]
    assert [p for p in out["sockets"] if not p.startswith("/tmp/")] == ["/run/ablate/gateway.sock"]
    assert "probe-skill" in out["skills"]
    assert "Probes the sandbox for ablate's tests" in json.dumps(calls(trial)[0]["request"]["body"])  # shown to its model
    rec = json.loads((trial / "record.json").read_text())
    assert set(rec["harness"]["agent"]["configuration"]) == {"skill:probe-skill"}


AGENT = r'''
"""A minimal coding agent: OpenAI Chat Completions at $OPENAI_BASE_URL, two tools, run until done."""
import json, os, subprocess, sys, urllib.request

def tool(name, **props):
    return {"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": {
        k: {"type": "string"} for k in props}, "required": list(props)}}}

tools = [tool("bash", command=1), tool("write_file", path=1, content=1)]
messages = [{"role": "user", "content": sys.argv[1]}]
for _ in range(20):
    body = {"model": os.environ["ABLATE_MODEL"], "messages": messages, "tools": tools}
    req = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions", json.dumps(body).encode(),
                                 {"content-type": "application/json", "authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})
    reply = json.load(urllib.request.urlopen(req))["choices"][0]["message"]
    messages.append(reply)
    if not reply.get("tool_calls"):
        break
    for c in reply["tool_calls"]:
        args = json.loads(c["function"]["arguments"])
        if c["function"]["name"] == "write_file":
            open(args["path"], "w").write(args["content"])
            out = "written"
        else:
            p = subprocess.run(["bash", "-c", args["command"]], capture_output=True, text=True)
            out = p.stdout + p.stderr
        messages.append({"role": "tool", "tool_call_id": c["id"], "content": out})
'''


def test_any_program_is_an_agent_through_the_same_gateway(tmp_path):
    program = tmp_path / "my-agent"
    program.mkdir()
    (program / "agent.py").write_text(AGENT)
    spec = TrialSpec(study="command", arm="mine", operator="rmsnorm", shapes={"public": "smoke", "eval": "smoke"}, seed=0,
                     harness={"name": "mine", "mechanisms": {}, "agent": {
                         "name": "command", "path": str(program), "command": ["python", "/opt/ablate/agent/agent.py", "{prompt}"]}},
                     model={"name": "scripted", "provider": "scripted", "id": "scripted-kernel-search-v1"},
                     budget={"turns": 10})
    trial = run_trial(spec, Store(tmp_path / "store"))
    rec = json.loads((trial / "record.json").read_text())
    assert rec["end_reason"] == "submitted" and rec["evaluation"]["verdict"] == "accepted"
    assert {c["request"]["wire"] for c in calls(trial)} == {"chat"} and rec["agent"]["turns"] == 5
    assert rec["harness"]["agent"]["name"] == "command" and len(rec["harness"]["agent"]["program_sha256"]) == 64
    assert spec.trial_id.endswith(spec.agent_key)


def test_a_time_budget_kills_the_agent_and_everything_it_started(clis, tmp_path):
    spec = TrialSpec(study="time", arm="claude_code", operator="rmsnorm", shapes={"public": "smoke", "eval": "smoke"},
                     seed=0, harness={"name": "claude_code", "mechanisms": {}, "agent": {"name": "claude_code"}},
                     model={"name": "scripted", "provider": "scripted", "id": "scripted-actions-v1", "policy": "actions",
                            "actions": [{"tool": "bash", "args": {"command": "python -c 'import subprocess, time; "
                                                   "subprocess.Popen([\"sleep\", \"317.25\"]); time.sleep(317.5)'"}}]},
                     budget={"turns": 10, "tool_s": 8})
    trial = run_trial(spec, Store(tmp_path / "store"))
    rec = json.loads((trial / "record.json").read_text())
    assert rec["end_reason"] == "tool_s" and 8 <= rec["agent"]["tool_s"] < 120 and rec["agent"]["turns"] == 1
    left = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert "sleep 317.25" not in left and "time.sleep(317.5)" not in left  # the sandbox went whole
