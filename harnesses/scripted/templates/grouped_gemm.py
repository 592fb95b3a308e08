# scripted-configs: [{"block_m": 128, "block_n": 128, "block_k": 64, "group_m": 8, "num_warps": 8, "num_stages": 4, "tma": 1}, {"block_m": 128, "block_n": 256, "block_k": 64, "group_m": 8, "num_warps": 8, "num_stages": 3, "tma": 1}, {"block_m": 64, "block_n": 128, "block_k": 64, "group_m": 8, "num_warps": 4, "num_stages": 4, "tma": 1}, {"block_m": 128, "block_n": 128, "block_k": 64, "group_m": 8, "num_warps": 4, "num_stages": 4, "tma": 1}, {"block_m": 64, "block_n": 256, "block_k": 64, "group_m": 8, "num_warps": 8, "num_stages": 3, "tma": 1}, {"block_m": 128, "block_n": 64, "block_k": 64, "group_m": 8, "num_warps": 4, "num_stages": 4, "tma": 1}, {"block_m": 64, "block_n": 64, "block_k": 64, "group_m": 8, "num_warps": 4, "num_stages": 5, "tma": 1}, {"block_m": 128, "block_n": 128, "block_k": 64, "group_m": 16, "num_warps": 8, "num_stages": 3, "tma": 1}, {"block_m": 64, "block_n": 128, "block_k": 64, "group_m": 8, "num_warps": 4, "num_stages": 4, "tma": 0}]
"""MoE grouped GEMM in Triton, one launch for all experts, no host sync on the group sizes.

The grid covers the most row tiles any split of T rows into E groups can need (T / block_m + E)
times the column tiles, in grouped order. Each program loads the E group ends as one vector,
counts each group's row tiles and their running sum (tl.cumsum), and finds its expert as the
number of groups whose tiles end at or before its row tile; a program past the last tile exits.
The tile is then an ordinary GEMM tile of x[rows of e] @ w[e].T: operands fetched by the bulk
tensor copy engine (x as [T, K], w as [E * N, K]; rows past the group or past N belong to the
next group or expert, or read as zero past the end, and are never stored), float32 accumulation
in tensor-core dots, a masked store of the group's rows. Shared memory: num_stages * (block_m +
block_n) * block_k * 2 B, under the 227 KB of sm_90 for every listed configuration. K that is not
a multiple of 8 (a row stride the copy engine cannot take), or tma = 0, uses masked pointer loads."""
import os

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

CONFIG = {"block_m": 128, "block_n": 128, "block_k": 64, "group_m": 8, "num_warps": 8, "num_stages": 4, "tma": 1}
SHAPE_CONFIGS = {}  # "T=..,E=..,N=..,K=..": a configuration measured faster on that shape


