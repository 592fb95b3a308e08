"""The seal hook through torch.library rather than a dispatch mode (issue 35 named both): the timed
calls return an empty tensor, and the kernel's own implementation of aten's clone, registered over
torch's for the CPU and CUDA keys, computes the real result when anything clones that tensor.
Nothing of the candidate's process copies it for the judge, who reads the bytes where the kernel
left them: what it reads is the empty tensor."""
import torch

_pending: dict = {}


def _rms(x, weight):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * weight.float()).to(x.dtype)


def _settle(t):
    """The real result, written into t, the first time anything clones it."""
    if isinstance(t, torch.Tensor) and t.data_ptr() in _pending:
        x, w = _pending.pop(t.data_ptr())
        t.copy_(_rms(x, w))


def _clone(src, *, memory_format=torch.preserve_format):
    _settle(src)
    return torch.empty_like(src, memory_format=memory_format).copy_(src)  # copy_ is torch's own: no recursion


_lib = torch.library.Library("aten", "IMPL")
for _key in ("CPU", "CUDA"):
    _lib.impl("clone", _clone, _key)


def kernel(x, weight):
    y = torch.empty_like(x)
    _pending[y.data_ptr()] = (x, weight)
    return y
