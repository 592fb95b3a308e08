"""goal_only exposes nothing of the wiki, the workflow or the scripted templates: not through its
prompt or tools (test_harness), nor its workspace, nor any file its shell can read, whether the
project is a checkout or a non-editable install in site-packages."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Text found only in the wiki, the workflow's prompt and the templates.
MARKERS = ("RMSNorm starting configurations", "Work under a workflow controller", "scripted-configs")

# Runs as the agent would: a goal_only harness whose model plays these shell commands.
PROBE = r'''
import json, sys
from pathlib import Path
import ablate
from ablate import harnesses
from ablate.models import Response, ToolCall, Usage
from ablate.sandbox import Workspace
from ablate.sandbox import _bwrap

pkg = Path(harnesses.__file__).parent
templates = Path(harnesses.__file__).parent / "scripted" / "templates"
roots = " ".join(str(p) for p in _bwrap.python_paths())
commands = [
    f"cat {pkg}/knowledge/row-reductions.md",
    f"cat {pkg}/prompts/workflow.md",
    f"cat {templates}/rmsnorm.py",
    f"ls -la {pkg} {pkg}/knowledge",
    "python -c 'import ablate.harnesses.mechanisms.knowledge as k; print(k.__file__)'",
    "python -c 'import ablate.harnesses.scripted._configs as s; print(open(s.__file__).read())'",
    f"find {roots} -maxdepth 5 \\( -name 'row-reductions.md' -o -name 'workflow.md' -o -path '*scripted/templates' \\) 2>/dev/null",
    "ls -R . | head -50",
    "python -c 'import torch, triton; print(\"TOOLS-OK\")'",
]


class Agent:
    id = "probe"

    def __init__(self):
        self.calls = [("bash", {"command": c}) for c in commands] + [("write_file", {"path": "kernel.py", "content": "x"}), ("submit", {})]

    def generate(self, system, messages, tools):
        name, args = self.calls.pop(0)
        return Response("", [ToolCall(f"c{len(self.calls)}", name, args)], Usage(1, 1), "tool_use")

    def max_cost_of_next_call(self, *a):
        return 0.0


ws = Workspace.create(Path(sys.argv[1]), {"reference.py": b"def reference(x):\n    return x\n"})
harness = harnesses.build({"name": "goal_only", "mechanisms": {}})
r = harness.run(Agent(), harnesses.Task("rmsnorm", "goal", [{"M": 1}], {}, None), ws, harnesses.Budget(turns=20))
print("PROBE " + json.dumps({"package": str(pkg), "outputs": [m.content for m in r.messages if m.role == "tool"],
                             "workspace": sorted(str(p.relative_to(ws.path)) for p in ws.path.rglob("*"))}))
'''


def probe(tmp_path):
    r = subprocess.run([sys.executable, "-c", PROBE, str(tmp_path / "ws")], capture_output=True, text=True,
                       timeout=240, cwd=ROOT)
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith("PROBE ")), None)
    assert line, r.stderr[-3000:]
    return json.loads(line.removeprefix("PROBE "))


def assert_nothing_exposed(found):
    outputs = found["outputs"]
    for text in outputs[:8]:
        for marker in MARKERS:
            assert marker not in text, (marker, text[:400])
    assert "ModuleNotFoundError" in outputs[4] and "ModuleNotFoundError" in outputs[5]
    assert outputs[6].strip().splitlines()[:-1] == [], outputs[6]  # find printed no path (last line: exit status)
    assert found["workspace"] == ["kernel.py", "reference.py"]
    assert "TOOLS-OK" in outputs[8], outputs[8]  # the agent can still work: torch and triton import


def test_from_a_checkout(tmp_path):
    found = probe(tmp_path)
    assert found["package"] == str(ROOT / "harnesses")
    assert_nothing_exposed(found)


@pytest.fixture(scope="module")
def installed():
    """`pip install .` (not -e) into an environment whose site-packages also holds torch and the other
    dependencies: a venv whose site-packages links every installed distribution, plus the project.
    It lives outside /tmp: the sandbox's private /tmp would hide a venv there (a separate matter)."""
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="ablate-install-", dir="/var/tmp"))
    try:
        yield _install_and_probe(base)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _mapped_folders() -> list[str]:
    """The folders pyproject maps to packages (ablate.*, hydra_plugins), read where they are set."""
    import tomllib

    return sorted(set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"].values()))


def _install_and_probe(base):
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(base / "venv")], check=True, timeout=120)
    python = base / "venv" / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    ours = {"ablate", "harnesses", "operators", "ablations", "analysis"}
    for system_site in {p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()}:
        for entry in Path(system_site).iterdir():
            if entry.name.split("-")[0] in ours or entry.name.startswith("__editable__") or (site / entry.name).exists():
                continue
            (site / entry.name).symlink_to(entry)
    src = base / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for pkg in _mapped_folders():
        shutil.copytree(ROOT / pkg, src / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-compile",
                    "--target", str(site), str(src)], check=True, capture_output=True, timeout=240)
    assert (site / "ablate" / "harnesses" / "knowledge" / "row-reductions.md").is_file()
    assert not any((site / name).exists() for name in ("harnesses", "operators", "ablations", "analysis", "conf"))  # one name
    assert (site / "ablate" / "conf" / "model" / "scripted.yaml").is_file()
    assert (site / "ablate" / "harnesses" / "scripted" / "templates" / "rmsnorm.py").is_file()
    assert (site / "torch").exists()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    r = subprocess.run([str(python), "-c", PROBE, str(base / "ws")], capture_output=True, text=True, timeout=240,
                       env=env, cwd=base)
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith("PROBE ")), None)
    assert line, r.stderr[-3000:]
    found = json.loads(line.removeprefix("PROBE "))
    assert found["package"] == str(site / "ablate" / "harnesses")
    return found


@pytest.mark.slow
def test_from_a_non_editable_install_nothing_is_exposed(installed):
    outputs = installed["outputs"]
    for text in outputs[:8]:
        for marker in MARKERS:
            assert marker not in text, (marker, text[:400])
    assert "ModuleNotFoundError" in outputs[4] and "ModuleNotFoundError" in outputs[5]
    assert installed["workspace"] == ["kernel.py", "reference.py"]


@pytest.mark.slow
def test_from_a_non_editable_install_the_agent_can_still_import_torch(installed):
    assert "TOOLS-OK" in installed["outputs"][8], installed["outputs"][8]