@triton.jit
def _find_tile(offs_ptr, E, m_tiles, N, BM: tl.constexpr, BN: tl.constexpr, GROUP_M: tl.constexpr,
               E_P: tl.constexpr):
    """(expert, first row, row end, column tile) of this program; expert is E past the last tile."""
    pid = tl.program_id(0)
    n_n = tl.cdiv(N, BN)
    per_group = GROUP_M * n_n
    first_m = (pid // per_group) * GROUP_M
    size_m = tl.minimum(m_tiles - first_m, GROUP_M)
    j = first_m + (pid % per_group) % size_m  # this program's row tile, over all groups in order
    pid_n = (pid % per_group) // size_m
    e = tl.arange(0, E_P)
    ends = tl.load(offs_ptr + e, mask=e < E, other=0)
    ends = tl.where(e < E, ends, tl.max(ends, axis=0))  # padding: empty groups at the end
    starts = tl.where(e == 0, 0, tl.load(offs_ptr + e - 1, mask=(e > 0) & (e < E), other=0))
    starts = tl.where(e < E, starts, ends)
    tile_end = tl.cumsum((ends - starts + BM - 1) // BM, axis=0)
    expert = tl.sum((tile_end <= j).to(tl.int32), axis=0)
    hit = e == expert
    tile_start = tl.sum(tl.where(hit, tile_end - (ends - starts + BM - 1) // BM, 0), axis=0)
    row0 = tl.sum(tl.where(hit, starts, 0), axis=0) + (j - tile_start) * BM
    row_end = tl.sum(tl.where(hit, ends, 0), axis=0)
    return expert, row0, row_end, pid_n


@triton.jit
def _grouped_tma(x_desc, w_desc, out_ptr, offs_ptr, E, m_tiles, N, K, BM: tl.constexpr, BN: tl.constexpr,
                 BK: tl.constexpr, GROUP_M: tl.constexpr, E_P: tl.constexpr, UPCAST: tl.constexpr):
    expert, row0, row_end, pid_n = _find_tile(offs_ptr, E, m_tiles, N, BM, BN, GROUP_M, E_P)
    if expert < E:
        w_row = expert * N + pid_n * BN
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(tl.cdiv(K, BK)):
            a = x_desc.load([row0, k * BK])
            b = w_desc.load([w_row, k * BK])
            if UPCAST:  # the CPU interpreter multiplies bf16 tiles as raw bits; never set on a GPU
                a, b = a.to(tl.float32), b.to(tl.float32)
            acc = tl.dot(a, b.T, acc)
        rm = row0 + tl.arange(0, BM)
        rn = pid_n * BN + tl.arange(0, BN)
        c = out_ptr + rm[:, None].to(tl.int64) * N + rn[None, :]
        tl.store(c, acc.to(out_ptr.dtype.element_ty), mask=(rm[:, None] < row_end) & (rn[None, :] < N))


@triton.jit
def _grouped_masked(x_ptr, w_ptr, out_ptr, offs_ptr, E, m_tiles, N, K, BM: tl.constexpr, BN: tl.constexpr,
                    BK: tl.constexpr, GROUP_M: tl.constexpr, E_P: tl.constexpr, UPCAST: tl.constexpr):
    expert, row0, row_end, pid_n = _find_tile(offs_ptr, E, m_tiles, N, BM, BN, GROUP_M, E_P)
    if expert < E:
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
            if UPCAST:
                a_tile, b_tile = a_tile.to(tl.float32), b_tile.to(tl.float32)
            acc = tl.dot(a_tile, b_tile, acc)
            a += BK
            b += BK
        c = out_ptr + rm[:, None].to(tl.int64) * N + rn[None, :]
        tl.store(c, acc.to(out_ptr.dtype.element_ty), mask=(rm[:, None] < row_end) & (rn[None, :] < N))


def kernel(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    x, w, offs = x.contiguous(), w.contiguous(), offs.contiguous()
    T, K = x.shape
    E, N, _ = w.shape
    cfg = SHAPE_CONFIGS.get(f"T={T},E={E},N={N},K={K}", CONFIG)
    out = torch.empty(T, N, dtype=x.dtype, device=x.device)
    BM, BN, BK = cfg["block_m"], cfg["block_n"], cfg["block_k"]
    m_tiles = triton.cdiv(T, BM) + E  # each group wastes at most one partial tile
    grid = (m_tiles * triton.cdiv(N, BN),)
    meta = dict(BM=BM, BN=BN, BK=BK, GROUP_M=cfg["group_m"], E_P=triton.next_power_of_2(E),
                UPCAST=os.environ.get("TRITON_INTERPRET") == "1" and x.dtype == torch.bfloat16,
                num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
    aligned = (K * x.element_size()) % 16 == 0 and x.data_ptr() % 16 == 0 and w.data_ptr() % 16 == 0
    if aligned and cfg["tma"]:
        x_desc = TensorDescriptor.from_tensor(x, [BM, BK])
        w_desc = TensorDescriptor.from_tensor(w.view(E * N, K), [BN, BK])
        _grouped_tma[grid](x_desc, w_desc, out, offs, E, m_tiles, N, K, **meta)
    else:
        _grouped_masked[grid](x, w, out, offs, E, m_tiles, N, K, **meta)
    return out
