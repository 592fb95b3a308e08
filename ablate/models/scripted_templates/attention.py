# scripted-configs: [{"block_m": 128, "block_n": 64, "num_warps": 8, "num_stages": 3}, {"block_m": 64, "block_n": 64, "num_warps": 4, "num_stages": 3}, {"block_m": 128, "block_n": 128, "num_warps": 8, "num_stages": 2}, {"block_m": 64, "block_n": 32, "num_warps": 4, "num_stages": 4}]
"""Causal flash attention forward in Triton: one program per block of queries of one batch and
head; key blocks up to the diagonal are streamed with an online softmax (running max and sum in
float32, exp2 with the scale folded in), so the S x S scores never reach memory."""
import math
import os

import torch
import triton
import triton.language as tl

CONFIG = {"block_m": 128, "block_n": 64, "num_warps": 8, "num_stages": 3}


@triton.jit
def _attn_fwd(q_ptr, k_ptr, v_ptr, o_ptr, S, scale_log2, D: tl.constexpr,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, UPCAST: tl.constexpr):
    start_m = tl.program_id(0)
    base = tl.program_id(1).to(tl.int64) * S * D  # one (batch, head) slice of [S, D]
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D)
    q = tl.load(q_ptr + base + offs_m[:, None] * D + offs_d[None, :], mask=offs_m[:, None] < S, other=0.0)
    if UPCAST:  # the CPU interpreter multiplies bf16 tiles as raw bits; never set on a GPU
        q = q.to(tl.float32)
    m_i = tl.full([BLOCK_M], -1e30, tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    hi = tl.minimum((start_m + 1) * BLOCK_M, S)  # causal: no key past the block's last query
    for start_n in range(0, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        k = tl.load(k_ptr + base + offs_n[None, :] * D + offs_d[:, None], mask=offs_n[None, :] < S, other=0.0)
        v = tl.load(v_ptr + base + offs_n[:, None] * D + offs_d[None, :], mask=offs_n[:, None] < S, other=0.0)
        if UPCAST:
            k, v = k.to(tl.float32), v.to(tl.float32)
        qk = tl.dot(q, k) * scale_log2
        keep = (offs_m[:, None] >= offs_n[None, :]) & (offs_n[None, :] < S)
        qk = tl.where(keep, qk, -float("inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(qk - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    o = acc / l_i[:, None]
    tl.store(o_ptr + base + offs_m[:, None] * D + offs_d[None, :], o.to(o_ptr.dtype.element_ty),
             mask=offs_m[:, None] < S)


def kernel(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    B, H, S, D = q.shape
    o = torch.empty_like(q)
    cfg = CONFIG
    grid = (triton.cdiv(S, cfg["block_m"]), B * H)
    _attn_fwd[grid](
        q, k, v, o, S, (1.0 / math.sqrt(D)) * 1.4426950408889634, D=D,
        BLOCK_M=cfg["block_m"], BLOCK_N=cfg["block_n"],
        UPCAST=os.environ.get("TRITON_INTERPRET") == "1" and q.dtype == torch.bfloat16,
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
    )
    return o
