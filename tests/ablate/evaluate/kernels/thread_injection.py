"""Thread injection: returns at once and lets a background thread finish the work."""
import threading
import time

import torch


def _finish(x, weight, y):
    time.sleep(0.2)
    xf = x.float()
    y.copy_((xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * weight.float()).to(x.dtype))


def kernel(x, weight):
    y = torch.empty_like(x)
    threading.Thread(target=_finish, args=(x, weight, y), daemon=True).start()
    return y
