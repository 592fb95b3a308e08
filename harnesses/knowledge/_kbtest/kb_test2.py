import os, torch, triton
import kb_kernels as K, kb_kernels2 as K2
from kb_util import rope_ref, rel, report
dev = "cuda" if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1" else "cpu"
small = dev == "cpu"; bf = torch.bfloat16
for B, S, H, D in ([(2, 5, 3, 16)] if small else [(4, 4096, 32, 128), (2, 1000, 8, 64), (8, 2048, 8, 128)]):
    x = torch.randn(B, S, H, D, dtype=bf, device=dev)
    ang = torch.arange(S, device=dev, dtype=torch.float32)[:, None] * (10000 ** (-torch.arange(0, D, 2, device=dev).float() / D))
    cos, sin = ang.cos().to(bf), ang.sin().to(bf)
    for inter in (False, True):
        report(f"rope_pairs {'inter' if inter else 'half'} {B}x{S}x{H}x{D}", K2.rope_pairs(x, cos, sin, inter), rope_ref(x, cos, sin, inter))
for M, N, k in ([(3, 100, 5), (2, 3000, 8)] if small else [(64, 32000, 50), (128, 128256, 8), (4096, 256, 8), (1000, 5000, 1), (7, 300, 3)]):
    x = torch.randn(M, N, device=dev).to(bf); x[0, 17:30] = 10.0
    v, i = K2.topk_chunked(x, k, CHUNK=256 if small else 4096)
    rv, ri = torch.topk(x.float(), k)
    print(f"topk_chunked {M}x{N} k={k}: values_equal={torch.equal(v.float(), rv)} gather_ok={torch.equal(x.gather(1, i), v)} row0={i[0,:6].tolist()}")
if not small:
    for M, N, Kd in [(4096, 4096, 4096), (1000, 3000, 1000), (16384, 1024, 4096)]:
        a = torch.randn(M, Kd, dtype=bf, device=dev); b = torch.randn(Kd, N, dtype=bf, device=dev)
        report(f"gemm_tma {M}x{N}x{Kd}", K2.matmul_tma(a, b), a.double() @ b.double())
        report(f"gemm_tma_np {M}x{N}x{Kd}", K2.matmul_tma(a, b, persistent=False), a.double() @ b.double())

    import torch.nn.functional as F
    for B, H, S, D in [(4, 32, 4096, 128), (16, 16, 1024, 64), (2, 4, 1000, 128), (2, 3, 77, 64)]:
        q, k, v = (torch.randn(B, H, S, D, dtype=bf, device=dev) for _ in range(3))
        ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
        report(f"attention_tma {B}x{H}x{S}x{D}", K2.attention_tma(q, k, v), ref)
        qt = torch.randn(B, S, H, D, dtype=bf, device=dev).transpose(1, 2)   # [B,H,S,D] view of [B,S,H,D]
        ref = F.scaled_dot_product_attention(qt.float(), k.float(), v.float(), is_causal=True)
        report(f"attention_tma strided-q {B}x{H}x{S}x{D}", K2.attention_tma(qt, k, v), ref)
