import torch
def rel(a, b):
    a = a.double(); b = b.double()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()
def report(name, a, b):
    r = rel(a, b); print(f"{name:28s} rel_err={r:.2e} {'OK' if r < 1e-2 else 'FAIL'}", flush=True); return r
def rope_ref(x, cos, sin, inter):
    x = x.double(); c = cos.double()[None, :, None, :]; s = sin.double()[None, :, None, :]
    if inter:
        x1, x2 = x[..., 0::2], x[..., 1::2]
        out = torch.empty_like(x); out[..., 0::2] = x1 * c - x2 * s; out[..., 1::2] = x2 * c + x1 * s
        return out
    D = x.shape[-1]; x1, x2 = x[..., :D // 2], x[..., D // 2:]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], -1)
