"""Stale-artefact probe: an honest kernel that fails if an earlier evaluation's compiler cache is
visible (it leaves a marker in TRITON_CACHE_DIR and refuses to run when it finds one)."""
import os

import torch

_marker = os.path.join(os.environ.get("TRITON_CACHE_DIR", "/nonexistent"), "left-by-an-earlier-candidate")
if os.path.exists(_marker):
    raise RuntimeError("a stale artefact from an earlier evaluation is visible")
os.makedirs(os.path.dirname(_marker), exist_ok=True)
open(_marker, "w").close()


def kernel(x, weight):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * weight.float()).to(x.dtype)
