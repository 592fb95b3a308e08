import os, sys, time
import torch, triton
import torch.nn.functional as F
import kb_kernels as K

dev = "cuda" if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1" else "cpu"
bf = torch.bfloat16
torch.manual_seed(0)
from kb_util import rel, report, rope_ref
def _unused_rel(a, b):
    a = a.double(); b = b.double()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()
def report(name, a, b):
    r = rel(a, b); print(f"{name:28s} rel_err={r:.2e} {'OK' if r < 1e-2 else 'FAIL'}"); return r

small = dev == "cpu"
# rmsnorm
for M, N in ([(5, 1000), (8, 512)] if small else [(4000, 7168), (16384, 4096)]):
    x = torch.randn(M, N, dtype=bf, device=dev) + 3; w = torch.randn(N, dtype=bf, device=dev)
    ref = (x.double() * torch.rsqrt(x.double().pow(2).mean(-1, keepdim=True) + 1e-6) * w.double())
    report(f"rmsnorm {M}x{N}", K.rmsnorm(x, w), ref)
    report(f"rmsnorm_rows {M}x{N}", K.rmsnorm_rows(x, w), ref)
# softmax
for M, N in ([(5, 1000), (3, 5000)] if small else [(16384, 4096), (8192, 32768), (1000, 50000)]):
    x = torch.randn(M, N, dtype=bf, device=dev) * 100
    ref = torch.softmax(x.double(), -1)
    if N <= 32768: report(f"softmax {M}x{N}", K.softmax(x), ref)
    report(f"softmax_online {M}x{N}", K.softmax_online(x, BLOCK=1024 if small else 4096), ref)
# cross entropy
for M, N in ([(4, 3000)] if small else [(8192, 128256), (77, 128256)]):
    x = torch.randn(M, N, dtype=bf, device=dev) * 10
    t = torch.randint(0, N, (M,), device=dev); t[1] = -100
    ref = F.cross_entropy(x.double(), t, ignore_index=-100)
    report(f"cross_entropy {M}x{N}", K.cross_entropy(x, t, BLOCK=1024 if small else 4096), ref)
# swiglu
for M, N in ([(5, 999)] if small else [(16384, 14336), (1000, 1000)]):
    g = torch.randn(M, N, dtype=bf, device=dev); u = torch.randn(M, N, dtype=bf, device=dev)
    report(f"swiglu {M}x{N}", K.swiglu(g, u), F.silu(g.double()) * u.double())
# rope
def rope_ref(x, cos, sin, inter):
    x = x.double(); c = cos.double()[None, :, None, :]; s = sin.double()[None, :, None, :]
    if inter:
        x1, x2 = x[..., 0::2], x[..., 1::2]
        out = torch.empty_like(x); out[..., 0::2] = x1 * c - x2 * s; out[..., 1::2] = x2 * c + x1 * s
        return out
    D = x.shape[-1]; x1, x2 = x[..., :D // 2], x[..., D // 2:]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], -1)
for B, S, H, D in ([(2, 5, 3, 16)] if small else [(4, 4096, 32, 128), (2, 1000, 8, 64)]):
    x = torch.randn(B, S, H, D, dtype=bf, device=dev)
    ang = torch.arange(S, device=dev, dtype=torch.float32)[:, None] * (10000 ** (-torch.arange(0, D, 2, device=dev).float() / D))
    cos, sin = ang.cos().to(bf), ang.sin().to(bf)
    for inter in (False, True):
        report(f"rope {'inter' if inter else 'half'} {B}x{S}x{H}x{D}", K.rope(x, cos, sin, inter), rope_ref(x, cos, sin, inter))
# gemm
for M, N, Kd in ([(70, 50, 90)] if small else [(4096, 4096, 4096), (1000, 3000, 1000), (16384, 1024, 4096)]):
    a = torch.randn(M, Kd, dtype=bf, device=dev); b = torch.randn(Kd, N, dtype=bf, device=dev)
    report(f"gemm {M}x{N}x{Kd}", K.matmul(a, b), a.double() @ b.double())
# grouped gemm
for T, Kd, N, sizes in ([(100, 64, 48, [30, 0, 7, 63])] if small else [(8192, 4096, 1408, None), (4000, 2048, 1000, None)]):
    E = len(sizes) if sizes else 16
    if sizes is None:
        cuts = torch.sort(torch.randint(0, T + 1, (E - 1,))).values
        sizes = torch.diff(torch.cat([torch.tensor([0]), cuts, torch.tensor([T])])).tolist()
        sizes[3] = sizes[3] + sizes[4]; sizes[4] = 0     # one empty group
    offs = torch.tensor([0] + list(torch.cumsum(torch.tensor(sizes), 0)), dtype=torch.int32, device=dev)
    x = torch.randn(T, Kd, dtype=bf, device=dev); w = torch.randn(E, Kd, N, dtype=bf, device=dev) / 8
    ref = torch.cat([x[offs[e]:offs[e + 1]].double() @ w[e].double() for e in range(E)])
    kw = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16) if small else {}
    report(f"grouped_mm T={T} E={E}", K.grouped_mm(x, w, offs, **kw), ref)
# attention
for B, H, S, D in ([(1, 2, 50, 16)] if small else [(4, 32, 4096, 128), (16, 16, 1024, 64), (2, 4, 1000, 128)]):
    q, k, v = (torch.randn(B, H, S, D, dtype=bf, device=dev) for _ in range(3))
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True) if dev == "cpu" else \
          F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
    kw = dict(BLOCK_M=16, BLOCK_N=16) if small else ({} if D == 128 else dict(BLOCK_M=128, BLOCK_N=64, num_warps=4))
    report(f"attention {B}x{H}x{S}x{D}", K.attention(q, k, v, **kw), ref)
# topk
for M, N, k in ([(3, 100, 5), (2, 64, 8)] if small else [(4096, 256, 8), (64, 32000, 50), (8192, 1000, 16)]):
    x = torch.randn(M, N, device=dev).to(bf)
    x[0, :10] = 10.0   # ties at the top
    v, i = K.topk(x, k)
    rv, ri = torch.topk(x.float(), k)
    ok_v = torch.equal(v.float(), rv); ok_i = torch.equal(x.gather(1, i), v)
    print(f"topk {M}x{N} k={k}: values_equal={ok_v} gather_ok={ok_i} idx_dtype={i.dtype}")
    if M >= 1: print("  tie row idx:", i[0, :min(k, 12)].tolist())
