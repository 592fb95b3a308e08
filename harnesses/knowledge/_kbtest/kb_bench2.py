import torch, triton
import torch.nn.functional as F
from triton.testing import do_bench
import kb_kernels as K, kb_kernels2 as K2
BW = 4.24e12; MM = 691e12; bf = torch.bfloat16
def t(fn): return do_bench(fn, warmup=25, rep=100, return_mode="median")
def line(name, ms, bytes_=0, flops=0):
    sol = max(bytes_ / BW, flops / MM) / (ms * 1e-3)
    print(f"{name:64s} {ms*1e3:9.1f} us  SOL {sol*100:5.1f}%", flush=True)
x = torch.empty(2**30, dtype=torch.uint8, device="cuda"); y = torch.empty_like(x)
ms = t(lambda: y.copy_(x)); print(f"copy 1GiB: {2*2**30/(ms*1e-3)/1e12:.2f} TB/s"); del x, y
for B, S, H, D in [(4, 4096, 32, 128), (8, 2048, 8, 128), (16, 1024, 16, 64)]:
    x = torch.randn(B, S, H, D, dtype=bf, device="cuda")
    ang = torch.arange(S, device="cuda", dtype=torch.float32)[:, None] * (10000 ** (-torch.arange(0, D, 2, device="cuda").float() / D))
    cos, sin = ang.cos().to(bf), ang.sin().to(bf)
    nb = 2 * 2 * B * S * H * D + 2 * 2 * S * D // 2
    for inter in (False, True):
        line(f"rope strided {B}x{S}x{H}x{D} inter={inter}", t(lambda: K.rope(x, cos, sin, inter)), nb)
        for nw in (2, 4, 8):
            line(f"rope_pairs {B}x{S}x{H}x{D} inter={inter} w{nw}", t(lambda: K2.rope_pairs(x, cos, sin, inter, nw)), nb)
for M, N, k in [(64, 32000, 50), (128, 128256, 8), (4096, 128256, 50), (8192, 1024, 16), (4096, 256, 8)]:
    x = torch.randn(M, N, device="cuda").to(bf); nb = 2 * M * N + M * k * 10
    for C in (1024, 4096):
        try: line(f"topk_chunked {M}x{N} k={k} CHUNK={C}", t(lambda: K2.topk_chunked(x, k, C)), nb)
        except Exception as e: print("fail", str(e)[:150])
    line(f"topk {M}x{N} k={k} torch", t(lambda: torch.topk(x, k)), nb)
for M, N, Kd in [(8192, 8192, 8192), (4096, 4096, 4096), (16384, 1024, 4096), (1000, 3000, 1000)]:
    a = torch.randn(M, Kd, dtype=bf, device="cuda"); b = torch.randn(Kd, N, dtype=bf, device="cuda")
    fl = 2 * M * N * Kd
    for BM, BN, BK, nw, ns in ((128, 256, 64, 8, 3), (128, 256, 64, 8, 4), (128, 128, 64, 8, 4), (128, 128, 64, 4, 4), (128, 128, 128, 8, 3)):
        for pers in (True, False):
            try: line(f"gemm_tma {M}x{N}x{Kd} {BM}x{BN}x{BK} w{nw} s{ns} pers={pers}", t(lambda: K2.matmul_tma(a, b, BM, BN, BK, 8, nw, ns, pers)), 0, fl)
            except Exception as e: print("fail", BM, BN, BK, nw, ns, pers, str(e)[:150])
    line(f"gemm {M}x{N}x{Kd} cublas", t(lambda: a @ b), 0, fl)
for B, H, S, D in [(4, 32, 4096, 128), (16, 16, 1024, 64)]:
    q, k, v = (torch.randn(B, H, S, D, dtype=bf, device="cuda") for _ in range(3))
    fl = 2 * B * H * S * S * D
    for BM, BN, nw, ns in ((128, 128, 8, 2), (128, 128, 8, 4), (128, 64, 8, 2), (128, 64, 8, 4), (64, 64, 4, 2), (64, 64, 4, 4), (64, 32, 4, 3), (64, 128, 4, 3)):
        try: line(f"attention {B}x{H}x{S}x{D} {BM}x{BN} w{nw} s{ns}", t(lambda: K.attention(q, k, v, None, BM, BN, nw, ns)), 0, fl)
        except Exception as e: print("attn fail", BM, BN, nw, ns, str(e)[:100])
    from torch.nn.attention import sdpa_kernel, SDPBackend
    for be in (SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION):
        with sdpa_kernel(be):
            line(f"attention {B}x{H}x{S}x{D} {be}", t(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)), 0, fl)
# cross entropy for few rows: how bad is one program per row?
N = 128256
for M in (128, 1024):
    x = torch.randn(M, N, dtype=bf, device="cuda"); tg = torch.randint(0, N, (M,), device="cuda")
    line(f"cross_entropy {M}x{N} BLOCK=4096 w8 (1 program/row)", t(lambda: K.cross_entropy(x, tg, BLOCK=4096, num_warps=8)), 2 * M * N)
