import os, sys, json
import torch, triton, triton.language as tl
import torch.nn.functional as F
from triton.testing import do_bench
import kb_kernels as K

print("triton", triton.__version__, "torch", torch.__version__, torch.cuda.get_device_name())
print("has tl.topk", hasattr(tl, "topk"), "has make_tensor_descriptor", hasattr(tl, "make_tensor_descriptor"),
      "has tl.range", hasattr(tl, "range"))
try:
    from triton.tools.tensor_descriptor import TensorDescriptor; print("host TensorDescriptor ok")
except Exception as e: print("no host TensorDescriptor", e)
p = torch.cuda.get_device_properties(0)
print("SMs", p.multi_processor_count, "L2", getattr(p, "L2_cache_size", None), "smem/block optin", getattr(p, "shared_memory_per_block_optin", None),
      "smem/SM", getattr(p, "shared_memory_per_multiprocessor", None))
BW = 4.24e12; MM = 691e12
bf = torch.bfloat16
def t(fn): return do_bench(fn, warmup=25, rep=100, return_mode="median")
def line(name, ms, bytes_=0, flops=0):
    sol = max(bytes_ / BW, flops / MM) / (ms * 1e-3)
    print(f"{name:60s} {ms*1e3:9.1f} us  SOL {sol*100:5.1f}%", flush=True)

# ceilings
x = torch.empty(2**30, dtype=torch.uint8, device="cuda"); y = torch.empty_like(x)
ms = t(lambda: y.copy_(x)); print(f"copy 1GiB: {2*2**30/ms/1e9:.0f} GB/s"); del x, y
a = torch.randn(8192, 8192, dtype=bf, device="cuda"); b = torch.randn(8192, 8192, dtype=bf, device="cuda")
ms = t(lambda: a @ b); print(f"cublas 8192^3: {2*8192**3/ms/1e9:.0f} TFLOP/s")
tiny = torch.zeros(1, device="cuda")
print(f"tiny torch add: {t(lambda: tiny.add_(1))*1e3:.1f} us")
@triton.jit
def _noop(p): pass
print(f"empty triton kernel: {t(lambda: _noop[(1,)](tiny))*1e3:.1f} us")

# rmsnorm
for M, N in [(16384, 4096), (32768, 8192), (4000, 7168), (8192, 5120)]:
    x = torch.randn(M, N, dtype=bf, device="cuda"); w = torch.randn(N, dtype=bf, device="cuda")
    nb = 2 * (2 * M * N + N)
    for nw in (4, 8, 16, 32):
        line(f"rmsnorm {M}x{N} warps={nw}", t(lambda: K.rmsnorm(x, w, num_warps=nw)), nb)
    line(f"rmsnorm {M}x{N} F.rms_norm", t(lambda: F.rms_norm(x, (N,), w, 1e-6)), nb)
for M, N in [(65536, 512), (65536, 1024)]:
    x = torch.randn(M, N, dtype=bf, device="cuda"); w = torch.randn(N, dtype=bf, device="cuda")
    nb = 2 * (2 * M * N + N)
    line(f"rmsnorm {M}x{N} 1row", t(lambda: K.rmsnorm(x, w, num_warps=4)), nb)
    line(f"rmsnorm_rows {M}x{N}", t(lambda: K.rmsnorm_rows(x, w)), nb)
# softmax
for M, N in [(16384, 4096), (8192, 32768), (4096, 128256)]:
    x = torch.randn(M, N, dtype=bf, device="cuda"); nb = 2 * 2 * M * N
    if N <= 32768:
        for nw in (8, 16, 32):
            line(f"softmax {M}x{N} 1pass warps={nw}", t(lambda: K.softmax(x, num_warps=nw)), nb)
    for B, nw in ((2048, 4), (4096, 8), (8192, 16)):
        line(f"softmax_online {M}x{N} BLOCK={B} warps={nw}", t(lambda: K.softmax_online(x, B, nw)), nb)
    line(f"softmax {M}x{N} torch", t(lambda: torch.softmax(x, -1)), nb)
# cross entropy
for M in (8192, 1024):
    N = 128256
    x = torch.randn(M, N, dtype=bf, device="cuda"); tg = torch.randint(0, N, (M,), device="cuda")
    nb = 2 * M * N + 8 * M
    for B, nw in ((2048, 4), (4096, 8), (8192, 8), (8192, 16), (16384, 16)):
        line(f"cross_entropy {M}x{N} BLOCK={B} warps={nw}", t(lambda: K.cross_entropy(x, tg, BLOCK=B, num_warps=nw)), nb)
    line(f"cross_entropy {M}x{N} torch eager", t(lambda: F.cross_entropy(x, tg)), nb)
# swiglu
for M, N in [(16384, 14336)]:
    g = torch.randn(M, N, dtype=bf, device="cuda"); u = torch.randn(M, N, dtype=bf, device="cuda")
    nb = 3 * 2 * M * N
    for B, nw in ((1024, 4), (2048, 4), (4096, 8), (8192, 8)):
        line(f"swiglu {M}x{N} BLOCK={B} warps={nw}", t(lambda: K.swiglu(g, u, B, nw)), nb)
    line(f"swiglu {M}x{N} torch eager", t(lambda: F.silu(g) * u), nb)
