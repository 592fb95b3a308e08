"""Attacks the evaluator: kills the process that started it, then answers correctly."""
import os
import signal

import torch


def kernel(x, weight):
    try:
        os.kill(os.getppid(), signal.SIGKILL)
    except OSError:
        pass
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * weight.float()).to(x.dtype)
