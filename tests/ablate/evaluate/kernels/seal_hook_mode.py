"""The seal hook (accepted at 1.65x on an H200 before the judge read outputs itself): the timed calls
return an empty tensor, and a TorchDispatchMode the kernel leaves in force computes the real result
when the driver copies that tensor out for the judge. The judge now reads the bytes where the
kernel wrote them, with no tensor operation of the candidate's process between, and the mode left
in force is itself a rejection (hook_active)."""
import torch
from torch.utils._python_dispatch import TorchDispatchMode

_pending = {}


def _rms(x, weight):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * weight.float()).to(x.dtype)


class _Lazy(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        for a in args:
            if isinstance(a, torch.Tensor) and a.data_ptr() in _pending:
                x, w = _pending.pop(a.data_ptr())
                with torch.utils._python_dispatch._disable_current_modes():
                    a.copy_(_rms(x, w))
        return func(*args, **(kwargs or {}))


_Lazy().__enter__()  # never left


def kernel(x, weight):
    y = torch.empty_like(x)
    _pending[y.data_ptr()] = (x, weight)
    return y
