"""The reference reached through sys.modules: whatever module in the process defines
`reference` for this operator is called. Nothing of the evaluator's operators is in the
candidate's process, so it finds nothing and returns zeros."""
import sys

import torch


def kernel(x, weight):
    for mod in list(sys.modules.values()):
        ref = getattr(mod, "reference", None)
        if callable(ref) and "rmsnorm" in getattr(mod, "__name__", ""):
            return ref(x, weight)
    return torch.zeros_like(x)
