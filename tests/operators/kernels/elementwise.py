"""Elementwise operators (swiglu, rope): kernels with a systematic error the correctness rule
must reject, and honest ones it must accept. Each function says what it tries."""
import torch


def _swiglu(gate, up):
    g = gate.float()
    return g * torch.sigmoid(g) * up.float()


def swiglu_bias(gate, up):
    """Every output 1% too large."""
    return (_swiglu(gate, up) * 1.01).to(gate.dtype)


def swiglu_hard_sigmoid(gate, up):
    """A piecewise-linear sigmoid, clamp(g / 4 + 1/2, 0, 1): cheap, off by up to 8%."""
    g = gate.float()
    return (g * (g / 4 + 0.5).clamp(0, 1) * up.float()).to(gate.dtype)


def swiglu_exp_form(gate, up):
    """Honest: g / (1 + exp(-g)) instead of g * sigmoid(g)."""
    g = gate.float()
    return (g / (1 + torch.exp(-g)) * up.float()).to(gate.dtype)


def swiglu_double_rounding(gate, up):
    """Honest as torch's F.silu(gate) * up is: silu rounded to bf16 before the product."""
    return torch.nn.functional.silu(gate) * up


def _rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def _rope(t, cos, sin):
    c, s = cos.float()[None, :, None, :], sin.float()[None, :, None, :]
    return t.float() * c + _rotate_half(t.float()) * s


def rope_bias(q, k, cos, sin):
    """Every output 1% too large."""
    return tuple((_rope(t, cos, sin) * 1.01).to(t.dtype) for t in (q, k))


def rope_interleaved(q, k, cos, sin):
    """Rotates interleaved pairs (GPT-J style) instead of the two halves."""
    def rot(t):
        tf = t.float()
        pair = torch.stack((-tf[..., 1::2], tf[..., 0::2]), dim=-1).flatten(-2)
        return (tf * cos.float()[None, :, None, :] + pair * sin.float()[None, :, None, :]).to(t.dtype)
    return rot(q), rot(k)


def rope_bf16_rotation(q, k, cos, sin):
    """Rotates in bfloat16 (as Liger does): within the envelope on random data, caught by the
    float32_rotation contract rule's probe."""
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return tuple(t * c + _rotate_half(t) * s for t in (q, k))


def rope_fma_order(q, k, cos, sin):
    """Honest: addcmul, the products accumulated in another order."""
    c, s = cos.float()[None, :, None, :], sin.float()[None, :, None, :]
    return tuple(torch.addcmul(_rotate_half(t.float()) * s, t.float(), c).to(t.dtype) for t in (q, k))


BIASED = {
    "swiglu": {"bias": swiglu_bias, "hard_sigmoid": swiglu_hard_sigmoid},
    "rope": {"bias": rope_bias, "interleaved": rope_interleaved},
}
HONEST = {
    "swiglu": {"exp_form": swiglu_exp_form, "double_rounding": swiglu_double_rounding},
    "rope": {"fma_order": rope_fma_order},
}
