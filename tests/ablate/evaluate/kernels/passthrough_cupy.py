"""Library passthrough through another array library (GEMM): CuPy's matmul is cuBLAS's GEMM, and
no ATen operator is dispatched, so the run-time watch cannot see it; the static scan names it."""
import cupy as cp
import torch


def kernel(a, b):
    return torch.from_dlpack(cp.matmul(cp.from_dlpack(a), cp.from_dlpack(b).T))
