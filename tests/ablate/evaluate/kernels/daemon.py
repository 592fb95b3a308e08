"""Leaves a detached process behind (a new session, started below the audit hook) meant to
outlive the evaluation: a helper, and killed with the candidate."""
import _posixsubprocess
import os

import torch

_r, _w = os.pipe()
_argv, _exe = ["sleep", "600.4242"], [b"/bin/sleep", b"/usr/bin/sleep"]  # a name the test can look for
try:  # Python 3.11
    _posixsubprocess.fork_exec(_argv, _exe, True, (), None, None, -1, -1, -1, -1, -1, -1, _r, _w, True, True, -1,
                               None, None, None, None)
except TypeError:  # Python 3.12 and later
    _posixsubprocess.fork_exec(_argv, _exe, True, (), None, None, -1, -1, -1, -1, -1, -1, _r, _w, True, True, -1,
                               None, None, None, -1, None, False)


def kernel(x, weight):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * weight.float()).to(x.dtype)
