"""The watch's device record as the library process uses it: (kernel, launching ATen operator) per call, 5 times."""
import torch
import torch.nn.functional as F

from ablate.evaluate._baselines import library_kernels
from ablate.evaluate._watch import OpWatch
from ablate.operators._library_ops import MATMUL_OPS, NORMALISATION_OPS, SOFTMAX_OPS

w = OpWatch((), None, "cuda")
x = torch.randn(16384, 4096, device="cuda", dtype=torch.bfloat16)
wt = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
g = torch.cuda.CUDAGraph()
side = torch.cuda.Stream()
with torch.cuda.stream(side):
    a @ b.t()
torch.cuda.synchronize()
with torch.cuda.graph(g):
    out = a @ b.t()
calls = {"rms_norm": (lambda: F.rms_norm(x, (4096,), wt, 1e-6), NORMALISATION_OPS),
         "softmax": (lambda: torch.softmax(x, -1), SOFTMAX_OPS),
         "matmul": (lambda: a @ b.t(), MATMUL_OPS),
         "graph": (lambda: g.replay(), MATMUL_OPS),
         "copy": (lambda: x.float() * 2, MATMUL_OPS)}
try:
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction
    calls["liger"] = (lambda: LigerRMSNormFunction.apply(x, wt, 1e-6), NORMALISATION_OPS)
except Exception as e:
    print("no liger", e)
for f, _ in calls.values():
    f()
torch.cuda.synchronize()
with w.watch():
    pass
for n, (f, fam) in calls.items():
    for rep in range(5):
        w.forget_kernels()
        with w.watch():
            for _ in range(50):
                f()
            torch.cuda.synchronize()
        ks = w.take_kernels()
        print(n, rep, [(k[:70], op) for k, op in ks], "library:", sorted(k[:50] for k in library_kernels(fam, ks)))
print("tampered", w.tampered)
