# scripted-configs: [{"num_warps": 4, "rows_per_program": 1}, {"num_warps": 8, "rows_per_program": 1}, {"num_warps": 8, "rows_per_program": 4}, {"num_warps": 16, "rows_per_program": 2}]
"""LayerNorm in Triton: one program normalises rows_per_program rows, each row in one block;
the variance is taken around the mean (two passes over registers, not E[x^2] - E[x]^2)."""
import torch
import triton
import triton.language as tl

CONFIG = {"num_warps": 4, "rows_per_program": 1}
EPS = 1e-5


@triton.jit
def _layernorm_rows(x_ptr, w_ptr, b_ptr, y_ptr, M, N, stride, eps, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    for i in range(ROWS):
        row = tl.program_id(0) * ROWS + i
        if row < M:
            offs = row.to(tl.int64) * stride + cols
            x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
            mean = tl.sum(x, axis=0) / N
            xc = tl.where(mask, x - mean, 0.0)
            rstd = tl.rsqrt(tl.sum(xc * xc, axis=0) / N + eps)
            tl.store(y_ptr + offs, (xc * rstd * w + b).to(y_ptr.dtype.element_ty), mask=mask)


def kernel(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    M, N = x.shape
    y = torch.empty_like(x)
    rows = CONFIG["rows_per_program"]
    _layernorm_rows[(triton.cdiv(M, rows),)](
        x, weight, bias, y, M, N, x.stride(0), EPS,
        ROWS=rows, BLOCK=triton.next_power_of_2(N), num_warps=CONFIG["num_warps"],
    )
    return y
