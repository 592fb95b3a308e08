# scripted-configs: [{"block_m": 128, "block_n": 128, "block_k": 64, "group_m": 8, "num_warps": 8, "num_stages": 3}, {"block_m": 128, "block_n": 256, "block_k": 64, "group_m": 8, "num_warps": 8, "num_stages": 3}, {"block_m": 64, "block_n": 128, "block_k": 32, "group_m": 8, "num_warps": 4, "num_stages": 4}, {"block_m": 128, "block_n": 64, "block_k": 32, "group_m": 8, "num_warps": 4, "num_stages": 4}]
"""GEMM c = a @ b.T in Triton: output tiles in grouped order (tiles sharing rows of a run
together, for L2 reuse), float32 accumulation in tensor-core dots, masked edges."""
import os

import torch
import triton
import triton.language as tl

CONFIG = {"block_m": 128, "block_n": 128, "block_k": 64, "group_m": 8, "num_warps": 8, "num_stages": 3}


@triton.jit
def _gemm(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbn, sbk, scm, scn,
          BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr, UPCAST: tl.constexpr):
    pid = tl.program_id(0)
    n_m, n_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
    group = pid // (GROUP_M * n_n)
    first_m = group * GROUP_M
    size_m = min(n_m - first_m, GROUP_M)
    pid_m = first_m + (pid % (GROUP_M * n_n)) % size_m
    pid_n = (pid % (GROUP_M * n_n)) // size_m
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a = a_ptr + rm[:, None].to(tl.int64) * sam + rk[None, :] * sak
    b = b_ptr + rn[None, :].to(tl.int64) * sbn + rk[:, None] * sbk  # b is [N, K]: read as [BK, BN]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        k_left = K - k * BK
        a_tile = tl.load(a, mask=(rm[:, None] < M) & (rk[None, :] < k_left), other=0.0)
        b_tile = tl.load(b, mask=(rn[None, :] < N) & (rk[:, None] < k_left), other=0.0)
        if UPCAST:  # the CPU interpreter multiplies bf16 tiles as raw bits; never set on a GPU
            a_tile, b_tile = a_tile.to(tl.float32), b_tile.to(tl.float32)
        acc += tl.dot(a_tile, b_tile)
        a += BK * sak
        b += BK * sbk
    c = c_ptr + rm[:, None].to(tl.int64) * scm + rn[None, :] * scn
    tl.store(c, acc.to(c_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


def kernel(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    M, K = a.shape
    N = b.shape[0]
    c = torch.empty(M, N, dtype=a.dtype, device=a.device)
    cfg = CONFIG
    grid = (triton.cdiv(M, cfg["block_m"]) * triton.cdiv(N, cfg["block_n"]),)
    _gemm[grid](
        a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        BM=cfg["block_m"], BN=cfg["block_n"], BK=cfg["block_k"], GROUP_M=cfg["group_m"],
        UPCAST=os.environ.get("TRITON_INTERPRET") == "1" and a.dtype == torch.bfloat16,
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
    )
    return c
