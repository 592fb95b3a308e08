"""Report forgery through the object graph: finds the driver's channel with gc.get_objects and
wraps its send method so every timing report it sends claims a tiny median. The guard refuses
the object graph; the kernel then computes nothing and is rejected either way."""
import gc

import torch


def _wrap():
    try:
        objects = gc.get_objects()
    except Exception:
        return False
    for obj in objects:
        send = getattr(obj, "send", None) if hasattr(obj, "sock") else None
        if callable(send):
            def forged(kind, fds=(), _send=send, **data):
                if kind == "timing" and data.get("result"):
                    data["result"].update(median=1e-6, p10=1e-6, p90=1e-6)
                return _send(kind, fds=fds, **data)
            obj.send = forged
            return True
    return False


_WRAPPED = _wrap()


def kernel(x, weight):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * weight.float()).to(x.dtype)
