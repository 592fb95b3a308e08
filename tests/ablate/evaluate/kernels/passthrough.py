"""Library passthrough: calls the library it is meant to beat."""
import torch.nn.functional as F


def kernel(x, weight):
    return F.rms_norm(x, (x.shape[-1],), weight, 1e-6)
