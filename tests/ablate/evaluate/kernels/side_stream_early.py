"""Side stream, early: launches the work on another stream without waiting for the timed one, so
it runs while the device is still in the driver's flush and spin, before the start event; the
timed stream gets nothing between its events. Its outputs are right whenever the inputs were in
place by then. The device's record of the traced calls holds that work, so the events' near-zero
time does not stand (timing_disagrees), and a call whose inputs were not yet in place is wrong."""
import torch

_side = {}


def kernel(x, weight):
    side = _side.setdefault("s", torch.cuda.Stream())
    with torch.cuda.stream(side):
        xf = x.float()
        y = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * weight.float()).to(x.dtype)
    return y
