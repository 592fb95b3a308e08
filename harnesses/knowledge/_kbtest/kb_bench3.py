import torch, triton
import torch.nn.functional as F
from triton.testing import do_bench
import kb_kernels as K, kb_kernels2 as K2
MM = 691e12; bf = torch.bfloat16
def t(fn): return do_bench(fn, warmup=25, rep=100, return_mode="median")
for B, H, S, D in [(4, 32, 4096, 128), (16, 16, 1024, 64), (8, 16, 2048, 128)]:
    q, k, v = (torch.randn(B, H, S, D, dtype=bf, device="cuda") for _ in range(3))
    fl = 2 * B * H * S * S * D
    for BM, BN, nw, ns in ((128, 64, 8, 3), (128, 64, 8, 4), (128, 128, 8, 2), (128, 128, 8, 3), (64, 64, 4, 3), (128, 64, 4, 3)):
        try:
            ms = t(lambda: K2.attention_tma(q, k, v, None, BM, BN, nw, ns))
            print(f"attention_tma {B}x{H}x{S}x{D} {BM}x{BN} w{nw} s{ns}: {ms*1e3:8.1f} us  {fl/ms/1e9:6.0f} TFLOP/s  {fl/MM/(ms*1e-3)*100:5.1f}% of 691", flush=True)
        except Exception as e: print("fail", BM, BN, nw, ns, str(e)[:120])
    from torch.nn.attention import sdpa_kernel, SDPBackend
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        ms = t(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    print(f"cudnn {B}x{H}x{S}x{D}: {ms*1e3:8.1f} us  {fl/ms/1e9:6.0f} TFLOP/s  {fl/MM/(ms*1e-3)*100:5.1f}%")
