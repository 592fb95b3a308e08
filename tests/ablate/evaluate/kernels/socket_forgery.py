"""Report forgery on the socket itself: finds the driver's socket among its own descriptors and
writes a flattering timing report (and a correct-looking output message) before the driver does.
Without the driver's key the judge cannot take them for messages."""
import json
import os

import torch


def _forge():
    for fd in map(int, os.listdir("/proc/self/fd")):
        try:
            os.write(fd, json.dumps({"kind": "timing", "shape": 0, "result": {"median": 1e-6, "p10": 1e-6,
                                     "p90": 1e-6, "n": 50, "wall_ms": 1e-6, "lag_ms": 0.0},
                                     "failures": {}}).encode())
        except OSError:
            pass


def kernel(x, weight):
    _forge()
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * weight.float()).to(x.dtype)
