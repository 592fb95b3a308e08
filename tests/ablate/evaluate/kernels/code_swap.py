"""Code replacement: swaps the __code__ of library functions the timing could rely on, so their
identity is unchanged while they do something else (synchronise nothing, report no time). The
guard refuses the swap; the loop calls functions bound before this file ran either way."""
import torch


def _nothing(*args, **kwargs):
    return None


def _tiny(self, other):
    return 1e-6


torch.cuda.synchronize.__code__ = _nothing.__code__
torch.cuda.Event.elapsed_time.__code__ = _tiny.__code__


def kernel(x, weight):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * weight.float()).to(x.dtype)
