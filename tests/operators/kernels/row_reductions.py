"""Row reductions (rmsnorm, layernorm, softmax, cross_entropy): kernels with a systematic error
the correctness rule must reject, and honest ones (other reduction orders) it must accept.
Each function says what it tries."""
import math

import torch

RMS_EPS, LN_EPS = 1e-6, 1e-5


def _rms(x, w, eps=RMS_EPS, n=None):
    xf = x.float()
    ms = xf.pow(2).sum(-1, keepdim=True) / (n or x.shape[-1])
    return (xf * torch.rsqrt(ms + eps) * w.float()).to(x.dtype)


def _ln(x, w, b, eps=LN_EPS):
    xf = x.float()
    mean = xf.mean(-1, keepdim=True)
    var = (xf - mean).pow(2).mean(-1, keepdim=True)
    return ((xf - mean) * torch.rsqrt(var + eps) * w.float() + b.float()).to(x.dtype)


# -- rmsnorm -------------------------------------------------------------------------------------
def rmsnorm_bias(x, w):
    """Every output 1% too large (a wrong constant)."""
    return (_rms(x, w).float() * 1.01).to(x.dtype)


def rmsnorm_pow2(x, w):
    """Divides the sum of squares by the padded power-of-two width (1024 for N=1000): 1.2% off."""
    return _rms(x, w, n=1 << (x.shape[-1] - 1).bit_length())


def rmsnorm_wrong_eps(x, w):
    """epsilon 1e-5 instead of 1e-6: only rows whose mean square is near epsilon notice."""
    return _rms(x, w, eps=1e-5)


def rmsnorm_no_eps(x, w):
    """Drops the epsilon: a zero row gives NaN, a tiny row is scaled up 1000x."""
    return _rms(x, w, eps=0.0)


def rmsnorm_stale_row(x, w):
    """The last row computed from other data (a row left from an earlier call)."""
    out = _rms(x, w)
    out[-1] = _rms(torch.roll(x, 1, 0), w)[-1]
    return out


def rmsnorm_chunked(x, w):
    """Honest: the sum of squares in 128-column chunks, added in float32."""
    xf = x.float()
    ss = sum(xf[:, i:i + 128].pow(2).sum(-1, keepdim=True) for i in range(0, x.shape[-1], 128))
    return (xf * torch.rsqrt(ss / x.shape[-1] + RMS_EPS) * w.float()).to(x.dtype)


def rmsnorm_sequential(x, w):
    """Honest: a Kahan-free float32 running sum, one column at a time, and 1 / sqrt."""
    xf = x.float()
    ss = torch.zeros(x.shape[0], 1)
    for j in range(x.shape[-1]):
        ss = ss + xf[:, j:j + 1] * xf[:, j:j + 1]
    return (xf / torch.sqrt(ss / x.shape[-1] + RMS_EPS) * w.float()).to(x.dtype)


def rmsnorm_double_rounding(x, w):
    """Honest as libraries are (Liger's llama mode): x * rstd rounded to bf16, then times w."""
    xf = x.float()
    xn = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + RMS_EPS)).to(x.dtype)
    return (xn.float() * w.float()).to(x.dtype)


# -- layernorm -----------------------------------------------------------------------------------
def layernorm_bias(x, w, b):
    """Every output 1% too large."""
    return (_ln(x, w, b).float() * 1.01).to(x.dtype)


def layernorm_no_eps(x, w, b):
    """Drops the epsilon: a zero row gives NaN."""
    return _ln(x, w, b, eps=0.0)


def layernorm_no_bias(x, w, b):
    """Forgets the bias vector."""
    return _ln(x, w, torch.zeros_like(b))


def layernorm_one_pass(x, w, b):
    """Honest: E[x^2] - E[x]^2 in float32 (one pass over the row)."""
    xf = x.float()
    mean = xf.sum(-1, keepdim=True) / x.shape[-1]
    var = ((xf * xf).sum(-1, keepdim=True) / x.shape[-1] - mean * mean).clamp_min(0)
    return ((xf - mean) * torch.rsqrt(var + LN_EPS) * w.float() + b.float()).to(x.dtype)


def layernorm_welford(x, w, b):
    """Honest: a chunked Welford merge of 256-column partial means and variances."""
    xf = x.float()
    n, mean, m2 = 0, torch.zeros(x.shape[0], 1), torch.zeros(x.shape[0], 1)
    for i in range(0, x.shape[-1], 256):
        c = xf[:, i:i + 256]
        cn, cm = c.shape[-1], c.mean(-1, keepdim=True)
        cm2 = (c - cm).pow(2).sum(-1, keepdim=True)
        delta, tot = cm - mean, n + cn
        mean, m2, n = mean + delta * cn / tot, m2 + cm2 + delta.pow(2) * n * cn / tot, tot
    return ((xf - mean) * torch.rsqrt(m2 / n + LN_EPS) * w.float() + b.float()).to(x.dtype)


