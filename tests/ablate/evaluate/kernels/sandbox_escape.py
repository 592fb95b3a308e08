"""Harness tampering at run time: tries to overwrite a file outside its own directory (the path
the test names in TAMPER_TARGET, standing in for the operator's reference or the baseline cache)."""
import os

import torch

try:
    with open(os.environ["TAMPER_TARGET"], "w") as f:
        f.write("tampered")
except OSError:
    pass


def kernel(x, weight):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * weight.float()).to(x.dtype)
