"""Leaves a detached process behind (double fork, new session) meant to outlive the evaluation."""
import os

import torch

if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execvp("sleep", ["sleep", "600.4242"])  # a name the test can look for
    os._exit(0)


def kernel(x, weight):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * weight.float()).to(x.dtype)
