"""Computes a batch ahead. Every call's inputs are in the slots before the gate opens, so a kernel
that reaches them from a batch's first call could run the whole batch as one launch and hand the
later calls outputs computed already: timed as if each call were its own. The reach that takes
through torch: an input's storage holding more than the input (the other slots, the gate and the
marker). This one raises when it has that reach (a stand-in for using it), so its verdict says
whether the driver gave it: accepted means each call saw its own input alone."""
import torch


def kernel(x, weight):
    for t in (x, weight):
        own, reach = t.numel() * t.element_size(), t.untyped_storage().nbytes()
        if reach > own:
            raise RuntimeError(f"an input's storage reaches {reach - own} bytes beyond it: the other calls' inputs")
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * weight.float()).to(x.dtype)
