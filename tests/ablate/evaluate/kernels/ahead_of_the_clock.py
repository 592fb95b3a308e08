"""Works ahead of the judge's clock on a CPU. A thread started at import watches every input the
kernel was ever handed, memory it keeps mapped, and keeps each content it finds there. Had the
judge placed a call's inputs where the kernel could already read them (its shape's slots), the
thread would have them before the call was sent: in time to compute a timed batch's first call
before the clock started, and hand it back at once. This one raises when a call's input is one the
thread found before the call came (a stand-in for using it), so its verdict says whether the judge
gave it that reach: accepted means no input was readable before its call was sent."""
import threading
import time

import torch

_held = []  # every input handed to a call: views of memory this process keeps mapped
_found = set()  # the contents the watcher read there


def _content(t) -> bytes:
    return t.contiguous().view(torch.uint8).numpy().tobytes()


def _watch():
    while True:
        for t in list(_held):
            _found.add(_content(t))
        time.sleep(0.0001)


threading.Thread(target=_watch, daemon=True).start()


def kernel(x, weight):
    if _content(x) in _found:
        raise RuntimeError("this call's input was readable, and read, before the call was sent")
    _held.append(x)
    xf = x.float()
    rstd = torch.rsqrt((xf * xf).sum(-1, keepdim=True) / x.shape[-1] + 1e-6)
    return (xf * rstd * weight.float()).to(x.dtype)
