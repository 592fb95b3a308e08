"""bf16 GEMM (c = a @ b.T, the Linear layer), fp32 accumulation."""
from pathlib import Path

import torch

from ablate.operators._baselines import compiled
from ablate.operators._correctness import TOLERANCE
from ablate.operators._inputs import dtype_of, esize, generator, tensor
from ablate.operators._library_ops import MATMUL_CALLS, MATMUL_OPS
from ablate.operators._operator import Baseline, Operator, load_module

HERE = Path(__file__).parent
_ref = load_module(HERE / "reference.py", "ablate.operators.gemm.reference")


def make_inputs(shape, seed, device, dist):
    g = generator(seed, device)
    dtype = dtype_of(shape)
    a = tensor((shape["M"], shape["K"]), dist, g, dtype, device)
    b = tensor((shape["N"], shape["K"]), dist, g, dtype, device)
    return a, b


def _bytes(shape):
    M, N, K = shape["M"], shape["N"], shape["K"]
    return esize(shape) * (M * K + N * K + M * N)


def _flops(shape):
    return 2 * shape["M"] * shape["N"] * shape["K"]


def _matmul(a, b):
    return torch.matmul(a, b.T)  # cuBLAS on GPU; bf16 tensor cores accumulate in float32


SMOKE = [{"M": 64, "N": 48, "K": 40, "dtype": "bfloat16"}, {"M": 33, "N": 17, "K": 70, "dtype": "bfloat16"}]
PUBLIC = [{"M": 8192, "N": 8192, "K": 8192, "dtype": "bfloat16"}]
HIDDEN = [
    {"M": 4096, "N": 4096, "K": 4096, "dtype": "bfloat16"},
    {"M": 16384, "N": 1024, "K": 4096, "dtype": "bfloat16"},
    {"M": 4000, "N": 14336, "K": 4096, "dtype": "bfloat16"},
    {"M": 8192, "N": 4096, "K": 14336, "dtype": "bfloat16"},
]

OPERATOR = Operator(
    name="gemm",
    goal=(
        "Implement a bfloat16 matrix multiply in the Linear layout: c = a @ b.T for a [M, K] and "
        "b [N, K] (both bfloat16, contiguous), products accumulated in float32, returned as "
        "bfloat16 c [M, N]. reference.py holds the exact definition."
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
        "cublas": Baseline("cublas", _matmul),
        "torch_compile": Baseline("torch_compile", compiled(_matmul), needs_cuda=True),
        "torch_compile_max_autotune": Baseline(
            "torch_compile_max_autotune", compiled(_matmul, "max-autotune"), needs_cuda=True
        ),
    },
    library_calls=(
        "torch.matmul", "torch.mm", "torch.bmm", "torch.addmm", "torch.einsum", "torch.tensordot",
        "torch.nn.functional.linear", "F.linear", "torch.nn.Linear", "Tensor.matmul",
        "Tensor.mm", "@", "torch._scaled_mm", "torch._grouped_mm", "quack",
    ) + MATMUL_CALLS,
    library_ops=MATMUL_OPS,
    task_files={"reference.py": HERE / "reference.py"},
    why_shapes="Square 4096/8192 GEMMs and Llama-3 8B projections (hidden 4096, MLP 14336, 1024-wide KV projection) over token batches; 4000 rows is not a power of two.",
)
