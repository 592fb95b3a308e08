"""A helper process started below the audit hook: _posixsubprocess.fork_exec raises no audit
event, so only the supervisor's view of the process tree (a Python beside the candidate) and the
static scan stand in its way."""
import _posixsubprocess
import os
import sys

import torch

_argv, _exe = [sys.executable, "-c", "import time; time.sleep(20)"], [os.fsencode(sys.executable)]
_r, _w = os.pipe()
try:  # Python 3.11
    _posixsubprocess.fork_exec(_argv, _exe, True, (), None, None, -1, -1, -1, -1, -1, -1, _r, _w, True, True, -1,
                               None, None, None, None)
except TypeError:  # Python 3.12 and later
    _posixsubprocess.fork_exec(_argv, _exe, True, (), None, None, -1, -1, -1, -1, -1, -1, _r, _w, True, True, -1,
                               None, None, None, -1, None, False)


def kernel(x, weight):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * weight.float()).to(x.dtype)
