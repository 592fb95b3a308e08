"""Before the first trial: can the agent's shell, inside the very sandbox it gets, run the
runner's Python with torch and triton (and see the GPU when the study has one)?

An agent whose ``python`` is missing still gets an evaluate tool that works, so a study would run
and print a ratio of a blind arm against a seeing one. This check stops the run first, with one
line naming the cause and the fix.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

from ablate.errors import AblateError
from ablate.sandbox import Limits, Workspace

# Runs inside the sandbox, in the agent's shell, found through the agent's PATH.
PROBE = r"""command -v python >/dev/null 2>&1 || { echo "ABLATE-PREFLIGHT no-python"; exit 0; }
python - <<'EOF'
import json, sys
out = {"executable": sys.executable, "prefix": sys.prefix}
for name in ("torch", "triton"):
    try:
        mod = __import__(name)
        out[name] = getattr(mod, "__version__", "?")
    except BaseException as e:
        out[name] = None
        out[name + "_error"] = f"{type(e).__name__}: {e}"[:200]
try:
    import torch
    out["cuda"] = bool(torch.cuda.is_available())
except BaseException:
    out["cuda"] = False
print("ABLATE-PREFLIGHT " + json.dumps(out))
EOF"""


def check(limits: Limits, gpu: bool, timeout_s: float = 180.0) -> dict:
    """Raises AblateError (one line: cause and fix) unless the sandboxed shell finds the runner's
    python with torch and triton, and CUDA when ``gpu``. Returns what the probe saw."""
    here = os.path.dirname(sys.executable)
    with tempfile.TemporaryDirectory(prefix="ablate-preflight-") as d:
        ws = Workspace.create(Path(d) / "workspace", {}, limits)
        r = ws.run(PROBE, timeout_s=timeout_s)
    line = next((x for x in r.output.splitlines() if x.startswith("ABLATE-PREFLIGHT ")), None)
    where = "the sandbox" if limits.confinement == "bwrap" else "the agent's (unconfined) shell"
    if line is None:
        last = (r.output.strip().splitlines() or [f"exit code {r.exit_code}"])[-1]
        raise AblateError(f"preflight: the agent's shell in {where} could not run the Python probe ({last[:200]}); "
                          f"fix: check that {sys.executable} starts inside {where}")
    body = line.removeprefix("ABLATE-PREFLIGHT ")
    if body == "no-python":
        raise AblateError(f"preflight: the agent's shell finds no python: {here} (the runner's interpreter) is not "
                          f"visible inside {where}; fix: run ablate from an interpreter whose directory the sandbox "
                          f"mounts, or report this layout as a sandbox bug")
    seen = json.loads(body)
    if os.path.realpath(seen["prefix"]) != os.path.realpath(sys.prefix):
        raise AblateError(f"preflight: the agent's python is {seen['executable']} (prefix {seen['prefix']}), not the "
                          f"runner's {sys.executable} (prefix {sys.prefix}); fix: put {here} first on PATH")
    for name in ("torch", "triton"):
        if seen.get(name) is None:
            raise AblateError(f"preflight: {name} does not import inside {where} ({seen.get(name + '_error')}): its "
                              f"site-packages is hidden or not mounted; fix: install {name} where the runner's "
                              f"python finds it outside the project's own directories")
    if gpu and not seen.get("cuda"):
        raise AblateError(f"preflight: the study has a GPU but torch inside {where} sees none; fix: set "
                          f"sandbox.gpu=true and make sure /dev/nvidia* exist on this machine")
    return seen


def before_trials(specs) -> None:
    """``check`` once per distinct sandbox configuration among the trials about to run; the GPU
    is expected inside when this machine has one and the sandbox exposes it."""
    import torch

    seen = set()
    for spec in specs:
        key = json.dumps(spec.sandbox, sort_keys=True, default=str)
        if key in seen:
            continue
        seen.add(key)
        limits = Limits(**spec.sandbox)
        check(limits, gpu=bool(torch.cuda.is_available() and limits.gpu))
