# scripted-configs: [{"num_warps": 1, "tokens_per_program": 1}, {"num_warps": 2, "tokens_per_program": 1}, {"num_warps": 4, "tokens_per_program": 2}, {"num_warps": 8, "tokens_per_program": 4}]
"""RoPE in Triton: one program rotates every head of tokens_per_program tokens, reading the
token's cos/sin row once; q and k are two launches of the same kernel."""
import torch
import triton
import triton.language as tl

CONFIG = {"num_warps": 1, "tokens_per_program": 1}


@triton.jit
def _rope_tokens(x_ptr, y_ptr, cos_ptr, sin_ptr, n_tokens, S, H,
                 D: tl.constexpr, BLOCK_H: tl.constexpr, TOKENS: tl.constexpr):
    HALF: tl.constexpr = D // 2
    heads = tl.arange(0, BLOCK_H)[:, None]
    dims = tl.arange(0, HALF)[None, :]
    mask = (heads < H) & (dims < HALF)
    for i in range(TOKENS):
        tok = tl.program_id(0) * TOKENS + i
        if tok < n_tokens:
            pos = tok % S
            c1 = tl.load(cos_ptr + pos * D + dims).to(tl.float32)
            c2 = tl.load(cos_ptr + pos * D + HALF + dims).to(tl.float32)
            s1 = tl.load(sin_ptr + pos * D + dims).to(tl.float32)
            s2 = tl.load(sin_ptr + pos * D + HALF + dims).to(tl.float32)
            base = tok.to(tl.int64) * H * D + heads * D + dims
            x1 = tl.load(x_ptr + base, mask=mask, other=0.0).to(tl.float32)
            x2 = tl.load(x_ptr + base + HALF, mask=mask, other=0.0).to(tl.float32)
            tl.store(y_ptr + base, (x1 * c1 - x2 * s1).to(y_ptr.dtype.element_ty), mask=mask)
            tl.store(y_ptr + base + HALF, (x2 * c2 + x1 * s2).to(y_ptr.dtype.element_ty), mask=mask)


def _rotate(x, cos, sin):
    x = x.contiguous()
    B, S, H, D = x.shape
    y = torch.empty_like(x)
    tokens = CONFIG["tokens_per_program"]
    _rope_tokens[(triton.cdiv(B * S, tokens),)](
        x, y, cos, sin, B * S, S, H, D=D, BLOCK_H=triton.next_power_of_2(H), TOKENS=tokens,
        num_warps=CONFIG["num_warps"],
    )
    return y


def kernel(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
    cos, sin = cos.contiguous(), sin.contiguous()
    return _rotate(q, cos, sin), _rotate(k, cos, sin)
