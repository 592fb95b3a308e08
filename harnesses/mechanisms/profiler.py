"""A `profile` tool: torch.profiler over kernel.py on the first public shape, run in the sandbox."""
from __future__ import annotations

from ablate.models import ToolSpec
from ablate.sandbox import Tool, ToolResult
from harnesses.mechanisms._base import Mechanism

# Runs inside the agent's sandbox (it executes the agent's code), never in the runner.
PROFILE_SCRIPT = r'''
import json, statistics, sys, time
import torch
sys.path.insert(0, ".")
from reference import example_inputs, reference
from kernel import kernel
shape = json.load(open("shapes.json"))[0]
dims = {k: v for k, v in shape.items() if k != "dtype"}
device = "cuda" if torch.cuda.is_available() else "cpu"
inputs = example_inputs(**dims, device=device)
sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
for _ in range(3):
    kernel(*inputs)
sync()
acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if device == "cuda" else [])
with torch.profiler.profile(activities=acts) as prof:
    for _ in range(REPS):
        kernel(*inputs)
    sync()
key = "cuda_time_total" if device == "cuda" else "cpu_time_total"
print(f"shape {shape} on {torch.cuda.get_device_name() if device == 'cuda' else 'cpu (Triton interpreter)'}")
print(prof.key_averages().table(sort_by=key, row_limit=12))
times = []
for f in (kernel, reference):
    ts = []
    for _ in range(REPS):
        sync(); t = time.perf_counter(); f(*inputs); sync(); ts.append(time.perf_counter() - t)
    times.append(statistics.median(ts) * 1e3)
print(f"median wall ms: kernel {times[0]:.4f}, reference {times[1]:.4f}")
'''


class Profiler(Mechanism):
    name = "profiler"

    def __init__(self, reps: int = 10, **options):
        super().__init__(**options)
        self.reps = int(reps)

    def system(self, task):
        return ("A `profile` tool runs torch.profiler over kernel.py on the first public shape and reports the "
                "time per launched kernel and the median wall time next to the reference. Profile before "
                "and after each optimisation; let the numbers, not guesses, pick the next change.")

    def tools(self, task, ws, model):
        def profile(args):
            ws.write(".profile.py", PROFILE_SCRIPT.replace("REPS", str(self.reps)).encode())
            r = ws.run("python .profile.py")
            status = "timed out" if r.timed_out else f"exit code {r.exit_code}"
            return ToolResult(f"{r.output}\n[{status}]", is_error=r.exit_code != 0, seconds=r.seconds,
                              gpu_seconds=r.gpu_seconds)

        spec = ToolSpec("profile", "Profile kernel.py on the first public shape.",
                        {"type": "object", "properties": {}, "required": []})
        return {"profile": Tool(spec, profile)}