# -- softmax -------------------------------------------------------------------------------------
def _softmax(x):
    xf = x.float()
    e = torch.exp(xf - xf.amax(-1, keepdim=True))
    return e / e.sum(-1, keepdim=True)


def softmax_bias(x):
    """Every probability 1% too large."""
    return (_softmax(x) * 1.01).to(x.dtype)


def softmax_padded_sum(x):
    """Pads rows to a power of two with 0 instead of -inf: the sum gains exp(0 - max) per pad."""
    xf = x.float()
    n = 1 << (x.shape[-1] - 1).bit_length()
    m = xf.amax(-1, keepdim=True)
    e = torch.exp(xf - m)
    return (e / (e.sum(-1, keepdim=True) + (n - x.shape[-1]) * torch.exp(-m))).to(x.dtype)


def softmax_no_max(x):
    """Skips the row max: exp overflows on large inputs."""
    e = torch.exp(x.float())
    return (e / e.sum(-1, keepdim=True)).to(x.dtype)


def softmax_online(x):
    """Honest: an online softmax over 128-column blocks (running max and rescaled sum)."""
    xf = x.float()
    m = torch.full((x.shape[0], 1), -math.inf)
    s = torch.zeros(x.shape[0], 1)
    for i in range(0, x.shape[-1], 128):
        c = xf[:, i:i + 128]
        mn = torch.maximum(m, c.amax(-1, keepdim=True))
        s = s * torch.exp(m - mn) + torch.exp(c - mn).sum(-1, keepdim=True)
        m = mn
    return (torch.exp(xf - m) / s).to(x.dtype)


def softmax_exp2_reciprocal(x):
    """Honest: exp2 with log2(e) folded in, and a multiply by the reciprocal of the sum."""
    xf = x.float() * 1.4426950408889634
    e = torch.exp2(xf - xf.amax(-1, keepdim=True))
    return (e * (1.0 / e.sum(-1, keepdim=True))).to(x.dtype)


# -- cross_entropy -------------------------------------------------------------------------------
def _row_losses(logits, labels):
    lf = logits.float()
    m = lf.amax(-1)
    return m + torch.log(torch.exp(lf - m[:, None]).sum(-1)) - lf.gather(1, labels[:, None]).squeeze(1)


def cross_entropy_bias(logits, labels):
    """The loss 1% too large."""
    return _row_losses(logits, labels).mean() * 1.01


def cross_entropy_padded_mean(logits, labels):
    """Averages over the padded power-of-two number of rows."""
    return _row_losses(logits, labels).sum() / (1 << (logits.shape[0] - 1).bit_length())


def cross_entropy_bf16_rows(logits, labels):
    """Stores each row's loss in bfloat16 before the mean (as Liger does): breaks float32_row_losses."""
    return _row_losses(logits, labels).to(torch.bfloat16).float().mean()


def cross_entropy_bf16_loss(logits, labels):
    """Returns the loss rounded to bfloat16 (2**-9 relative)."""
    return _row_losses(logits, labels).mean().to(torch.bfloat16).float()


def cross_entropy_chunked(logits, labels):
    """Honest: an online logsumexp over 256-column blocks, and a sequential float32 mean."""
    lf = logits.float()
    m = torch.full((lf.shape[0],), -math.inf)
    s = torch.zeros(lf.shape[0])
    for i in range(0, lf.shape[1], 256):
        c = lf[:, i:i + 256]
        mn = torch.maximum(m, c.amax(-1))
        s = s * torch.exp(m - mn) + torch.exp(c - mn[:, None]).sum(-1)
        m = mn
    rows = m + torch.log(s) - lf.gather(1, labels[:, None]).squeeze(1)
    total = torch.zeros((), dtype=torch.float32)
    for r in rows:
        total = total + r
    return total / rows.numel()


BIASED = {
    "rmsnorm": {"bias": rmsnorm_bias, "pow2": rmsnorm_pow2, "stale_row": rmsnorm_stale_row},
    "layernorm": {"bias": layernorm_bias, "no_bias": layernorm_no_bias},
    "softmax": {"bias": softmax_bias, "padded_sum": softmax_padded_sum, "no_max": softmax_no_max},
    "cross_entropy": {"bias": cross_entropy_bias, "padded_mean": cross_entropy_padded_mean,
                      "bf16_loss": cross_entropy_bf16_loss},
}
# Right except on rows of zeros or tiny values (the tiny_rows distribution).
EPSILON = {"rmsnorm": {"no_eps": rmsnorm_no_eps, "wrong_eps": rmsnorm_wrong_eps},
           "layernorm": {"no_eps": layernorm_no_eps}}
HONEST = {
    "rmsnorm": {"chunked": rmsnorm_chunked, "sequential": rmsnorm_sequential, "double_rounding": rmsnorm_double_rounding},
    "layernorm": {"one_pass": layernorm_one_pass, "welford": layernorm_welford},
    "softmax": {"online": softmax_online, "exp2_reciprocal": softmax_exp2_reciprocal},
    "cross_entropy": {"chunked": cross_entropy_chunked},
}
