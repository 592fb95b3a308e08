"""KernelBench level-1 problems through the trusted evaluator (run on a CUDA machine).

    python benchmarks/kernelbench.py --kernelbench /path/to/KernelBench --out DIR [--problems 19_ReLU ...]
        [--kernels honest passthrough]

For each problem: an honest Triton `ModelNew` written here (it must be accepted) and a passthrough
`ModelNew` calling the very torch function the problem's Model calls (it must be rejected), each
judged once. Writes DIR/results.json and DIR/results.md: verdict, reasons, time against the best
library, fraction of speed of light, the judge's cost, the device and versions, and the command.
The problems are not part of this repository: give a KernelBench checkout.
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

_ELEMENTWISE = '''import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _k(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(y_ptr + offs, {expr}, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        _k[(triton.cdiv(n, 4096),)](x, y, n, BLOCK=4096, num_warps=8)
        return y
'''

HONEST = {
    "19_ReLU": _ELEMENTWISE.format(expr="tl.maximum(x, 0.0)"),
    "25_Swish": _ELEMENTWISE.format(expr="x * tl.sigmoid(x)"),
    "23_Softmax": '''import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _softmax(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    base = row * n
    m = tl.full([BLOCK], float("-inf"), tl.float32)
    s = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n, BLOCK):  # online max and sum, one read
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + base + offs, mask=offs < n, other=float("-inf")).to(tl.float32)
        new = tl.maximum(m, x)
        s = s * tl.exp(m - new) + tl.where(x > float("-inf"), tl.exp(x - new), 0.0)
        m = new
    mx = tl.max(m, 0)
    total = tl.sum(s * tl.exp(m - mx), 0)
    for start in range(0, n, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + base + offs, mask=offs < n, other=0.0).to(tl.float32)
        tl.store(y_ptr + base + offs, tl.exp(x - mx) / total, mask=offs < n)


class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        _softmax[(x.shape[0],)](x, y, x.shape[1], BLOCK=4096, num_warps=8)
        return y
''',
    "36_RMSNorm_": '''import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _rms(x_ptr, y_ptr, F, inner, eps, BLOCK: tl.constexpr):
    # x [B, F, inner]: one program per (b, block of inner positions), the F values strided by inner
    b = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < inner
    base = b * F * inner
    acc = tl.zeros([BLOCK], tl.float32)
    for f in range(0, F):
        v = tl.load(x_ptr + base + f * inner + cols, mask=mask, other=0.0).to(tl.float32)
        acc += v * v
    r = tl.sqrt(acc / F + eps)
    for f in range(0, F):
        v = tl.load(x_ptr + base + f * inner + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + base + f * inner + cols, v / r, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, num_features, eps=1e-5):
        super().__init__()
        self.eps = eps

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        B, F = x.shape[0], x.shape[1]
        inner = x.numel() // (B * F)
        _rms[(B, triton.cdiv(inner, 1024))](x, y, F, inner, self.eps, BLOCK=1024, num_warps=4)
        return y
''',
    "1_Square_matrix_multiplication_": '''import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _mm(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None].to(tl.int64) * K + (k + rk)[None, :],
                    mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k + rk)[:, None].to(tl.int64) * N + rn[None, :],
                    mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b, input_precision="ieee")  # float32 products, as torch.matmul gives
    tl.store(c_ptr + rm[:, None].to(tl.int64) * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()

    def forward(self, A, B):
        A, B = A.contiguous(), B.contiguous()
        M, K = A.shape
        N = B.shape[1]
        C = torch.empty(M, N, dtype=torch.float32, device=A.device)
        _mm[(triton.cdiv(M, 64), triton.cdiv(N, 64))](A, B, C, M, N, K, BM=64, BN=64, BK=32, num_warps=4)
        return C
''',
}

PASSTHROUGH = {
    "19_ReLU": "return torch.relu(x)",
    "25_Swish": "return x * torch.sigmoid(x)",
    "23_Softmax": "return torch.softmax(x, dim=1)",
    "36_RMSNorm_": "return x / torch.sqrt(torch.mean(x ** 2, dim=1, keepdim=True) + 1e-5)",
    "1_Square_matrix_multiplication_": "return torch.matmul(x, y)",
}


def passthrough(problem: str) -> str:
    args = "x, y" if "matrix" in problem else "x"
    return (f"import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def __init__(self, *args):\n"
            f"        super().__init__()\n\n    def forward(self, {args}):\n        {PASSTHROUGH[problem]}\n")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kernelbench", required=True, type=Path, help="a KernelBench checkout (or its level1 folder)")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--problems", nargs="+", default=["19_ReLU", "1_Square_matrix_multiplication_"])
    p.add_argument("--kernels", nargs="+", choices=["honest", "passthrough"], default=["honest", "passthrough"],
                   help="which ModelNew to judge per problem (default both; a large problem's evaluation takes minutes)")
    a = p.parse_args()
    from ablate.evaluate import evaluate
    from ablate.evaluate._gpu import device_info

    a.out.mkdir(parents=True, exist_ok=True)
    node = {"source": "kernelbench", "path": str(a.kernelbench.resolve()), "level": 1, "names": list(a.problems)}
    rows, work = [], Path(tempfile.mkdtemp())
    for problem in a.problems:
        kinds = {"honest": ("honest Triton ModelNew", HONEST[problem]),
                 "passthrough": ("passthrough ModelNew", passthrough(problem))}
        for kind, src in (kinds[k] for k in a.kernels):
            f = work / f"{problem}-{kind.split()[0]}.py"
            f.write_text(src)
            print(f"{problem}: {kind} ...", flush=True)
            t0 = time.monotonic()
            r = evaluate(f"kernelbench/{problem}", f, shapes="eval", operator_set=node, progress=lambda m: print(f"  [{time.strftime('%H:%M:%S')}] {m}", flush=True))
            s = (r.get("shapes") or [{}])[0]
            rows.append({"problem": problem, "kernel": kind, "verdict": r["verdict"], "reasons": r["reasons"],
                         "details": {k: v[:300] for k, v in r["details"].items()},
                         "time_ms": (s.get("time_ms") or {}).get("median"), "best_baseline": s.get("best_baseline"),
                         "best_ms": (s.get("baselines_ms") or {}).get(s.get("best_baseline")),
                         "speedup": s.get("speedup_vs_best"), "sol_fraction": s.get("sol_fraction"),
                         "margin": s.get("margin"), "seconds": round(time.monotonic() - t0, 1),
                         "phase_seconds": r.get("phase_seconds"), "shape_seconds": s.get("seconds")})
            print(f"  -> {r['verdict']} {','.join(r['reasons'])} in {rows[-1]['seconds']} s", flush=True)
            (a.out / "results.json").write_text(json.dumps({"rows": rows}, indent=1, default=str))
    import torch

    info = device_info("cuda" if torch.cuda.is_available() else "cpu")
    cmd = "python benchmarks/kernelbench.py " + " ".join(shlex.quote(x) for x in sys.argv[1:])
    lines = [f"# KernelBench level 1 through the evaluator", "", f"Device: {info['name']}, driver {info['driver']}, "
             f"torch {info['torch']}, triton {info['triton']}. Command: `{cmd}`", "",
             "| problem | kernel | verdict | reasons | ms | best library | ms | speedup | SOL | margin | s |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    fmt = lambda x, f: "-" if x is None else format(x, f)  # noqa: E731
    for r in rows:
        lines.append(f"| {r['problem']} | {r['kernel']} | {r['verdict']} | {', '.join(r['reasons']) or '-'} | "
                     f"{fmt(r['time_ms'], '.4g')} | {r['best_baseline'] or '-'} | {fmt(r['best_ms'], '.4g')} | "
                     f"{fmt(r['speedup'], '.3f')} | {fmt(r['sol_fraction'], '.0%')} | {fmt(r['margin'], '.2f')} | "
                     f"{r['seconds']} |")
    (a.out / "results.json").write_text(json.dumps({"device": info, "command": cmd, "rows": rows}, indent=1, default=str))
    (a.out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
