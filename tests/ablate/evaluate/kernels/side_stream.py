"""Side stream: launches the work on another CUDA stream and returns at once, so events on the
timed stream see almost nothing."""
import torch

_side = {}


def kernel(x, weight):
    side = _side.setdefault("s", torch.cuda.Stream())
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        xf = x.float()  # deliberately slow eager code: its time must not vanish
        y = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * weight.float()).to(x.dtype)
    return y
