"""Time the scripted top-k template's two passes apart (chunk top-k, then merge) on wide rows,
filtered and not, with CUDA events through torch.profiler; torch.topk beside them (a GPU run).

    python -m benchmarks.topk_passes [--shapes 256,128256,50 100,151936,20] [--calls 20]

One JSON line per (shape, configuration): each pass's mean device ms and whether the values
equal torch.topk's."""
from __future__ import annotations

import argparse
import json

import torch

from ablate.operators._operator import load_module

TEMPLATE = "harnesses/scripted/templates/topk.py"
CONFIGS = ((4096, 4, 0), (4096, 4, 1), (8192, 8, 0), (8192, 8, 1), (2048, 4, 0), (512, 8, 1), (16384, 8, 1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", nargs="+", default=["256,128256,50", "100,151936,20"], help="M,N,k of each shape")
    ap.add_argument("--calls", type=int, default=20, help="profiled calls per configuration")
    args = ap.parse_args()
    t = load_module(TEMPLATE, "topk_template")
    cuda = torch.profiler.ProfilerActivity.CUDA
    for spec in args.shapes:
        M, N, k = (int(v) for v in spec.split(","))
        x = torch.randn(M, N, device="cuda", dtype=torch.bfloat16)
        for chunk, warps, filt in CONFIGS:
            t.CONFIG = {"chunk": chunk, "rows": 8, "num_warps": warps, "filter": filt}
            for _ in range(3):
                t.kernel(x, k)
            torch.cuda.synchronize()
            with torch.profiler.profile(activities=[cuda]) as p:
                for _ in range(args.calls):
                    t.kernel(x, k)
                torch.cuda.synchronize()
            ms = {e.key: round(e.device_time_total / e.count / 1e3, 4) for e in p.key_averages()
                  if e.device_type == torch.autograd.DeviceType.CUDA and e.count}
            print(json.dumps({"shape": [M, N, k], "chunk": chunk, "warps": warps, "filter": filt, "ms": ms,
                              "same_as_torch": bool(torch.equal(t.kernel(x, k)[0], torch.topk(x, k).values))}),
                  flush=True)
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(args.calls):
            torch.topk(x, k)
        e.record()
        e.synchronize()
        print(json.dumps({"shape": [M, N, k], "torch.topk_ms_warm": round(s.elapsed_time(e) / args.calls, 4)}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