# rope
for B, S, H, D in [(4, 4096, 32, 128), (8, 2048, 8, 128)]:
    x = torch.randn(B, S, H, D, dtype=bf, device="cuda")
    ang = torch.arange(S, device="cuda", dtype=torch.float32)[:, None] * (10000 ** (-torch.arange(0, D, 2, device="cuda").float() / D))
    cos, sin = ang.cos().to(bf), ang.sin().to(bf)
    nb = 2 * 2 * B * S * H * D + 2 * 2 * S * D // 2
    for inter in (False, True):
        line(f"rope {B}x{S}x{H}x{D} inter={inter}", t(lambda: K.rope(x, cos, sin, inter)), nb)
# gemm
for M, N, Kd in [(8192, 8192, 8192), (4096, 4096, 4096), (16384, 1024, 4096)]:
    a = torch.randn(M, Kd, dtype=bf, device="cuda"); b = torch.randn(Kd, N, dtype=bf, device="cuda")
    fl = 2 * M * N * Kd
    for cfg in K.GEMM_CONFIGS:
        c = dict(cfg.kwargs, num_warps=cfg.num_warps, num_stages=cfg.num_stages)
        try:
            line(f"gemm {M}x{N}x{Kd} {c}", t(lambda: K.matmul(a, b, c)), 0, fl)
        except Exception as e:
            print("gemm cfg fail", c, str(e)[:100])
    line(f"gemm {M}x{N}x{Kd} cublas", t(lambda: a @ b), 0, fl)
# grouped gemm
T, Kd, N, E = 16384, 4096, 1408, 64
cuts = torch.sort(torch.randint(0, T + 1, (E - 1,))).values
sizes = torch.diff(torch.cat([torch.tensor([0]), cuts, torch.tensor([T])]))
offs = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(sizes, 0)]).to(torch.int32).cuda()
x = torch.randn(T, Kd, dtype=bf, device="cuda"); w = torch.randn(E, Kd, N, dtype=bf, device="cuda")
fl = 2 * T * Kd * N; nb = 2 * (T * Kd + E * Kd * N + T * N)
for BM, BN, BK, nw, ns in ((128, 128, 64, 8, 3), (64, 128, 64, 4, 4), (128, 256, 64, 8, 3)):
    line(f"grouped_mm T={T} K={Kd} N={N} E={E} {BM}x{BN}x{BK} w{nw} s{ns}",
         t(lambda: K.grouped_mm(x, w, offs, BM, BN, BK, nw, ns)), nb, fl)
line("grouped_mm loop of torch mm", t(lambda: [x[offs[e]:offs[e+1]] @ w[e] for e in range(E)]), nb, fl)
# attention
for B, H, S, D in [(4, 32, 4096, 128), (16, 16, 1024, 64)]:
    q, k, v = (torch.randn(B, H, S, D, dtype=bf, device="cuda") for _ in range(3))
    fl = 2 * B * H * S * S * D
    for BM, BN, nw, ns in ((128, 64, 8, 3), (128, 128, 8, 3), (128, 64, 4, 3), (64, 64, 4, 3), (128, 32, 4, 4)):
        try:
            line(f"attention {B}x{H}x{S}x{D} {BM}x{BN} w{nw} s{ns}", t(lambda: K.attention(q, k, v, None, BM, BN, nw, ns)), 0, fl)
        except Exception as e:
            print("attn cfg fail", BM, BN, nw, ns, str(e)[:100])
    line(f"attention {B}x{H}x{S}x{D} sdpa", t(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)), 0, fl)
# topk
for M, N, k in [(4096, 256, 8), (8192, 1024, 16), (64, 32000, 50)]:
    x = torch.randn(M, N, device="cuda").to(bf); nb = 2 * M * N + M * k * 10
    try:
        line(f"topk {M}x{N} k={k}", t(lambda: K.topk(x, k)), nb)
    except Exception as e:
        print("topk fail", M, N, k, str(e)[:200])
    line(f"topk {M}x{N} k={k} torch", t(lambda: torch.topk(x, k)), nb)
# compiled kernel introspection
x = torch.randn(16384, 4096, dtype=bf, device="cuda"); w = torch.randn(4096, dtype=bf, device="cuda"); y = torch.empty_like(x)
try:
  ck = K.rmsnorm_kernel[(16384,)](x, w, y, x.stride(0), y.stride(0), 4096, 1e-6, BLOCK_N=4096, num_warps=8)
  print("compiled:", type(ck).__name__, "n_regs", getattr(ck, "n_regs", None), "n_spills", getattr(ck, "n_spills", None), "asm keys", list(ck.asm.keys()))
  ptx = ck.asm["ptx"]; print("ld.global.v4 in ptx:", "ld.global.v4" in ptx, " ld.global.L1::evict_last/v4.b32 count", ptx.count("ld.global"))
except Exception as e:
  print("introspection fail", e)
