"""Grouped GEMM of MoE experts with uneven token counts per expert, bf16."""
from pathlib import Path

import torch

from ablate.operators._baselines import compiled
from ablate.operators._correctness import TOLERANCE
from ablate.operators._inputs import dtype_of, esize, generator, tensor
from ablate.operators._library_ops import MATMUL_CALLS, MATMUL_OPS
from ablate.operators._operator import Baseline, Operator, load_module

HERE = Path(__file__).parent
_ref = load_module(HERE / "reference.py", "ablate.operators.grouped_gemm.reference")


def group_sizes(T: int, E: int, g: torch.Generator) -> torch.Tensor:
    """Uneven token counts per expert, summing to T: skewed router load, some experts possibly empty."""
    weights = torch.rand(E, generator=g) ** 3  # cubing skews the load as a real router does
    sizes = (weights / weights.sum() * T).floor().long()
    rest = T - int(sizes.sum())
    sizes += torch.multinomial(weights + 1e-6, rest, replacement=True, generator=g).bincount(minlength=E) if rest else 0
    return sizes


def make_inputs(shape, seed, device, dist):
    g = generator(seed, device)
    dtype = dtype_of(shape)
    T, E, N, K = shape["T"], shape["E"], shape["N"], shape["K"]
    x = tensor((T, K), dist, g, dtype, device)
    w = tensor((E, N, K), dist, g, dtype, device)
    offs = group_sizes(T, E, g).cumsum(0).to(torch.int32).to(device)  # drawn from the seed too
    return x, w, offs


def _bytes(shape):
    T, E, N, K = shape["T"], shape["E"], shape["N"], shape["K"]
    return esize(shape) * (T * K + E * N * K + T * N) + 4 * E


def _flops(shape):
    return 2 * shape["T"] * shape["N"] * shape["K"]


def _loop(x, w, offs):
    """One cuBLAS call per expert: what a plain PyTorch MoE does."""
    out = torch.empty(x.shape[0], w.shape[1], dtype=x.dtype, device=x.device)
    start = 0
    for e, end in enumerate(offs.tolist()):
        torch.matmul(x[start:end], w[e].T, out=out[start:end])
        start = end
    return out


def _grouped_mm(x, w, offs):
    return torch._grouped_mm(x, w.transpose(-2, -1), offs=offs)


def _grouped_mm_unavailable():
    if not hasattr(torch, "_grouped_mm"):
        return f"torch {torch.__version__} has no torch._grouped_mm"
    if torch.cuda.is_available() and torch.cuda.get_device_capability() < (8, 0):
        return "torch._grouped_mm needs compute capability 8.0 or newer"
    return None


SMOKE = [
    {"T": 40, "E": 4, "N": 24, "K": 32, "dtype": "bfloat16"},
    {"T": 37, "E": 3, "N": 20, "K": 48, "dtype": "bfloat16"},
]
PUBLIC = [{"T": 16384, "E": 8, "N": 14336, "K": 4096, "dtype": "bfloat16"}]
HIDDEN = [
    {"T": 32768, "E": 128, "N": 768, "K": 2048, "dtype": "bfloat16"},
    {"T": 12288, "E": 64, "N": 1408, "K": 2048, "dtype": "bfloat16"},
    {"T": 6000, "E": 32, "N": 2048, "K": 7168, "dtype": "bfloat16"},
]

OPERATOR = Operator(
    name="grouped_gemm",
    goal=(
        "Implement the grouped GEMM of a mixture-of-experts layer: x [T, K] bfloat16 holds tokens "
        "sorted by expert, w [E, N, K] bfloat16 holds one Linear weight per expert, and offs [E] "
        "int32 holds the cumulative group ends (expert e owns rows offs[e-1]:offs[e], with 0 before "
        "the first; groups are uneven and may be empty; offs[E-1] == T). Return out [T, N] bfloat16 "
        "where each group's rows are x_rows @ w[e].T, accumulated in float32. Group sizes change "
        "from call to call. reference.py holds the exact definition."
    ),
    reference=_ref.reference,
    make_inputs=make_inputs,
    shapes={"smoke": SMOKE, "public": PUBLIC, "eval": PUBLIC + HIDDEN},
    # Errors are relative to the output's scale: a contraction's rounding grows with its operands.
    tolerance=TOLERANCE,
    bytes=_bytes,
    flops=_flops,
    baselines={
        "torch_eager": Baseline("torch_eager", _ref.reference),
        "torch_loop_matmul": Baseline("torch_loop_matmul", _loop),
        "torch._grouped_mm": Baseline("torch._grouped_mm", _grouped_mm, _grouped_mm_unavailable),
        "torch_compile_grouped_mm": Baseline(
            "torch_compile_grouped_mm", compiled(_grouped_mm), _grouped_mm_unavailable, needs_cuda=True
        ),
        "torch_compile_max_autotune_grouped_mm": Baseline(
            "torch_compile_max_autotune_grouped_mm", compiled(_grouped_mm, "max-autotune"),
            _grouped_mm_unavailable, needs_cuda=True,
        ),
    },
    library_calls=(
        "torch._grouped_mm", "torch.nn.functional.grouped_mm", "torch.matmul", "torch.mm", "torch.bmm",
        "torch.addmm", "torch.einsum", "torch.nn.functional.linear", "F.linear", "Tensor.matmul",
        "Tensor.mm", "@", "megablocks", "liger_kernel", "quack",
    ) + MATMUL_CALLS,
    library_ops=MATMUL_OPS,
    task_files={"reference.py": HERE / "reference.py"},
    why_shapes="MoE experts of Mixtral-8x7B (8 x 14336x4096), Qwen3-30B-A3B (128 x 768x2048), DeepSeek-V2-Lite (64 x 1408x2048) and a 32-expert 7168-hidden layer, top-2 to top-8 routing; group sizes are uneven.",
)
