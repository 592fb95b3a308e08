# scripted-configs: [{"num_warps": 4, "block": 1024}, {"num_warps": 8, "block": 2048}, {"num_warps": 8, "block": 4096}, {"num_warps": 16, "block": 8192}]
"""SwiGLU in Triton: an elementwise kernel over the flattened matrices, silu in float32."""
import torch
import triton
import triton.language as tl

CONFIG = {"num_warps": 4, "block": 1024}


@triton.jit
def _swiglu(g_ptr, u_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    g = tl.load(g_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(u_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = g / (1.0 + tl.exp(-g)) * u
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def kernel(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    gate, up = gate.contiguous(), up.contiguous()
    y = torch.empty_like(gate)
    n = gate.numel()
    _swiglu[(triton.cdiv(n, CONFIG["block"]),)](gate, up, y, n, BLOCK=CONFIG["block"], num_warps=CONFIG["num_warps"])
    return y
