"""The scripted model's Triton templates pass their operator's check, for every config they
list, on the smoke shapes and every input distribution, under the Triton CPU interpreter."""
import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import operators

HERE = Path(__file__).parent
TEMPLATES = HERE.parents[1] / "ablate" / "models" / "scripted_templates"
OURS = ["softmax", "layernorm", "swiglu", "rope", "cross_entropy", "gemm", "attention", "grouped_gemm"]


@pytest.fixture(scope="module")
def interpreted():
    """One interpreter process for all templates (TRITON_INTERPRET must precede importing triton)."""
    proc = subprocess.run([sys.executable, str(HERE / "template_runner.py"), *OURS],
                          capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", OURS)
def test_template_format(name):
    text = (TEMPLATES / f"{name}.py").read_text()
    first = text.splitlines()[0]
    assert first.startswith("# scripted-configs: ")
    configs = json.loads(first.removeprefix("# scripted-configs:"))
    assert len(configs) >= 2 and all(isinstance(c, dict) for c in configs)
    tree = ast.parse(text)
    config_lines = [n for n in tree.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "CONFIG"]
    assert len(config_lines) == 1, "exactly one module-level CONFIG line for the policy to replace"
    assert ast.literal_eval(config_lines[0].value) in configs
    assert any(isinstance(n, ast.FunctionDef) and n.name == "kernel" for n in tree.body)
    assert name in operators.REGISTRY
    # A template is a kernel, not a library call in disguise.
    for call in operators.get(name).library_calls:
        assert f"{call}(" not in text, call


@pytest.mark.slow
@pytest.mark.parametrize("name", OURS)
def test_template_passes_every_config_under_the_interpreter(interpreted, name):
    report = interpreted[name]
    n_configs = len(json.loads((TEMPLATES / f"{name}.py").read_text().splitlines()[0].removeprefix("# scripted-configs:")))
    assert report["configs"] == n_configs
    assert report["checks"] == n_configs * len(operators.get(name).shapes["smoke"]) * len(operators.DISTRIBUTIONS)
    assert report["failures"] == []
