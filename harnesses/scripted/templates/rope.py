# scripted-configs: [{"rows": 16, "num_warps": 4}, {"rows": 32, "num_warps": 4}, {"rows": 64, "num_warps": 8}, {"rows": 8, "num_warps": 2}, {"rows": 32, "num_warps": 8}, {"rows": 128, "num_warps": 8}, {"rows": 4, "num_warps": 1}]
"""RoPE (rotate_half) in Triton, q and k in one launch. Both are viewed as rows of D elements
([B*S*H, D], token-major, so `rows` consecutive rows are one contiguous span of memory whatever
the head count); a program rotates `rows` rows of q or of k: the row's token gives its position,
whose cos/sin rows are gathered (they stay in cache across the heads of a token). The rotation is
computed in float32 and rounded once: out1 = x1 c1 - x2 s1, out2 = x2 c2 + x1 s2."""
import torch
import triton
import triton.language as tl

CONFIG = {"rows": 16, "num_warps": 4}
SHAPE_CONFIGS = {}  # "B=..,S=..,Hq=..,Hk=..,D=..": a configuration measured faster on that shape


@triton.jit
def _rotate_rows(x_ptr, y_ptr, cos_ptr, sin_ptr, block, n_rows, S, H, D: tl.constexpr, ROWS: tl.constexpr):
    HALF: tl.constexpr = D // 2
    rows = block * ROWS + tl.arange(0, ROWS)
    dims = tl.arange(0, HALF)[None, :]
    mask = (rows < n_rows)[:, None]
    pos = ((rows // H) % S).to(tl.int64)[:, None] * D  # row -> token -> position
    base = rows.to(tl.int64)[:, None] * D + dims
    x1 = tl.load(x_ptr + base, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
    x2 = tl.load(x_ptr + base + HALF, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
    c1 = tl.load(cos_ptr + pos + dims, mask=mask, other=0.0, eviction_policy="evict_last").to(tl.float32)
    c2 = tl.load(cos_ptr + pos + HALF + dims, mask=mask, other=0.0, eviction_policy="evict_last").to(tl.float32)
    s1 = tl.load(sin_ptr + pos + dims, mask=mask, other=0.0, eviction_policy="evict_last").to(tl.float32)
    s2 = tl.load(sin_ptr + pos + HALF + dims, mask=mask, other=0.0, eviction_policy="evict_last").to(tl.float32)
    tl.store(y_ptr + base, (x1 * c1 - x2 * s1).to(y_ptr.dtype.element_ty), mask=mask)
    tl.store(y_ptr + base + HALF, (x2 * c2 + x1 * s2).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rope(q_ptr, k_ptr, qo_ptr, ko_ptr, cos_ptr, sin_ptr, q_rows, k_rows, q_blocks, S, Hq, Hk,
          D: tl.constexpr, ROWS: tl.constexpr):
    pid = tl.program_id(0)
    if pid < q_blocks:
        _rotate_rows(q_ptr, qo_ptr, cos_ptr, sin_ptr, pid, q_rows, S, Hq, D, ROWS)
    else:
        _rotate_rows(k_ptr, ko_ptr, cos_ptr, sin_ptr, pid - q_blocks, k_rows, S, Hk, D, ROWS)


def kernel(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
    q, k, cos, sin = q.contiguous(), k.contiguous(), cos.contiguous(), sin.contiguous()
    B, S, Hq, D = q.shape
    Hk = k.shape[2]
    cfg = SHAPE_CONFIGS.get(f"B={B},S={S},Hq={Hq},Hk={Hk},D={D}", CONFIG)
    q_out, k_out = torch.empty_like(q), torch.empty_like(k)
    rows = cfg["rows"]
    q_rows, k_rows = B * S * Hq, B * S * Hk
    q_blocks = triton.cdiv(q_rows, rows)
    _rope[(q_blocks + triton.cdiv(k_rows, rows),)](
        q, k, q_out, k_out, cos, sin, q_rows, k_rows, q_blocks, S, Hq, Hk, D=D, ROWS=rows,
        num_warps=cfg["num_warps"])
    return q_out, k_out
