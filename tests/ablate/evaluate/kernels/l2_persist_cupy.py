"""L2 persistence without ctypes: reserves persisting L2 through CuPy's runtime bindings (native
calls the audit hook cannot see), so an input could stay in L2 despite the flush. The L2 guard reads
the device's state itself after every timed call."""
import cupy
import torch


def kernel(x, weight):
    nbytes = min(x.numel() * x.element_size(), 16 << 20)
    cupy.cuda.runtime.deviceSetLimit(0x06, nbytes)  # cudaLimitPersistingL2CacheSize
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * weight.float()).to(x.dtype)
