# scripted-configs: [{"block_m": 128, "block_n": 128, "block_k": 64, "num_warps": 8, "num_stages": 3}, {"block_m": 64, "block_n": 128, "block_k": 64, "num_warps": 4, "num_stages": 4}, {"block_m": 128, "block_n": 256, "block_k": 64, "num_warps": 8, "num_stages": 3}, {"block_m": 64, "block_n": 64, "block_k": 32, "num_warps": 4, "num_stages": 4}]
"""MoE grouped GEMM in Triton, one launch for all experts: the grid covers the most row tiles
any split of T rows into E groups can need; each program finds its expert by walking the group
ends (no host sync on the group sizes), then computes one tile of x_rows @ w[e].T."""
import os

import torch
import triton
import triton.language as tl

CONFIG = {"block_m": 128, "block_n": 128, "block_k": 64, "num_warps": 8, "num_stages": 3}


@triton.jit
def _grouped(x_ptr, w_ptr, offs_ptr, out_ptr, N, K, E,
             BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, UPCAST: tl.constexpr):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    zero = tl.zeros([], dtype=tl.int32)  # loop-carried scalars must be tensors from the start
    expert, row0, row_end, tiles_before, start = zero - 1, zero, zero, zero, zero
    for e in range(E):
        end = tl.load(offs_ptr + e)
        n_tiles = tl.cdiv(end - start, BM)
        hit = (pid_m >= tiles_before) & (pid_m < tiles_before + n_tiles)
        expert = tl.where(hit, e, expert)
        row0 = tl.where(hit, start + (pid_m - tiles_before) * BM, row0)
        row_end = tl.where(hit, end, row_end)
        tiles_before += n_tiles
        start = end
    if expert >= 0:
        rm = row0 + tl.arange(0, BM)
        rn = pid_n * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        a = x_ptr + rm[:, None].to(tl.int64) * K + rk[None, :]
        b = w_ptr + expert.to(tl.int64) * N * K + rn[None, :].to(tl.int64) * K + rk[:, None]  # w[e] as [BK, BN]
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BK)):
            k_left = K - k * BK
            a_tile = tl.load(a, mask=(rm[:, None] < row_end) & (rk[None, :] < k_left), other=0.0)
            b_tile = tl.load(b, mask=(rn[None, :] < N) & (rk[:, None] < k_left), other=0.0)
            if UPCAST:  # the CPU interpreter multiplies bf16 tiles as raw bits; never set on a GPU
                a_tile, b_tile = a_tile.to(tl.float32), b_tile.to(tl.float32)
            acc += tl.dot(a_tile, b_tile)
            a += BK
            b += BK
        c = out_ptr + rm[:, None].to(tl.int64) * N + rn[None, :]
        tl.store(c, acc.to(out_ptr.dtype.element_ty), mask=(rm[:, None] < row_end) & (rn[None, :] < N))


def kernel(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    x, w, offs = x.contiguous(), w.contiguous(), offs.contiguous()
    T, K = x.shape
    E, N, _ = w.shape
    out = torch.empty(T, N, dtype=x.dtype, device=x.device)
    cfg = CONFIG
    max_tiles = triton.cdiv(T, cfg["block_m"]) + E  # each group wastes at most one partial tile
    _grouped[(max_tiles, triton.cdiv(N, cfg["block_n"]))](
        x, w, offs, out, N, K, E, BM=cfg["block_m"], BN=cfg["block_n"], BK=cfg["block_k"],
        UPCAST=os.environ.get("TRITON_INTERPRET") == "1" and x.dtype == torch.bfloat16,
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
    )
    return out
