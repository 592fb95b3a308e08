"""Exits quietly once its last shape is being timed: every output checked is right, so a judge
that takes a candidate's end during timing for a normal one accepts it with no time on that shape
(a slow kernel would hide its slowness that way). Calls past the five input distributions' on a
shape are the timing loop's."""
import os
from collections import Counter

import torch

CALLS = Counter()


def kernel(x, weight):
    CALLS[tuple(x.shape)] += 1
    if len(CALLS) == 2 and CALLS[tuple(x.shape)] > 6:  # the second smoke shape's timing loop
        os._exit(0)
    xf = x.float()
    rstd = torch.rsqrt((xf * xf).sum(-1, keepdim=True) / x.shape[-1] + 1e-6)
    return (xf * rstd * weight.float()).to(x.dtype)
