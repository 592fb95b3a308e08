"""Row-wise top-k values and indices (MoE routers, sampling), bf16."""
from pathlib import Path

import torch

from ablate.operators._baselines import compile_baselines, flashinfer_unavailable
from ablate.operators._inputs import dtype_of, esize, generator, tensor
from ablate.operators._operator import Baseline, Operator, load_module

HERE = Path(__file__).parent
_ref = load_module(HERE / "reference.py", "ablate.operators.topk.reference")


def make_inputs(shape, seed, device, dist):
    # k is part of the shape, not drawn: the output size and the roofline depend on it, and a
    # model fixes it (a router's top-8, a sampler's top-50).
    g = generator(seed, device)
    return tensor((shape["M"], shape["N"]), dist, g, dtype_of(shape), device), shape["k"]


def _bytes(shape):
    M, N, k = shape["M"], shape["N"], shape["k"]
    return esize(shape) * M * N + M * k * (esize(shape) + 8)


def _flops(shape):
    return shape["M"] * shape["N"]  # at least one comparison per element


def _sort(x, k):
    values, indices = torch.sort(x, dim=-1, descending=True)
    return values[:, :k].contiguous(), indices[:, :k].contiguous()


def _flashinfer(x, k):
    import flashinfer

    return flashinfer.top_k(x, k, sorted=True)  # (values, int64 indices), descending


SMOKE = [{"M": 4, "N": 512, "k": 8, "dtype": "bfloat16"}, {"M": 5, "N": 1000, "k": 13, "dtype": "bfloat16"}]
PUBLIC = [
    {"M": 256, "N": 128256, "k": 50, "dtype": "bfloat16"},
    {"M": 16384, "N": 256, "k": 8, "dtype": "bfloat16"},
]
HIDDEN = [
    {"M": 100, "N": 151936, "k": 20, "dtype": "bfloat16"},
    {"M": 32768, "N": 128, "k": 8, "dtype": "bfloat16"},
    {"M": 3000, "N": 160, "k": 6, "dtype": "bfloat16"},
]

OPERATOR = Operator(
    name="topk",
    goal=(
        "Implement row-wise top-k of a bfloat16 matrix x [M, N] for a Python int k: return the "
        "tuple (values [M, k] bfloat16, indices [M, k] int64) holding each row's k largest values "
        "in descending order and their column indices. Where values tie, any of the tied columns "
        "is accepted: values must match exactly, x[i, indices[i, j]] must equal values[i, j], and "
        "a row's indices must be distinct. Shapes span wide rows (a vocabulary, sampling) and "
        "narrow ones (MoE router scores). reference.py holds the exact definition."
    ),
    reference=_ref.reference,
    make_inputs=make_inputs,
    shapes={"smoke": SMOKE, "public": PUBLIC, "eval": PUBLIC + HIDDEN},
    tolerance={"bfloat16": 0.0, "float16": 0.0, "float32": 0.0},  # exact (the topk rule)
    bytes=_bytes,
    flops=_flops,
    baselines={
        "torch_eager": Baseline("torch_eager", _ref.reference),
        "torch_sort": Baseline("torch_sort", _sort),
        **compile_baselines(_ref.reference),
        "flashinfer": Baseline("flashinfer", _flashinfer, flashinfer_unavailable, needs_cuda=True),
    },
    library_calls=(
        # no "Tensor.sort": it would flag list.sort() in host code
        "torch.topk", "Tensor.topk", "torch.sort", "torch.argsort", "Tensor.argsort", "torch.kthvalue",
        "torch.msort", "flashinfer", "vllm", "quack",
    ),
    library_ops=("aten::topk", "aten::sort", "aten::argsort", "aten::kthvalue", "aten::msort"),
    task_files={"reference.py": HERE / "reference.py"},
    why_shapes="Sampling top-k over Llama-3 (128256) and Qwen (151936) vocabularies, and MoE routing over 256 (DeepSeek-V3, top-8), 128 (Qwen3, top-8) and 160 (DeepSeek-V2, top-6) experts; 100 and 3000 rows are not powers of two.",
    rule="topk",
)
