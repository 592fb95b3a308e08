"""The preflight: the agent's shell, in the very sandbox it gets, runs the runner's python with
torch and triton; otherwise the run stops before any trial with one line."""
import json
import os
import site
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from ablate import preflight, runner
from ablate.errors import AblateError
from ablate.sandbox import Limits

ROOT = Path(__file__).resolve().parents[2]  # the checkout under test


def test_the_agents_shell_has_the_runners_python_torch_and_triton():
    seen = preflight.check(Limits(), gpu=False)
    assert os.path.realpath(seen["prefix"]) == os.path.realpath(sys.prefix)
    import torch
    import triton

    assert seen["torch"] == torch.__version__ and seen["triton"] == triton.__version__


def test_a_hidden_interpreter_stops_with_one_line():
    with pytest.raises(AblateError) as e:
        preflight.check(Limits(hide=(os.path.dirname(os.path.realpath(sys.executable)),)), gpu=False)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("preflight:") and "fix:" in msg


def test_a_study_whose_agents_cannot_run_python_writes_no_trial(tmp_path, monkeypatch):
    cfg = {"study": {"name": "t", "seeds": [0], "arms": {"goal_only": {"name": "goal_only", "mechanisms": {}}},
                     "model": {"name": "scripted", "provider": "scripted", "id": "scripted-actions-v1",
                               "policy": "actions", "actions": []}},
           "operators": {"names": ["rmsnorm"], "shapes": {"public": "smoke", "eval": "smoke"}},
           "budget": {"turns": 3}, "sandbox": {"hide": [os.path.dirname(os.path.realpath(sys.executable))]},
           "parallel": "auto"}
    with pytest.raises(AblateError, match="^preflight:"):
        runner.run_study(cfg, tmp_path / "store", log=lambda *a: None)
    assert not list((tmp_path / "store").rglob("record.json"))


PROBE = """
import json, sys
from ablate import preflight
from ablate.errors import AblateError
from ablate.sandbox import Limits
hide = tuple(sys.argv[1:])
try:
    print(json.dumps(preflight.check(Limits(hide=hide), gpu=False)))
except AblateError as e:
    print("ERROR " + str(e))
"""


@pytest.fixture(scope="module")
def tmp_venv():
    """A venv under /tmp (the sandbox's /tmp is private) that sees this interpreter's packages.
    A venv made from a venv (a `.venv` in the checkout) is based on the base interpreter, whose
    site-packages `--system-site-packages` adds, and which may have no torch: so a .pth file adds
    this interpreter's own site-packages too, wherever they are."""
    with tempfile.TemporaryDirectory(prefix="ablate-venv-", dir="/tmp") as d:
        venv = Path(d) / "venv"
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True)
        ours = [p for p in site.getsitepackages() if os.path.isdir(p)]
        (site_dir,) = venv.glob("lib/python*/site-packages")
        (site_dir / "ablate_test_parent.pth").write_text("".join(f"import site; site.addsitedir({p!r})\n" for p in ours))
        seen = subprocess.run([str(venv / "bin/python"), "-c", "import torch, triton"], capture_output=True, text=True,
                              timeout=300)
        if seen.returncode != 0:
            pytest.skip(f"a venv made from {sys.executable} does not import torch and triton even with this "
                        f"interpreter's site-packages {ours} added: {seen.stderr.strip().splitlines()[-1:]}")
        yield venv


def test_an_interpreter_in_a_venv_under_tmp_is_exposed(tmp_venv):
    out = subprocess.run([str(tmp_venv / "bin/python"), "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])  # not an ERROR line: it passed
    assert seen["prefix"] == str(tmp_venv) and seen["torch"]


def test_a_venv_under_tmp_that_the_sandbox_hid_stops_with_one_line(tmp_venv):
    # What happened before the interpreter was bound over the private /tmp: the shell finds no python.
    out = subprocess.run([str(tmp_venv / "bin/python"), "-c", PROBE, str(tmp_venv)], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    last = out.stdout.strip().splitlines()[-1]
    assert last.startswith("ERROR preflight:") and "fix:" in last, out.stdout + out.stderr


@pytest.mark.gpu
def test_on_a_gpu_the_agents_shell_sees_it():
    assert preflight.check(Limits(), gpu=True)["cuda"] is True


@pytest.mark.gpu
def test_on_a_gpu_a_sandbox_without_it_stops_with_one_line():
    with pytest.raises(AblateError) as e:
        preflight.check(Limits(gpu=False), gpu=True)
    assert "\n" not in str(e.value) and "sees none" in str(e.value) and "fix:" in str(e.value)
