"""Library passthrough from a worker thread: the library's own operator called on another thread,
which a watch of the calling thread alone did not see."""
from concurrent.futures import ThreadPoolExecutor

import torch

_pool = ThreadPoolExecutor(1)


def kernel(x, weight):
    return _pool.submit(torch.nn.functional.rms_norm, x, (x.shape[-1],), weight, 1e-6).result()
