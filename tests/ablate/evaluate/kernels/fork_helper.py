"""A helper process: forks a child that outlives the call (and could finish the work, or rewrite
files, after the kernel returned). The guard refuses os.fork; the supervisor sees any process
beside the candidate that is not a compiler."""
import os
import time

import torch

try:
    if os.fork() == 0:
        time.sleep(30)
        os._exit(0)
except PermissionError:
    pass


def kernel(x, weight):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * weight.float()).to(x.dtype)
