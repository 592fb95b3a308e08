"""Blinding the integrity check: finds the snapshot of library functions through the object graph
and gives it an instance attribute that reports nothing replaced, then replaces the timers and the
comparison it watches. Refused at the object graph and at the type; the timers the loop calls were
bound before this file ran, so the replaced ones measure nothing."""
import gc
import time

import torch

try:
    for obj in gc.get_objects():
        if type(obj).__name__ == "Snapshot":
            obj.tampered = lambda: {"timer_tampered": [], "driver_tampered": []}
except Exception:
    pass
time.perf_counter = lambda: 0.0
try:
    torch.cuda.Event.elapsed_time = lambda self, other: 1e-6
except Exception:
    pass
torch.equal = lambda a, b: True


def kernel(x, weight):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * weight.float()).to(x.dtype)
