"""Contractions (gemm, attention, grouped_gemm) and top-k: kernels with a systematic error the
correctness rule must reject, and honest ones it must accept. Each function says what it tries."""
import math

import torch


def gemm_bias(a, b):
    """Every output 1% too large."""
    return (a.float() @ b.float().T * 1.01).to(a.dtype)


def gemm_drop_last_block(a, b):
    """Skips the last 16 columns of K (a tail block never loaded)."""
    k = a.shape[1] - 16
    return (a.float()[:, :k] @ b.float()[:, :k].T).to(a.dtype)


def gemm_fp8(a, b):
    """Multiplies float8 (e4m3) copies of the operands: four times fewer mantissa bits."""
    return (a.to(torch.float8_e4m3fn).float() @ b.to(torch.float8_e4m3fn).float().T).to(a.dtype)


def gemm_split_k(a, b):
    """Honest: split-K into 4 float32 partial products, summed."""
    step = -(-a.shape[1] // 4)
    parts = [a.float()[:, i:i + step] @ b.float()[:, i:i + step].T for i in range(0, a.shape[1], step)]
    return sum(parts).to(a.dtype)


def gemm_bf16_partial_sums(a, b):
    """Honest as cuBLAS may be (reduced-precision split-K reductions): 4 float32 partial
    products, each rounded to bf16, then summed; within the envelope's floor."""
    step = -(-a.shape[1] // 4)
    parts = [(a.float()[:, i:i + step] @ b.float()[:, i:i + step].T).to(a.dtype).float()
             for i in range(0, a.shape[1], step)]
    return sum(parts).to(a.dtype)


def gemm_reversed_k(a, b):
    """Honest: the K dimension accumulated in reverse order."""
    return (a.float().flip(1) @ b.float().flip(1).T).to(a.dtype)


def flash_attention(q, k, v, block=16, p_bf16=True, scale=None, causal=True, p_dtype=torch.bfloat16):
    """Flash-style causal attention: key blocks streamed with a running max and sum in float32,
    P rounded to bfloat16 before P @ V (as FlashAttention keeps it)."""
    S, D = q.shape[-2:]
    scale = 1 / math.sqrt(D) if scale is None else scale
    qf, kf, vf = q.float(), k.float(), v.float()
    out = torch.empty_like(qf)
    for i in range(0, S, block):
        qi = qf[..., i:i + block, :]
        m = torch.full(qi.shape[:-1], -math.inf)
        s = torch.zeros(qi.shape[:-1])
        acc = torch.zeros_like(qi)
        for j in range(0, min(i + block, S) if causal else S, block):
            sc = qi @ kf[..., j:j + block, :].transpose(-1, -2) * scale
            if causal:
                rows = torch.arange(i, min(i + block, S))[:, None]
                cols = torch.arange(j, min(j + block, S))[None, :]
                sc = sc.masked_fill(cols > rows, -math.inf)
            mn = torch.maximum(m, sc.amax(-1))
            alpha, p = torch.exp(m - mn), torch.exp(sc - mn[..., None])
            s = s * alpha + p.sum(-1)
            pv = p.to(p_dtype).float() if p_bf16 else p
            acc = acc * alpha[..., None] + pv @ vf[..., j:j + block, :]
            m = mn
        out[..., i:i + block, :] = acc / s[..., None]
    return out.to(q.dtype)


def attention_bias(q, k, v):
    """Every output 1% too large."""
    return (flash_attention(q, k, v, p_bf16=False).float() * 1.01).to(q.dtype)


def attention_no_scale(q, k, v):
    """Forgets the 1 / sqrt(D) scale of the scores."""
    return flash_attention(q, k, v, scale=1.0)


def attention_not_causal(q, k, v):
    """Lets every query see every key."""
    return flash_attention(q, k, v, causal=False)


def attention_fp8_p(q, k, v):
    """P rounded to float8 e4m3 before P @ V: below the contract's bf16, and far enough below it to
    show in short causal rows, though each row's error is sized by its own row."""
    return flash_attention(q, k, v, block=16, p_dtype=torch.float8_e4m3fn)


def attention_bf16_p(q, k, v):
    """Honest: flash-style, P in bfloat16 before P @ V."""
    return flash_attention(q, k, v, block=16, p_bf16=True)


def attention_f32_p(q, k, v):
    """Honest: flash-style with another block size, P kept in float32."""
    return flash_attention(q, k, v, block=32, p_bf16=False)


def _grouped(x, w, offs, shift=0):
    out = torch.zeros(x.shape[0], w.shape[1], dtype=torch.float32)
    start = 0
    for e, end in enumerate(offs.tolist()):
        s = max(min(start + shift, end), 0) if e else start
        out[s:end] = x[s:end].float() @ w[e].float().T
        if e and s > start:  # the first rows of this group taken by the previous expert
            out[start:s] = x[start:s].float() @ w[e - 1].float().T
        start = end
    return out


def grouped_gemm_bias(x, w, offs):
    """Every output 1% too large."""
    return (_grouped(x, w, offs) * 1.01).to(x.dtype)


def grouped_gemm_off_by_one(x, w, offs):
    """Each group's first row multiplied by the previous expert's weight (a boundary off by one)."""
    return _grouped(x, w, offs, shift=1).to(x.dtype)


def grouped_gemm_split_k(x, w, offs):
    """Honest: each group's product in two float32 halves of K."""
    h = x.shape[1] // 2
    return (_grouped(x[:, :h], w[:, :, :h], offs) + _grouped(x[:, h:], w[:, :, h:], offs)).to(x.dtype)


def topk_smallest(x, k):
    """Returns the k smallest values instead of the largest."""
    v, i = x.float().sort(-1)
    return v[:, :k].to(x.dtype).contiguous(), i[:, :k].contiguous()


def topk_last_wrong(x, k):
    """The k-th index replaced by the (k+1)-th: one value per row off."""
    v, i = torch.sort(x, dim=-1, descending=True)
    i = torch.cat((i[:, :k - 1], i[:, k:k + 1]), 1)
    return x.gather(1, i), i.contiguous()


def topk_stable_sort(x, k):
    """Honest: a stable sort picks other columns among tied values than torch.topk does."""
    v, i = torch.sort(x, dim=-1, descending=True, stable=True)
    return v[:, :k].contiguous(), i[:, :k].contiguous()


BIASED = {
    "gemm": {"bias": gemm_bias, "drop_last_block": gemm_drop_last_block, "fp8": gemm_fp8},
    "attention": {"bias": attention_bias, "no_scale": attention_no_scale, "not_causal": attention_not_causal,
                  "fp8_p": attention_fp8_p},
    "grouped_gemm": {"bias": grouped_gemm_bias, "off_by_one": grouped_gemm_off_by_one},
    "topk": {"smallest": topk_smallest, "last_wrong": topk_last_wrong},
}
HONEST = {
    "gemm": {"split_k": gemm_split_k, "reversed_k": gemm_reversed_k, "bf16_partial_sums": gemm_bf16_partial_sums},
    "attention": {"bf16_p": attention_bf16_p, "f32_p": attention_f32_p},
    "grouped_gemm": {"split_k": grouped_gemm_split_k},
    "topk": {"stable_sort": topk_stable_sort},
}
